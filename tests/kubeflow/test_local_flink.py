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
