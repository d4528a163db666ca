"""Replicas: the settings and flags that ask for them, and the served
self-ensemble (the exported signature: test_preprocessing's
test_criteo_export_serves_the_mean_and_every_replica, on its Transform
output)."""

import argparse
import numpy as np
import pytest
import tensorflow as tf

from commands import flags
from pipeline.config import PipelineConfig
from trainer_module import contract
from trainer_module import trainer
from trainer_module.settings import TrainerSettings


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
