"""PipelineConfig: the code fingerprint that keeps the TFX cache honest."""

import shutil

import pytest

from pipeline import config as config_lib


@pytest.fixture
def code_copy(tmp_path, monkeypatch):
  """A copy of trainer_module that code_fingerprint reads instead."""
  shutil.copytree(config_lib.os.path.join(config_lib.REPO_ROOT,
                                          "trainer_module"),
                  tmp_path / "trainer_module")
  monkeypatch.setattr(config_lib, "REPO_ROOT", str(tmp_path))
  return tmp_path / "trainer_module"


def _edit(path):
  with open(path, "a") as f:
    f.write("\n# changed\n")


def test_model_change_reruns_the_trainer_only(code_copy):
  config = config_lib.PipelineConfig(dataset="criteo", data="d", output="o")
  transform, trainer = (config.transform_config["code"],
                        config.trainer_config["code"])
  assert trainer == config_lib.code_fingerprint()
  _edit(code_copy / "models.py")
  assert config.transform_config["code"] == transform
  assert config.trainer_config["code"] != trainer


@pytest.mark.parametrize("name", config_lib.TRANSFORM_SOURCES)
def test_preprocessing_change_reruns_transform_and_trainer(code_copy, name):
  config = config_lib.PipelineConfig(dataset="criteo", data="d", output="o")
  transform, trainer = (config.transform_config["code"],
                        config.trainer_config["code"])
  _edit(code_copy / name)
  assert config.transform_config["code"] != transform
  assert config.trainer_config["code"] != trainer
