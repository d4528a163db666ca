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
from trainer_module import paired_statistics
from trainer_module import plan as plan_lib
from trainer_module import served_model
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


class _Scores:
  """A model that returns the logits of fixed probabilities, in the order
  of the validation batches (served_probabilities calls it per batch)."""

  def __init__(self, probabilities, batch=100):
    self._batches = iter(np.split(np.asarray(probabilities), len(
        probabilities) // batch))

  def __call__(self, features, training=False):
    p = next(self._batches)
    return tf.constant(np.log(p / (1 - p))[:, None])


def _validation(labels, batch=100):
  return [({"f": tf.zeros([batch, 1])}, tf.constant(labels[i:i + batch]))
          for i in range(0, len(labels), batch)]


def _rows(n, model_gain, seed=0):
  """n validation labels, the baseline's probabilities and the model's:
  its scores carry `model_gain` more of the label's signal."""
  rng = np.random.default_rng(seed)
  labels = (rng.random(n) < 0.25).astype(np.float64)
  signal = labels + rng.normal(0, 1.0, n)
  noise = rng.normal(0, 1.0, n)
  lr = 1 / (1 + np.exp(-(signal - 1)))
  model = 1 / (1 + np.exp(-(signal + model_gain * labels + 0.3 * noise - 1)))
  return labels, lr, model


def _choose(options, labels, lr, model):
  settings = TrainerSettings(dataset="criteo", **options)
  return served_model.choose_served(
      settings, labels, model, {"labels": labels, "predictions": lr})


def test_the_model_is_not_served_on_a_difference_the_paired_test_cannot_tell_from_zero():
  # 600 rows, as a first run's validation slice: the model's AUC is higher
  # (the scalar comparison served it), but inside the noise.
  labels, lr, model = _rows(600, 0.08, seed=2)
  chosen = _choose({}, labels, lr, model)
  low, high = chosen["interval"]
  assert chosen["model_validation_auc"] > chosen["lr_validation_auc"]
  assert low < 0 < chosen["difference"] < high
  assert chosen["lower_bound"] < 0
  assert chosen["served"] == contract.LR_OUTPUT
  assert chosen["rows"] == 600
  assert "not above the baseline's beyond noise" in chosen["reason"]
  # The same gain on 60,000 rows is beyond noise: the model is served.
  labels, lr, model = _rows(60_000, 0.08, seed=2)
  chosen = _choose({}, labels, lr, model)
  assert chosen["lower_bound"] > 0
  assert chosen["served"] == "model"
  # --serve model serves it whatever the test says.
  labels, lr, model = _rows(600, -0.5)
  chosen = _choose({"serve": "model"}, labels, lr, model)
  assert chosen["difference"] < 0
  assert (chosen["served"], chosen["serve"], chosen["model"]) == (
      "model", "model", "deepfm")


@pytest.mark.parametrize("standard_errors, served", [
    (1.70, "model"),  # above the one-sided bound (1.645 SE), inside 1.96
    (1.60, contract.LR_OUTPUT),
    (-3.0, contract.LR_OUTPUT),
])
def test_the_rule_is_the_one_sided_95_percent_bound(monkeypatch,
                                                    standard_errors, served):
  """The model is better or not: a one-sided test. A difference between
  1.645 and 1.96 standard errors serves the model, though its two-sided
  interval holds zero (docs/gate.md, "The served model")."""
  labels, lr, model = _rows(600, 0.08)
  monkeypatch.setattr(
      served_model.paired_statistics, "paired_aucs",
      lambda *_: (np.array([0.7, 0.7]), paired_statistics.Estimate(
          standard_errors * 0.002, 0.002)))
  chosen = _choose({}, labels, lr, model)
  assert chosen["served"] == served
  assert chosen["lower_bound"] == pytest.approx(
      0.002 * (standard_errors - 1.6448536))


def test_the_paired_difference_is_delong_on_the_same_rows():
  labels, lr, model = _rows(2_000, 0.5, seed=3)
  chosen = _choose({}, labels, lr, model)
  expected = paired_statistics.auc_difference(labels, model, lr)
  assert chosen["difference"] == pytest.approx(expected.value, abs=1e-12)
  assert chosen["interval"] == pytest.approx(list(expected.interval()))
  assert chosen["model_validation_auc"] - chosen["lr_validation_auc"] == (
      pytest.approx(expected.value))


def test_a_baseline_without_validation_predictions_or_of_other_rows():
  labels, lr, model = _rows(600, 0.08)
  settings = TrainerSettings(dataset="criteo")
  chosen = served_model.choose_served(settings, labels, model, None)
  assert chosen["served"] == "model"
  assert "no validation predictions" in chosen["reason"]
  with pytest.raises(ValueError, match="validation rows differ"):
    served_model.choose_served(settings, labels, model, {
        "labels": labels[::-1], "predictions": lr})


@pytest.mark.parametrize("options, expected", [
    ({}, lambda p: p[0]),
    ({"replicas": 2}, lambda p: (p[0] + p[1]) / 2),  # the ensemble
    ({"replicas": 2, "push": "single"}, lambda p: p[0]),
])
def test_the_served_probabilities_are_what_the_export_serves(options,
                                                              expected):
  labels, lr, model = _rows(300, 0.5)
  probabilities = [model, lr]
  replicas = [_Scores(p) for p in probabilities]
  got_labels, got = served_model.served_probabilities(
      TrainerSettings(dataset="criteo", **options),
      replicas[:options.get("replicas", 1)], _validation(labels))
  np.testing.assert_array_equal(got_labels, labels)
  np.testing.assert_allclose(got, expected(probabilities), rtol=1e-6)


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
      plan_lib.resolve(TrainerSettings(dataset="criteo", replicas=count,
                                       batch_size=2), {}, 10),
      data, [], None, log_dir, seed=seed, verbose=0 if seed is not None else "auto")
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
