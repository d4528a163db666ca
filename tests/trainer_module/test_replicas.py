"""Replicas: the settings and flags that ask for them, and the served
self-ensemble (the exported signature: test_preprocessing's
test_criteo_export_serves_the_mean_and_every_replica, on its Transform
output)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from commands.cli import flags
from commands.cli import parser as cli_parser
from pipeline.config import PipelineConfig
from trainer_module import contract
from trainer_module import input_pipeline
from trainer_module import serving
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
  return cli_parser.build_parser().parse_args(
      ["run", "--dataset", "criteo", "--data", "/tmp/x", "--output", "/tmp/o",
       *extra])


def test_flags_reach_the_config_and_the_trainer_settings():
  config = flags.config_from_args(_run_args(
      "--replicas", "2", "--push", "single", "--max-pd", "0.15",
      "--min-frequency", "2"))
  assert (config.trainer.replicas, config.trainer.push,
          config.gate.max_pd) == (2, "single", 0.15)
  custom = config.trainer_config
  assert (custom["replicas"], custom["push"]) == (2, "single")
  default = flags.config_from_args(_run_args("--min-frequency", "2"))
  assert (default.trainer.replicas, default.trainer.push,
          default.gate.max_pd, default.trainer.seed) == (1, "ensemble", None,
                                                         None)
  seeded = flags.config_from_args(_run_args("--seed", "3",
                                            "--min-frequency", "2"))
  assert seeded.trainer_config["seed"] == 3
  with pytest.raises(ValueError, match="max_pd .* needs replicas >= 2"):
    flags.config_from_args(_run_args("--max-pd", "0.1",
                                     "--min-frequency", "2"))
  with pytest.raises(ValueError, match="must be > 0"):
    PipelineConfig.from_fields(dataset="criteo", data="/tmp/x",
                               output="/tmp/o", min_frequency=2, replicas=2,
                               max_pd=0.0)


def test_served_probability_is_the_replicas_mean_or_replica_zero():
  replicas = [tf.constant([[0.1], [0.8]]), tf.constant([[0.3], [0.4]]),
              tf.constant([[0.2], [0.9]])]
  lr = tf.constant([[0.5], [0.5]])
  ensemble = serving.serving_outputs(replicas, lr, "ensemble")
  np.testing.assert_allclose(ensemble[contract.PREDICTION_KEY],
                             [[0.2], [0.7]], rtol=1e-6)
  for i, p in enumerate(replicas):
    np.testing.assert_array_equal(ensemble[contract.replica_output(i)], p)
  np.testing.assert_array_equal(ensemble[contract.LR_OUTPUT], lr)
  single = serving.serving_outputs(replicas, lr, "single")
  np.testing.assert_array_equal(single[contract.PREDICTION_KEY], replicas[0])
  # One model: its probability, no replica outputs (the signature as before).
  alone = serving.serving_outputs(replicas[:1], lr, "ensemble")
  assert sorted(alone) == sorted([contract.PREDICTION_KEY, contract.LR_OUTPUT])
  # The baseline served: its probability under both names, replicas kept.
  baseline = serving.serving_outputs(replicas, lr, "ensemble",
                                     serve_baseline=True)
  np.testing.assert_array_equal(baseline[contract.PREDICTION_KEY], lr)
  np.testing.assert_array_equal(baseline[contract.replica_output(2)],
                                replicas[2])


def _auc(value):
  return {"best": {"val_auc": value}}


@pytest.mark.parametrize("options, record, lr_auc, served", [
    # One model: its own validation AUC against the baseline's.
    ({}, _auc(0.70), 0.71, contract.LR_OUTPUT),
    ({}, _auc(0.71), 0.70, "model"),
    ({}, _auc(0.70), 0.70, "model"),  # a tie keeps the model
    ({"serve": "model"}, _auc(0.60), 0.71, "model"),
    # Replicas served as their ensemble: the mean of theirs (0.705).
    ({"replicas": 2}, {**_auc(0.69), "replicas": [_auc(0.69), _auc(0.72)]},
     0.70, "model"),
    # Replica 0 served alone: its AUC only.
    ({"replicas": 2, "push": "single"},
     {**_auc(0.69), "replicas": [_auc(0.69), _auc(0.72)]}, 0.70,
     contract.LR_OUTPUT),
    # The distilled student: its AUC, not the replicas'.
    ({"replicas": 2, "distill": True},
     {**_auc(0.72), "distillation": _auc(0.68)}, 0.70, contract.LR_OUTPUT),
])
def test_the_better_of_model_and_baseline_by_validation_auc_is_served(
    options, record, lr_auc, served):
  chosen = trainer.choose_served(
      TrainerSettings(dataset="criteo", **options), record, _auc(lr_auc))
  assert chosen["served"] == served
  assert chosen["lr_validation_auc"] == lr_auc
  assert (chosen["serve"], chosen["model"]) == (
      options.get("serve", "best"), "deepfm")


def _seeds_trained(monkeypatch, count, seed, log_dir):
  """(seed, data's shuffle seed, TensorBoard?, verbose) per replica that
  train_replicas trains (train and training_part recorded, not run)."""
  trained = []
  # training_part(files, transform, label, batch, buckets, rate, seed, ...)
  monkeypatch.setattr(trainer, "training_part",
                      lambda *args: f"shuffled with {args[6]}")
  def fake_train(settings, data, *args, seed=None, callbacks=(),
                 verbose="auto", **kwargs):
    trained.append((seed, data.train, any(
        isinstance(c, keras.callbacks.TensorBoard) for c in callbacks),
                    verbose))
    # Each fit resumed after earlier attempts' 1.5 s.
    return object(), {"epochs_run": 1, "best_epoch": 1, "best": {},
                      "bias_shift": 0.0, "resumed_after": 1,
                      "resumed_seconds": 1.5}
  monkeypatch.setattr(trainer, "train", fake_train)
  data = input_pipeline.TrainingData(train="as given", validation=None,
                              train_examples=10, validation_examples=1,
                              click_rate=0.5, validation_buckets=1)
  _, record = trainer.train_replicas(
      TrainerSettings(dataset="criteo", replicas=count), data, [], None, {},
      log_dir, seed=seed, verbose=0 if seed is not None else "auto")
  return trained, record


def test_replica_seeds_run_fn_and_study(monkeypatch, tmp_path):
  """run_fn (no seed): replicas seeded 0..N-1, one replica unseeded; the
  study (its run's seed s): s..s+N-1, no TensorBoard logs, quiet."""
  logs = str(tmp_path)
  assert _seeds_trained(monkeypatch, 1, None, logs)[0] == [
      (None, "as given", True, "auto")]
  trained, record = _seeds_trained(monkeypatch, 2, None, logs)
  assert trained == [(0, "shuffled with 0", True, "auto"),
                     (1, "shuffled with 1", True, "auto")]
  assert [r["seed"] for r in record["replicas"]] == [0, 1]
  assert _seeds_trained(monkeypatch, 1, 7, None)[0] == [
      (7, "as given", False, 0)]
  trained, record = _seeds_trained(monkeypatch, 3, 7, None)
  assert trained == [(s, f"shuffled with {s}", False, 0) for s in (7, 8, 9)]
  assert [r["seed"] for r in record["replicas"]] == [7, 8, 9]
  # The earlier attempts' seconds of every fit (the study's train_seconds);
  # the record's own keys stay replica 0's.
  assert record["earlier_seconds"] == 4.5
  assert (record["resumed_after"], record["resumed_seconds"]) == (1, 1.5)
