"""Replicas: the settings and flags that ask for them, the served
self-ensemble, and the exported signature's replica outputs."""

import argparse
import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_transform as tft

from commands import flags
from pipeline.config import PipelineConfig
from trainer_module import contract
from trainer_module import features
from trainer_module import models
from trainer_module import preprocessing
from trainer_module import trainer
from trainer_module.settings import ModelOptions
from trainer_module.settings import TrainerSettings

import test_preprocessing as transform_helpers


def test_settings_round_trip_and_validation():
  settings = TrainerSettings(dataset="criteo", replicas=3, push="single")
  again = TrainerSettings.from_custom_config(settings.to_custom_config())
  assert (again.replicas, again.push) == (3, "single")
  assert (TrainerSettings(dataset="criteo").replicas,
          TrainerSettings(dataset="criteo").push) == (1, "ensemble")
  with pytest.raises(ValueError, match="replicas must be a positive"):
    TrainerSettings(dataset="criteo", replicas=0)
  with pytest.raises(ValueError, match="unknown push 'best'"):
    TrainerSettings(dataset="criteo", push="best")


def _run_args(*extra):
  parser = argparse.ArgumentParser()
  flags.add_run_arguments(parser)
  return parser.parse_args(["--dataset", "criteo", "--data", "/tmp/x",
                            "--output", "/tmp/o", *extra])


def test_flags_reach_the_config_and_the_trainer_settings():
  config = flags.config_from_args(_run_args(
      "--replicas", "2", "--push", "single", "--max-pd", "0.15",
      "--min-frequency", "2"))
  assert (config.replicas, config.push, config.max_pd) == (2, "single", 0.15)
  custom = config.trainer_config
  assert (custom["replicas"], custom["push"]) == (2, "single")
  default = flags.config_from_args(_run_args("--min-frequency", "2"))
  assert (default.replicas, default.push, default.max_pd) == (
      1, "ensemble", None)
  with pytest.raises(ValueError, match="max_pd .* needs replicas >= 2"):
    flags.config_from_args(_run_args("--max-pd", "0.1",
                                     "--min-frequency", "2"))
  with pytest.raises(ValueError, match="a value > 0"):
    PipelineConfig(dataset="criteo", data="/tmp/x", output="/tmp/o",
                   min_frequency=2, replicas=2, max_pd=0.0)


def test_served_probability_is_the_replicas_mean_or_replica_zero():
  replicas = [tf.constant([[0.1], [0.8]]), tf.constant([[0.3], [0.4]]),
              tf.constant([[0.2], [0.9]])]
  lr = tf.constant([[0.5], [0.5]])
  ensemble = trainer.serving_outputs(replicas, lr, "ensemble")
  np.testing.assert_allclose(ensemble[contract.PREDICTION_KEY],
                             [[0.2], [0.7]], rtol=1e-6)
  for i, p in enumerate(replicas):
    np.testing.assert_array_equal(ensemble[contract.replica_output(i)], p)
  np.testing.assert_array_equal(ensemble[contract.LR_OUTPUT], lr)
  single = trainer.serving_outputs(replicas, lr, "single")
  np.testing.assert_array_equal(single[contract.PREDICTION_KEY], replicas[0])
  # One model: its probability, no replica outputs (the signature as before).
  alone = trainer.serving_outputs(replicas[:1], lr, "ensemble")
  assert sorted(alone) == sorted([contract.PREDICTION_KEY, contract.LR_OUTPUT])


@pytest.mark.slow
def test_export_serves_the_mean_and_every_replica(tmp_path):
  """A real (tiny) Transform output, two differently seeded DeepFMs: the
  SavedModel's serving_default returns each replica's probability and
  their mean, on raw tf.Examples."""
  spec = features.CRITEO
  cat = spec.categorical_features[0]
  rows = [transform_helpers._full_row(spec, **{spec.label: i % 2,  # pylint: disable=protected-access
                                               cat: b"ab"[i % 2:i % 2 + 1]})
          for i in range(6)]
  transform_helpers._analyze_and_transform(spec, rows, str(tmp_path))  # pylint: disable=protected-access
  output = tft.TFTransformOutput(
      os.path.join(str(tmp_path), "transform_output"))
  options = ModelOptions(embedding_dim=2, hidden_units=(4,))
  settings = TrainerSettings(dataset="criteo", replicas=2,
                             model_options=options)
  sizes = preprocessing.vocabulary_sizes(output, spec)
  replicas = []
  for seed in (0, 1):
    tf.keras.utils.set_random_seed(seed)
    replicas.append(models.build_model("deepfm", sizes, spec.dense, options))
  baseline = models.build_model("lr", sizes, spec.dense, options)
  export_dir = str(tmp_path / "serving")
  trainer.export_serving_model(replicas, baseline, output, settings,
                               export_dir)
  serve = tf.saved_model.load(export_dir).signatures["serving_default"]
  raw = [transform_helpers._example(  # pylint: disable=protected-access
      {k: v for k, v in r.items() if k != spec.label}) for r in rows]
  outputs = {k: v.numpy() for k, v in serve(examples=tf.constant(raw)).items()}
  assert sorted(outputs) == sorted([
      contract.PREDICTION_KEY, contract.LR_OUTPUT,
      contract.replica_output(0), contract.replica_output(1)])
  first, second = (outputs[contract.replica_output(i)] for i in (0, 1))
  assert not np.allclose(first, second)  # Different seeds, different models.
  np.testing.assert_allclose(outputs[contract.PREDICTION_KEY],
                             (first + second) / 2, rtol=1e-6)
