"""The local run's temporary files."""

import os
import tempfile

from tfx.utils import dependency_utils

from pipeline import runner


def test_tfx_ephemeral_packages_go_with_the_run():
  # What every TFX Beam executor does when it is constructed with Beam
  # arguments: build a source package of TFX in tempfile.mkdtemp().
  shared = tempfile.gettempdir()
  with runner.run_temp_dir():
    run_dir = tempfile.gettempdir()
    assert run_dir != shared
    package = dependency_utils.build_ephemeral_package()
    assert os.path.isfile(package)
    assert package.startswith(run_dir + os.sep)
  assert not os.path.exists(package)
  assert tempfile.gettempdir() == shared


def test_the_temp_dir_is_restored_when_the_run_fails():
  shared = tempfile.gettempdir()
  try:
    with runner.run_temp_dir():
      run_dir = tempfile.gettempdir()
      raise RuntimeError("a component failed")
  except RuntimeError:
    pass
  assert not os.path.exists(run_dir)
  assert tempfile.gettempdir() == shared
