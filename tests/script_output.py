"""Runs a test helper script in its own process, for what must happen
before TensorFlow initialises its devices (splitting the CPU)."""

import json
import os
import subprocess
import sys
from typing import Any

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)


def json_of(script: str, *args: str) -> Any:
  """The JSON the script prints on its last line. It runs from the
  repository root, which it imports from as the tests do, with the tests'
  shared helpers (this directory); fails with its stderr's tail if it
  fails."""
  result = subprocess.run(
      [sys.executable, script, *args], cwd=ROOT,
      env={**os.environ, "PYTHONPATH": os.pathsep.join((ROOT, TESTS))},
      capture_output=True, text=True, timeout=900, check=False)
  assert result.returncode == 0, result.stderr[-3000:]
  return json.loads(result.stdout.strip().splitlines()[-1])
