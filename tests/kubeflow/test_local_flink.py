"""The local Flink cluster's script says in one line what is missing."""

import os
import socket
import subprocess

from pipeline.code_fingerprint import REPO_ROOT

SCRIPT = os.path.join(REPO_ROOT, "kubeflow", "local_flink.sh")


def _start(tmp_path, **env):
  result = subprocess.run(
      [SCRIPT, "start"], capture_output=True, text=True, timeout=60,
      env={**os.environ, "FLINK_CLUSTER_DIR": str(tmp_path / "cluster"),
           "FLINK_CACHE": str(tmp_path / "cache"), **env})
  return result.returncode, result.stderr.strip().splitlines()


def _free_ports():
  """The cluster's port settings, each a port free now: the script checks
  them before it fetches anything."""
  names = ("FLINK_REST_PORT", "FLINK_RPC_PORT", "BEAM_JOB_PORT",
           "BEAM_ARTIFACT_PORT", "BEAM_WORKER_POOL_PORT")
  sockets = [socket.socket() for _ in names]
  for s in sockets:
    s.bind(("localhost", 0))
  ports = {name: str(s.getsockname()[1]) for name, s in zip(names, sockets)}
  for s in sockets:
    s.close()
  return ports


def test_without_java_it_says_so(tmp_path):
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  for tool in ("bash", "dirname", "realpath", "cat", "mvn"):
    found = subprocess.run(["bash", "-c", f"command -v {tool}"],
                           capture_output=True, text=True).stdout.strip()
    if found:
      os.symlink(found, bin_dir / tool)
  code, lines = _start(tmp_path, PATH=str(bin_dir))
  assert code == 1
  assert lines == ["error: Java not found: install OpenJDK 17 (the Flink "
                   "JVMs and the Beam job server need it)"]


def test_a_port_in_use_is_named_before_anything_starts(tmp_path):
  if subprocess.run(["bash", "-c", "command -v java && command -v mvn"],
                    capture_output=True).returncode:
    return  # The Java check comes first: the test above covers it.
  with socket.socket() as taken:
    taken.bind(("localhost", 0))
    taken.listen()
    port = taken.getsockname()[1]
    code, lines = _start(tmp_path, BEAM_WORKER_POOL_PORT=str(port))
  assert code == 1
  assert lines == [f"error: port {port} is in use by another program (set "
                   "its *_PORT variable)"]
  assert not (tmp_path / "cache").exists()  # Nothing fetched.


def test_a_job_server_maven_does_not_serve_is_named_with_mavens_reason(
    tmp_path):
  if subprocess.run(["bash", "-c", "command -v java"],
                    capture_output=True).returncode:
    return  # The Java check comes first: the test above covers it.
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  (bin_dir / "mvn").write_text(
      "#!/bin/sh\n"
      "echo '[ERROR] Failed to execute goal org.apache.maven.plugins:maven-"
      "dependency-plugin:2.8:copy (default-cli) on project standalone-pom: "
      "Unable to find artifact. Could not find artifact org.apache.beam:"
      "beam-runners-flink-1.20-job-server:jar:2.74.0 in central "
      "(https://repo.example/maven2)'\n"
      "exit 1\n")
  (bin_dir / "mvn").chmod(0o755)
  code, lines = _start(tmp_path, PATH=f"{bin_dir}:{os.environ['PATH']}",
                       **_free_ports())
  assert code == 1
  error, = [l for l in lines if l.startswith("error: ")]
  assert error.startswith("error: the Beam Flink job server org.apache.beam:"
                          "beam-runners-flink-1.20-job-server:")
  assert ('Maven says "Could not find artifact org.apache.beam:beam-runners-'
          'flink-1.20-job-server:jar:2.74.0 in central (https://repo.example/'
          'maven2)" (set FLINK_JOB_SERVER_JAR to a jar of your own; log: '
          f'{tmp_path}/cache/mvn.log)') in error
