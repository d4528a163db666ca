"""PipelineConfig: the code fingerprint that keeps the TFX cache honest."""

import shutil

from pipeline import config as config_lib


def test_code_change_changes_transform_and_trainer_configs(tmp_path,
                                                           monkeypatch):
  config = config_lib.PipelineConfig(dataset="criteo", data="d", output="o")
  assert config.transform_config["code"] == config.trainer_config["code"]
  before = config.trainer_config["code"]
  assert before == config_lib.code_fingerprint()

  shutil.copytree(config_lib.os.path.join(config_lib.REPO_ROOT,
                                          "trainer_module"),
                  tmp_path / "trainer_module")
  monkeypatch.setattr(config_lib, "REPO_ROOT", str(tmp_path))
  assert config_lib.code_fingerprint() == before
  with open(tmp_path / "trainer_module" / "models.py", "a") as f:
    f.write("\n# changed\n")
  assert config.trainer_config["code"] != before
