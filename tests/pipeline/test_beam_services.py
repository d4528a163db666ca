"""The portable run's services are reached before it starts, and the one
that is down is named in a line."""

import socket
import time

from conftest import run_command
from pipeline import beam_services

PORTABLE = ("--runner=PortableRunner", "--job_endpoint=localhost:{job}",
            "--environment_type=EXTERNAL",
            "--environment_config=localhost:{pool}")


def _closed_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def _args(job, pool):
  return tuple(a.format(job=job, pool=pool) for a in PORTABLE)


def test_in_process_runs_need_no_service():
  assert beam_services.endpoints(("--runner=FnApiRunner",)) == {}
  assert beam_services.unreachable(("--runner=FnApiRunner",)) is None


def test_the_job_server_and_the_worker_pool_are_named():
  assert beam_services.endpoints(_args(8099, 50000)) == {
      "the Beam job server": "localhost:8099",
      "the Beam SDK worker pool": "localhost:50000"}
  # A DOCKER environment's config is an image, not an endpoint.
  assert beam_services.endpoints((
      "--job_endpoint=h:1", "--environment_type=DOCKER",
      "--environment_config=apache/beam_python3.10_sdk")) == {
          "the Beam job server": "h:1"}


def test_a_service_that_is_down_is_named_at_once():
  with socket.socket() as job:
    job.bind(("localhost", 0))
    job.listen()
    pool = _closed_port()
    start = time.monotonic()
    message = beam_services.unreachable(_args(job.getsockname()[1], pool))
  assert time.monotonic() - start < 10
  assert message.startswith(
      f"the Beam SDK worker pool at localhost:{pool} is not reachable")
  assert "\n" not in message


def test_all_services_up():
  with socket.socket() as job, socket.socket() as pool:
    for s in (job, pool):
      s.bind(("localhost", 0))
      s.listen()
    assert beam_services.unreachable(
        _args(job.getsockname()[1], pool.getsockname()[1])) is None


def test_run_on_a_cluster_that_is_down_says_so_in_one_line(tmp_path):
  """`run` names the endpoint at once, before any heavy import."""
  data = tmp_path / "train.txt"
  data.write_text("0\t1" + "\t" * 38 + "\n")
  job = _closed_port()
  start = time.monotonic()
  code, out, err = run_command(
      "run", "--dataset", "criteo", "--data", data, "--output",
      tmp_path / "out", "--beam-runner", "flink", "--job-endpoint",
      f"localhost:{job}", "--environment-type", "EXTERNAL",
      "--environment-config", "localhost:50000")
  assert time.monotonic() - start < 10
  assert code == 1
  assert out == ""
  assert err.splitlines() == [
      f"error: the Beam job server at localhost:{job} is not reachable "
      "(connection refused): start the cluster (kubeflow/local_flink.sh "
      "start) or check the endpoint"]
