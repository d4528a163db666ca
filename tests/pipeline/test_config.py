"""PipelineConfig: defaults, validation, the settings it hands the components."""

from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.runners import runner as runner_lib
import pytest

from pipeline import config as config_lib


def test_vocabulary_threshold_follows_the_estimated_data_size(tmp_path):
  row = b"0\t" + b"\t".join([b"1"] * 13 + [b"68fd1e64"] * 26) + b"\n"
  small = tmp_path / "small.txt"
  small.write_bytes(row * 5000)
  assert config_lib.estimate_rows(str(small)) == 5000
  assert config_lib.estimate_rows(str(tmp_path)) == 5000  # A directory.
  assert config_lib.estimate_rows("gs://bucket/train.txt") is None
  config = config_lib.PipelineConfig.from_fields(
      dataset="criteo", data=str(small), output=str(tmp_path / "out"))
  # 4,500 train rows: ids need a share of 10 / 41M rows: the floor, 2.
  assert config.transform_config["min_frequency"] == 2
  spec = config.spec
  assert spec.auto_min_frequency(spec.reference_examples) == 10
  assert spec.auto_min_frequency(spec.reference_examples // 2) == 5
  assert spec.auto_min_frequency(10**10) == 10
  given = config_lib.PipelineConfig.from_fields(
      dataset="criteo", data=str(small), output="o", min_frequency=7)
  assert given.transform_config["min_frequency"] == 7
  remote = config_lib.PipelineConfig.from_fields(
      dataset="criteo", data="gs://b/t.txt", output="o")
  assert remote.transform_config["min_frequency"] == 10


def test_auto_hparams_skip_the_overridden_keys():
  config = config_lib.PipelineConfig.from_fields(
      dataset="criteo", data="d", output="o", hparams={"embed_lr": 1e-3})
  assert config.trainer.auto_hparam_keys == ("dense_lr", "l2")
  off = config_lib.PipelineConfig.from_fields(
      dataset="criteo", data="d", output="o", auto_hparams=False)
  assert off.trainer.auto_hparam_keys == ()
  with pytest.raises(ValueError, match="max_auc_below_lr must be >= 0"):
    config_lib.PipelineConfig.from_fields(
        dataset="criteo", data="d", output="o", max_auc_below_lr=-0.1)


@pytest.mark.parametrize("fields, message", [
    ({"dataset": "kdd"}, "unknown dataset 'kdd'"),
    ({"dag_runner": "airflow"}, "unknown dag_runner 'airflow'"),
    ({"split": "random"}, "unknown split 'random'"),
    ({"batch_size": 0}, "batch_size must be 'auto' or a positive integer"),
    ({"epochs": 0}, "epochs must be a positive integer"),
    ({"model": "xgboost"}, "unknown model 'xgboost'"),
    ({"scaling_rule": "cube"}, "unknown scaling_rule 'cube'"),
    ({"embedding_update": "lazy"}, "unknown embedding_update 'lazy'"),
    ({"cowclip_variant": "new"}, "unknown cowclip_variant 'new'"),
    ({"min_auc": 0.5, "typo": 1}, "unknown settings ['typo']"),
    ({"hparams": {"lr": 1.0}}, "unknown hyperparameters ['lr']"),
    ({"hparams": {"l2": -1.0}}, "l2 must be a finite number >= 0"),
    ({"model_options": {"hidden_units": ()}}, "hidden_units must not be empty"),
    ({"gpus": -1}, "gpus must be >= 0"),
    ({"gpus": 1, "gpu_type": ""}, "gpu_type is empty"),
    ({"calibration_band": (1.1, 0.9)}, "calibration band must be"),
    ({"frequency_thresholds": (100, 10)}, "0 < rare < frequent"),
    ({"frequency_field": "I1"}, "frequency field 'I1' is not 'all'"),
    ({"slice_features": ("I1",)}, "cannot slice by ['I1']"),
])
def test_config_rules_name_the_bad_field(fields, message):
  with pytest.raises(ValueError) as error:
    config_lib.PipelineConfig.from_fields(**{"dataset": "criteo", "data": "d",
                                 "output": "o", **fields})
  assert message in str(error.value)


def test_config_holds_the_trainers_typed_settings():
  config = config_lib.PipelineConfig.from_fields(
      dataset="avazu", data="d", output="o", model="dcn", batch_size=4096,
      hparams={"r": 2.0}, embedding_update="sparse",
      model_options={"embedding_dim": 16}, frequency_field="banner_pos")
  settings = config.trainer
  assert (settings.model, settings.batch_size, settings.step.embedding_update,
          settings.frequency_field) == ("dcn", 4096, "sparse", "banner_pos")
  assert settings.base_hparams == {**config.spec.base_hparams, "r": 2.0}
  assert settings.model_options.embedding_dim == 16
  # The Trainer's custom_config is these settings.
  read_back = config_lib.settings.TrainerSettings.from_custom_config(
      config.trainer_config)
  assert read_back == settings


def test_beam_args_are_added_to_the_defaults():
  """--beam-arg adds to the default arguments; a value of a flag they set
  replaces the default's."""
  config = config_lib.PipelineConfig.from_fields(
      dataset="criteo", data="d", output="o",
      beam_args=("--direct_num_workers=2", "--save_main_session"))
  assert config.runner.beam_args == (
      "--runner=FnApiRunner", "--direct_running_mode=in_memory",
      "--sdk_container_image=apache/beam_python3.10_sdk",
      "--direct_num_workers=2", "--save_main_session")
  assert config_lib.add_beam_args(config_lib.DIRECT_BEAM_ARGS, ()) == (
      config_lib.DIRECT_BEAM_ARGS)


def test_a_local_beam_component_does_not_package_tfx():
  """TFX adds an sdist of itself for remote workers to a Beam component's
  arguments (3.4 s and 2,700 temporary files each) unless they name a
  dependency; the default arguments do, so it adds nothing."""
  # pylint: disable=g-import-not-at-top
  from tfx.utils import dependency_utils
  # pylint: enable=g-import-not-at-top
  assert dependency_utils.make_beam_dependency_flags(
      list(config_lib.DIRECT_BEAM_ARGS)) == list(config_lib.DIRECT_BEAM_ARGS)


def test_the_runner_names_are_beams_own():
  assert config_lib.BEAM_RUNNER_NAMES == tuple(
      StandardOptions.KNOWN_RUNNER_NAMES)


@pytest.mark.parametrize("runner", [
    "FnApiRunner", "DirectRunner", "direct", "dataflowrunner", "Flink",
    "SparkRunner", "PortableRunner", "PrismRunner",
    "apache_beam.runners.dask.dask_runner.DaskRunner"])
def test_the_runner_names_beam_takes_are_accepted(runner):
  config = config_lib.PipelineConfig.from_fields(
      dataset="criteo", data="d", output="o",
      beam_args=(f"--runner={runner}",))
  assert config.runner.beam_args[-1] == f"--runner={runner}"


@pytest.mark.parametrize("runner", ["DaskRunner", "Dask", "Flinkrunners"])
def test_a_runner_name_beam_refuses_is_refused_first(runner):
  """The names accepted are Beam's own: what it refuses, Beam's
  create_runner refuses too."""
  with pytest.raises(ValueError) as beam_error:
    runner_lib.create_runner(runner)
  assert "Unexpected pipeline runner" in str(beam_error.value)
  with pytest.raises(ValueError, match=f"unknown Beam runner '{runner}'"):
    config_lib.PipelineConfig.from_fields(
        dataset="criteo", data="d", output="o",
        beam_args=(f"--runner={runner}",))
