"""Bias constraints: the Lagrangian term's value and gradients against NumPy,
the buckets, the multipliers' ascent, and the hook in the training step."""

import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf

from trainer_module import bias_constraints as bc
from trainer_module import models
from trainer_module import settings
from trainer_module import training

VOCAB = {"a": 14, "b": 5}
OPTIONS = models.ModelOptions(embedding_dim=3, hidden_units=(8,))
CONFIG = training.TrainingConfig(
    dense_lr=1e-2, embed_lr=3e-2, l2=1e-4, r=0.5, zeta=1e-3,
    warmup_epochs=0.0, steps_per_epoch=4,
    step=settings.StepOptions(cowclip=False))


def _sigmoid(z):
  return 1 / (1 + np.exp(-z))


def _numpy_term(multipliers, labels, logits, buckets):
  """sum_k lambda_k (1/B) sum_{i in S_k} (y_i - sigmoid(z_i)), its gradient
  w.r.t. each logit and w.r.t. each multiplier, in float64."""
  p = _sigmoid(logits.astype(np.float64))
  size = len(labels)
  residuals = np.array([np.sum((labels - p)[buckets == k])
                        for k in range(len(multipliers))]) / size
  value = float(np.dot(multipliers, residuals))
  d_logits = -multipliers[buckets] * p * (1 - p) / size
  return value, d_logits, residuals


def test_term_value_and_gradients_match_numpy():
  rng = np.random.default_rng(0)
  size = 64
  logits = rng.normal(-1.5, 1.0, size).astype(np.float32)
  labels = (rng.random(size) < 0.3).astype(np.float32)
  buckets = rng.integers(0, bc.NUM_BUCKETS, size).astype(np.int32)
  multipliers = rng.normal(0, 2, bc.NUM_BUCKETS).astype(np.float32)
  value, d_logits, residuals = _numpy_term(multipliers, labels, logits,
                                           buckets)

  constraints = bc.BiasConstraints(["a"], learning_rate=0.5)
  constraints.multipliers["a"].assign(multipliers)
  z = tf.Variable(logits[:, None])
  lam = tf.Variable(multipliers)
  with tf.GradientTape(persistent=True) as tape:
    term, got_residuals = constraints.term(labels[:, None], z,
                                           {"a": tf.constant(buckets)})
    # The same term with the multipliers as a differentiable input.
    raw = tf.reduce_sum(lam * bc.bucket_residuals(
        labels[:, None], tf.sigmoid(z), tf.constant(buckets)))
  assert float(term) == pytest.approx(value, rel=1e-5, abs=1e-7)
  np.testing.assert_allclose(got_residuals["a"], residuals, rtol=1e-5,
                             atol=1e-7)
  np.testing.assert_allclose(tape.gradient(term, z)[:, 0], d_logits,
                             rtol=1e-5, atol=1e-9)
  # d term / d lambda_k = r_k: the ascent direction.
  np.testing.assert_allclose(tape.gradient(raw, lam), residuals, rtol=1e-5,
                             atol=1e-7)
  # The term itself passes no gradient to the multipliers' variable.
  assert tape.gradient(term, constraints.multipliers["a"]) is None

  constraints.ascend(got_residuals)
  np.testing.assert_allclose(constraints.multipliers["a"].numpy(),
                             multipliers + 0.5 * residuals, rtol=1e-5,
                             atol=1e-6)


def test_weighted_residuals_are_the_unsampled_datas():
  """Under negative down-sampling each kept example stands for w of them:
  r_k = sum_{i in S_k} w_i (y_i - p_i) / sum_i w_i, as if the weights were
  copies."""
  rng = np.random.default_rng(3)
  labels = rng.integers(0, 2, 40).astype(np.float32)
  predictions = rng.uniform(0.05, 0.95, 40).astype(np.float32)
  buckets = rng.integers(0, bc.NUM_BUCKETS, 40)
  weights = rng.choice([1.0, 4.0], 40).astype(np.float32)
  copies = np.repeat(np.arange(40), weights.astype(int))
  got = bc.bucket_residuals(tf.constant(labels), tf.constant(predictions),
                            tf.constant(buckets), weights=tf.constant(weights))
  want = bc.bucket_residuals(tf.constant(labels[copies]),
                             tf.constant(predictions[copies]),
                             tf.constant(buckets[copies]))
  np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-6)


def test_id_buckets_top_ids_then_other():
  ids = tf.constant([0, 1, 8, 9, 10, 500], tf.int64)
  assert bc.id_buckets(ids).numpy().tolist() == [0, 1, 8, 9, 9, 9]


def test_rank_buckets_are_batch_deciles():
  logits = tf.constant(np.arange(20, 0, -1, dtype=np.float32)[:, None])
  # Highest logit first: ranks 19..0, two per decile.
  expected = [r * 10 // 20 for r in range(19, -1, -1)]
  assert bc.rank_buckets(logits).numpy().tolist() == expected
  assert bc.rank_buckets(tf.constant([[3.0], [1.0], [2.0]])).numpy(
      ).tolist() == [6, 0, 3]


def _batch(seed, rows=256):
  rng = np.random.default_rng(seed)
  features = {"a": rng.integers(0, VOCAB["a"], rows).astype(np.int64),
              "b": rng.integers(0, VOCAB["b"], rows).astype(np.int64),
              "x": rng.normal(size=rows).astype(np.float32)}
  # Click rate rises with the id of "a": buckets differ in bias.
  labels = (rng.random(rows) < 0.05 + 0.04 * features["a"]).astype(
      np.float32)
  return features, labels


def _model(config):
  keras.utils.set_random_seed(3)
  model = models.build_model("deepfm", VOCAB, ("x",), OPTIONS)
  training.compile_model(model, config)
  return model


def test_train_step_descends_the_term_and_ascends_the_multipliers():
  config = dataclasses.replace(CONFIG, step=dataclasses.replace(CONFIG.step, bias_constraints=(
      "a", settings.PREDICTED_CTR), bias_constraint_lr=5.0))
  model = _model(config)
  features, labels = _batch(0)
  constraints = model.bias_constraints
  logits = model(features)
  buckets = constraints.buckets(model, features, logits)
  _, residuals = constraints.term(labels[:, None], logits, buckets)
  # At zero multipliers the step is the plain one; the multipliers then
  # move by lr * the batch's residuals (before the weights moved).
  model.train_on_batch(features, labels)
  for name in config.step.bias_constraints:
    np.testing.assert_allclose(constraints.multipliers[name].numpy(),
                               5.0 * residuals[name].numpy(), rtol=1e-4,
                               atol=1e-6)

  # With non-zero multipliers, the dense weights' first Adam moment is the
  # gradient of log loss + term.
  multipliers = np.linspace(-1, 1, bc.NUM_BUCKETS).astype(np.float32)
  model = _model(config)
  model.bias_constraints.multipliers["a"].assign(multipliers)
  dense_bias = model.bias
  with tf.GradientTape() as tape:
    logits = model(features)
    term, _ = model.bias_constraints.term(
        labels[:, None], logits,
        model.bias_constraints.buckets(model, features, logits))
    objective = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
        labels=labels[:, None], logits=logits)) + term
  expected = tape.gradient(objective, dense_bias)
  model.train_on_batch(features, labels)
  name = dense_bias.path.replace("/", "_") + "_momentum"
  (momentum,) = [v for v in model.optimizer.variables if v.name == name]
  np.testing.assert_allclose(keras.ops.convert_to_numpy(momentum),
                             0.1 * expected.numpy(), rtol=1e-4, atol=1e-8)


def test_the_term_adds_to_the_rank_loss_rather_than_replacing_it():
  """At zero multipliers the term and its gradient are 0: one step with the
  rank loss and the constraints moves the weights as the rank loss alone
  does."""
  ranked = dataclasses.replace(CONFIG, step=dataclasses.replace(
      CONFIG.step, rank_loss_weight=0.5))
  constrained = dataclasses.replace(ranked, step=dataclasses.replace(
      ranked.step, bias_constraints=("a",)))
  features, labels = _batch(4)
  weights = []
  for config in (ranked, constrained, CONFIG):
    model = _model(config)
    model.train_on_batch(features, labels)
    weights.append(np.concatenate([keras.ops.convert_to_numpy(w).ravel()
                                   for w in model.weights]))
  np.testing.assert_allclose(weights[1], weights[0], rtol=1e-5, atol=1e-7)
  assert np.abs(weights[2] - weights[0]).max() > 1e-5  # The rank loss acts.


def test_multipliers_are_not_model_weights_nor_saved(tmp_path):
  model = _model(dataclasses.replace(CONFIG, step=dataclasses.replace(CONFIG.step, bias_constraints=("a",))))
  features, labels = _batch(1)
  model.train_on_batch(features, labels)
  multiplier = model.bias_constraints.multipliers["a"]
  assert all(v is not multiplier and v.name != multiplier.name
             for v in model.weights)
  tf.saved_model.save(model, str(tmp_path / "saved"))
  names = [name for name, _ in tf.train.list_variables(
      str(tmp_path / "saved" / "variables" / "variables"))]
  assert not [n for n in names if "bias_multipliers" in n]


def test_constraints_pull_bucket_bias_toward_zero():
  """Same data, seeds and steps: with the constraint on "a" (whose ids
  have different click rates) at the default ascent step, the variance
  over a's ids of (label - prediction) on held-out rows is lower."""
  features, labels = _batch(2, rows=4096)
  config = dataclasses.replace(CONFIG, step=dataclasses.replace(CONFIG.step, bias_constraints=("a",)))
  assert config.step.bias_constraint_lr == settings.DEFAULT_BIAS_CONSTRAINT_LR
  spreads = {}
  for name, cfg in (("plain", CONFIG), ("constrained", config)):
    model = _model(cfg)
    for step in range(80):
      model.train_on_batch(*_batch(100 + step % 16, rows=512))
    p = _sigmoid(keras.ops.convert_to_numpy(model(features))[:, 0])
    spreads[name] = float(np.var([
        np.mean(labels[features["a"] == k] - p[features["a"] == k])
        for k in range(VOCAB["a"])]))
  assert spreads["constrained"] < spreads["plain"], spreads


def test_settings_validate_bias_constraints():
  ok = settings.TrainerSettings(dataset="criteo", step={
      "bias_constraints": ["C1", settings.PREDICTED_CTR]})
  assert ok.step.bias_constraints == ("C1", settings.PREDICTED_CTR)
  assert settings.TrainerSettings.from_custom_config(
      ok.to_custom_config()) == ok
  with pytest.raises(ValueError, match="'I1'"):
    settings.TrainerSettings(dataset="criteo",
                             step={"bias_constraints": ("I1",)})
  with pytest.raises(ValueError, match="once"):
    settings.StepOptions(bias_constraints=("C1", "C1"))
  with pytest.raises(ValueError, match="bias_constraint_lr"):
    settings.StepOptions(bias_constraint_lr=0.0)
