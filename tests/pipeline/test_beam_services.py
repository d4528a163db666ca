"""The portable run's services are reached before it starts, and the one
that is down is named in a line."""

import socket
import time

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
