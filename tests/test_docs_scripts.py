"""Every experiment script in docs/scripts/ imports against today's code.

The scripts are run by hand, months apart, and the docs quote their
results; a module they use can move under them (three had broken so,
issue #44). Each is imported (its imports and module-level code; its
main does not run) in one subprocess, with the path `python
docs/scripts/NAME.py` run from the repository root sees: the repository
and the scripts' own directory.
"""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS_DIR = os.path.join(ROOT, "docs", "scripts")
SCRIPTS = sorted(name[:-3] for name in os.listdir(SCRIPTS_DIR)
                 if name.endswith(".py"))
IMPORT_EACH = """
import importlib, json, sys, traceback
errors = {}
for name in sys.argv[1:]:
  try:
    importlib.import_module(name)
  except BaseException:  # SystemExit too: a script that runs on import.
    errors[name] = traceback.format_exc()
print(json.dumps(errors))
"""


@pytest.fixture(scope="module")
def import_errors():
  """{script: traceback} of the scripts that failed to import."""
  environment = {**os.environ,
                 "PYTHONPATH": os.pathsep.join((ROOT, SCRIPTS_DIR))}
  result = subprocess.run([sys.executable, "-c", IMPORT_EACH, *SCRIPTS],
                          cwd=ROOT, env=environment, capture_output=True,
                          text=True, check=True)
  return json.loads(result.stdout.splitlines()[-1])


def test_the_scripts_are_found():
  assert {"step_profile", "pd_direct", "smelu_sampling_ab"} <= set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_script_imports(import_errors, script):
  assert script not in import_errors, import_errors[script]
