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

import numpy as np
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


def _rare_signal_estimate():
  """docs/scripts/rare_signal_estimate.py as a module."""
  sys.path.insert(0, SCRIPTS_DIR)
  try:
    import rare_signal_estimate  # pylint: disable=import-outside-toplevel
  finally:
    sys.path.remove(SCRIPTS_DIR)
  return rare_signal_estimate


@pytest.mark.parametrize("spread", [0.0, 0.5])
def test_rare_signal_estimate_takes_out_the_binomial_noise(spread):
  """docs/study.md's real-row measure: ids of 40 rows each whose click
  log-odds spread by `spread`. The last rank bucket (384 ids) gives it
  back, where the raw click rates' spread alone would read about 0.33 on
  the log-odds scale at a 25% click rate."""
  estimate = _rare_signal_estimate()
  rng = np.random.default_rng(0)
  ids = np.repeat(np.arange(512), 40)
  logit = np.log(0.25 / 0.75) + rng.normal(0, spread, 512)[ids]
  labels = (rng.random(ids.size) < 1 / (1 + np.exp(-logit))).astype(float)
  spreads, fields = estimate.pooled_spreads(labels, [ids.astype(str)])
  assert fields == 1
  if spread:
    assert 0.4 < spreads[-1] < 0.6, spreads
  else:  # NaN: a variance below zero, all noise.
    assert not spreads[-1] > 0.1, spreads


def test_rare_signal_slope_is_the_power_laws_exponent():
  estimate = _rare_signal_estimate()
  middles = [np.sqrt(low * high) for low, high in estimate.BUCKETS]
  assert estimate.slope([m**0.2 for m in middles]) == pytest.approx(0.2)
