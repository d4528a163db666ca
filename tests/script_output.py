"""Runs a test helper script in its own process, for what must happen
before TensorFlow initialises its devices (splitting the CPU)."""

import json
import os
import socket
import subprocess
import sys
import tempfile
from typing import Any, List

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)


def environment():
  """The environment a helper script runs in: the project and tests/ on its
  path."""
  return {**os.environ, "PYTHONPATH": os.pathsep.join((ROOT, TESTS))}


def free_ports(count: int) -> List[int]:
  """Ports nothing listens on now (for localhost workers)."""
  sockets = [socket.socket() for _ in range(count)]
  for s in sockets:
    s.bind(("localhost", 0))
  ports = [s.getsockname()[1] for s in sockets]
  for s in sockets:
    s.close()
  return ports


def start(script: str, *args: str) -> subprocess.Popen:
  """The script started in its own process (finish() reads its JSON). Its
  output goes to files, not pipes: a pipe nobody reads while the test
  waits on another process fills up (64 KiB of Keras progress bars), and
  the script then blocks on a print, with its peer in a collective."""
  out, errors = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
  process = subprocess.Popen([sys.executable, script, *args], cwd=ROOT,
                             env=environment(), stdout=out, stderr=errors,
                             text=True)
  process.output_files = (out, errors)
  return process


def finish(process: subprocess.Popen, timeout: int = 900) -> Any:
  """The JSON a started script prints on its last line; fails with its
  stderr's tail if it fails."""
  try:
    process.wait(timeout=timeout)
  finally:
    process.kill()
  out, errors = process.output_files
  out.seek(0)
  errors.seek(0)
  stdout, stderr = out.read(), errors.read()
  assert process.returncode == 0, stderr[-3000:]
  return json.loads(stdout.strip().splitlines()[-1])


def json_of(script: str, *args: str) -> Any:
  """The JSON the script prints on its last line. It runs from the
  repository root, which it imports from as the tests do, with the tests'
  shared helpers (this directory); fails with its stderr's tail if it
  fails."""
  result = subprocess.run(
      [sys.executable, script, *args], cwd=ROOT,
      env=environment(),
      capture_output=True, text=True, timeout=900, check=False)
  assert result.returncode == 0, result.stderr[-3000:]
  return json.loads(result.stdout.strip().splitlines()[-1])
