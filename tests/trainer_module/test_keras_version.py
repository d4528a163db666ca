"""TF_USE_LEGACY_KERAS: set when unset, an explicit Keras 3 kept, legacy
Keras refused with a message (keras_version.pin_keras3)."""

import os
import subprocess
import sys

import pytest

from trainer_module import keras_version


def test_unset_becomes_keras3():
  environ = {}
  keras_version.pin_keras3(environ)
  assert environ == {"TF_USE_LEGACY_KERAS": "0"}


@pytest.mark.parametrize("value", ["0", "false", "False", ""])
def test_an_explicit_keras3_setting_is_kept(value):
  environ = {"TF_USE_LEGACY_KERAS": value}
  keras_version.pin_keras3(environ)
  assert environ == {"TF_USE_LEGACY_KERAS": value}


@pytest.mark.parametrize("value", keras_version.LEGACY_VALUES)
def test_legacy_keras_is_refused(value):
  with pytest.raises(RuntimeError, match=f"TF_USE_LEGACY_KERAS='{value}' "
                     "asks for legacy Keras .* unset TF_USE_LEGACY_KERAS or "
                     "set it to 0"):
    keras_version.pin_keras3({"TF_USE_LEGACY_KERAS": value})


def test_the_cli_refuses_legacy_keras():
  env = {**os.environ, "TF_USE_LEGACY_KERAS": "1"}
  result = subprocess.run([sys.executable, "-m", "pipeline", "--help"],
                          env=env, capture_output=True, text=True,
                          check=False)
  assert result.returncode == 1, result.stderr
  assert "error: TF_USE_LEGACY_KERAS='1' asks for legacy Keras" in (
      result.stderr)
