"""The services a portable Beam run depends on, reached before it starts.

With a Flink or Spark cluster, each Beam component submits its job to a job
server and the cluster asks an SDK worker pool for workers. If either is not
up, Beam says so only when the first Beam component starts, deep in a gRPC
traceback, or waits for minutes. A TCP connection to each names the one that
is missing in a second. Sockets only: this runs before any heavy import.
"""

import socket
from typing import Dict, Optional, Sequence

# How long one endpoint may take to accept a connection.
CONNECT_SECONDS = 3.0


def _beam_values(beam_args: Sequence[str]) -> Dict[str, str]:
  values = {}
  for arg in beam_args:
    flag, equals, value = arg.partition("=")
    if equals:
      values[flag] = value
  return values


def endpoints(beam_args: Sequence[str]) -> Dict[str, str]:
  """{what: host:port} of the services `beam_args` need up: the job
  server of a portable runner, and an EXTERNAL environment's worker pool."""
  values = _beam_values(beam_args)
  needed = {}
  if values.get("--job_endpoint"):
    needed["the Beam job server"] = values["--job_endpoint"]
  if (values.get("--environment_type", "").upper() == "EXTERNAL" and
      values.get("--environment_config")):
    needed["the Beam SDK worker pool"] = values["--environment_config"]
  return needed


def unreachable(beam_args: Sequence[str],
                timeout: float = CONNECT_SECONDS) -> Optional[str]:
  """One line naming the first service of `beam_args` that does not accept
  a connection, or None when all do (or none is needed)."""
  for what, endpoint in endpoints(beam_args).items():
    host, _, port = endpoint.rpartition(":")
    try:
      with socket.create_connection((host or "localhost", int(port)),
                                    timeout=timeout):
        pass
    except ValueError:
      return f"{what} endpoint {endpoint!r} is not host:port"
    except OSError as error:
      reason = error.strerror or type(error).__name__
      return (f"{what} at {endpoint} is not reachable ({reason.lower()}): "
              "start the cluster (kubeflow/local_flink.sh start) or check "
              "the endpoint")
  return None
