"""Tests of the CowClip training step, its optimizers and callbacks."""

import dataclasses
import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from cowclip_reference import reference_clip
from trainer_module import callbacks as callbacks_lib
from trainer_module import models
from trainer_module import optimizers
from trainer_module import settings
from trainer_module import training

VOCAB = {"a": 7, "b": 5}
DENSE = ("x",)
OPTIONS = models.ModelOptions(embedding_dim=3, hidden_units=(16, 16))
CONFIG = training.TrainingConfig(
    dense_lr=1e-2, embed_lr=3e-2, l2=1e-3, r=0.5, zeta=1e-3,
    warmup_epochs=2.0, steps_per_epoch=2)
BETA_1, BETA_2, EPSILON = 0.9, 0.999, 1e-7  # keras.optimizers.Adam defaults.


def _batch(seed, rows=8, a_ids=(0, 1, 2, 3)):
  """A batch whose field-a ids come from ``a_ids`` only."""
  rng = np.random.default_rng(seed)
  features = {"a": rng.choice(np.array(a_ids, np.int64), rows),
              "b": rng.integers(0, VOCAB["b"], rows).astype(np.int64),
              "x": rng.normal(size=rows).astype(np.float32)}
  labels = ((features["a"] % 2 == 0) ^ (features["x"] > 0)).astype(
      np.float32)
  return features, labels


def _model(config=CONFIG, name="deepfm"):
  keras.utils.set_random_seed(1)
  model = models.build_model(name, VOCAB, DENSE, OPTIONS)
  training.compile_model(model, config)
  return model


def _np(value):
  return keras.ops.convert_to_numpy(value)


def _slot(optimizer, variable, kind):
  """An Adam slot ("momentum" or "velocity") of ``variable``."""
  name = variable.path.replace("/", "_") + "_" + kind
  (slot,) = [v for v in optimizer.variables if v.name == name]
  return _np(slot)


def _log_loss_gradients(model, features, labels):
  """d mean-BCE / d variable for every trainable variable, as NumPy."""
  with tf.GradientTape() as tape:
    logits = model(features)
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
        labels=labels[:, None], logits=logits))
  variables = model.trainable_variables
  gradients = tape.gradient(loss, variables)
  return {v.path: _np(tf.convert_to_tensor(g))
          for v, g in zip(variables, gradients)}


def _first_adam_step(weight, gradient, lr):
  m = (1 - BETA_1) * gradient
  v = (1 - BETA_2) * gradient**2
  alpha = lr * math.sqrt(1 - BETA_2) / (1 - BETA_1)
  return weight - alpha * m / (np.sqrt(v) + EPSILON)


def test_training_config_validates():
  with pytest.raises(ValueError, match="embed_lr"):
    dataclasses.replace(CONFIG, embed_lr=-1.0)
  with pytest.raises(ValueError, match="l2"):
    dataclasses.replace(CONFIG, l2=float("nan"))
  with pytest.raises(ValueError, match="steps_per_epoch"):
    dataclasses.replace(CONFIG, steps_per_epoch=0)
  with pytest.raises(ValueError, match="cowclip_variant 'clip'"):
    dataclasses.replace(CONFIG, step=dataclasses.replace(CONFIG.step, cowclip_variant="clip"))
  with pytest.raises(ValueError, match="embedding_update 'lazy'"):
    dataclasses.replace(CONFIG, step=dataclasses.replace(CONFIG.step, embedding_update="lazy"))
  with pytest.raises(ValueError, match="XLA"):
    dataclasses.replace(CONFIG, jit_compile=True, step=dataclasses.replace(CONFIG.step, embedding_update="sparse"))
  assert CONFIG.warmup_steps == 4


def test_linear_warmup_values():
  schedule = optimizers.LinearWarmup(2.0, 4)
  values = [float(schedule(step)) for step in range(6)]
  assert values == pytest.approx([0.5, 1.0, 1.5, 2.0, 2.0, 2.0])
  assert float(optimizers.LinearWarmup(2.0, 0)(0)) == 2.0
  clone = optimizers.LinearWarmup.from_config(schedule.get_config())
  assert float(clone(1)) == pytest.approx(1.0)


def test_two_optimizers_constant_embedding_lr_and_dense_warmup():
  model = _model()
  tables, dense = model.split_variables()
  assert len(tables) == 2 * len(VOCAB)
  assert model.embedding_optimizer is not model.optimizer
  # Each optimizer has slots for its own variables only.
  for optimizer, variables in ((model.embedding_optimizer, tables),
                               (model.optimizer, dense)):
    momentums = {v.name for v in optimizer.variables
                 if v.name.endswith("_momentum")}
    assert momentums == {v.path.replace("/", "_") + "_momentum"
                         for v in variables}
  features, labels = _batch(0)
  dense_lrs, embedding_lrs = [], []
  for _ in range(6):
    dense_lrs.append(float(_np(model.optimizer.learning_rate)))
    embedding_lrs.append(float(_np(model.embedding_optimizer.learning_rate)))
    model.train_on_batch(features, labels)
  assert dense_lrs == pytest.approx([2.5e-3, 5e-3, 7.5e-3, 1e-2, 1e-2, 1e-2])
  assert embedding_lrs == pytest.approx([3e-2] * 6)
  assert int(_np(model.optimizer.iterations)) == 6
  assert int(_np(model.embedding_optimizer.iterations)) == 6


@pytest.mark.parametrize("jit_compile", [False, True])
def test_dense_step_applies_clipped_embedding_gradients_only(jit_compile):
  model = _model(dataclasses.replace(CONFIG, jit_compile=jit_compile))
  features, labels = _batch(0)
  before = {v.path: _np(v) for v in model.trainable_variables}
  gradients = _log_loss_gradients(model, features, labels)
  logs = model.train_on_batch(features, labels, return_dict=True)

  clipped_some = False
  clipped_ids, batch_ids = 0, 0
  for field, deep, wide in model.embedding_tables():
    for table, clip in ((deep, True), (wide, False)):
      # L2 convention: l2 * sum(W^2) over the whole table, so + 2 l2 W.
      expected = gradients[table.path] + 2 * CONFIG.l2 * before[table.path]
      if clip:
        raw = expected
        expected = reference_clip(raw, before[table.path], features[field],
                                  CONFIG.r, CONFIG.zeta)
        clipped_some |= not np.allclose(expected, raw, rtol=1e-3)
        present = np.unique(features[field])
        batch_ids += len(present)
        clipped_ids += np.sum(~np.isclose(expected[present], raw[present],
                                          rtol=1e-6).all(axis=1))
      np.testing.assert_allclose(
          _slot(model.embedding_optimizer, table, "momentum"),
          (1 - BETA_1) * expected, rtol=1e-4, atol=1e-9)
      np.testing.assert_allclose(
          _np(table),
          _first_adam_step(before[table.path], expected, CONFIG.embed_lr),
          rtol=1e-4, atol=1e-7)
  assert clipped_some, "test data should trigger CowClip"
  assert logs["clipped_fraction"] == pytest.approx(clipped_ids / batch_ids)

  _, dense = model.split_variables()
  dense_lr = CONFIG.dense_lr / CONFIG.warmup_steps
  for variable in dense:  # No clipping, no L2, the warmed-up rate.
    expected = gradients[variable.path]
    np.testing.assert_allclose(_slot(model.optimizer, variable, "momentum"),
                               (1 - BETA_1) * expected, rtol=1e-4, atol=1e-9)
    np.testing.assert_allclose(
        _np(variable), _first_adam_step(before[variable.path], expected,
                                        dense_lr), rtol=1e-4, atol=1e-7)


def test_cowclip_off_leaves_embedding_gradients_unclipped():
  model = _model(dataclasses.replace(CONFIG, step=dataclasses.replace(CONFIG.step, cowclip=False)))
  features, labels = _batch(0)
  deep = model.embedding_tables()[0][1]
  before = _np(deep)
  gradient = _log_loss_gradients(model, features, labels)[deep.path]
  logs = model.train_on_batch(features, labels, return_dict=True)
  assert "clipped_fraction" not in logs
  np.testing.assert_allclose(
      _slot(model.embedding_optimizer, deep, "momentum"),
      (1 - BETA_1) * (gradient + 2 * CONFIG.l2 * before), rtol=1e-4,
      atol=1e-9)


def test_sparse_step_touches_only_rows_in_the_batch():
  model = _model(dataclasses.replace(CONFIG, step=dataclasses.replace(CONFIG.step, embedding_update="sparse")))
  assert isinstance(model.embedding_optimizer, optimizers.LazyAdam)
  features, labels = _batch(0, a_ids=(0, 1, 2, 3))
  field, deep, wide = model.embedding_tables()[0]
  present = np.unique(features[field])
  absent = np.setdiff1d(np.arange(VOCAB[field]), present)
  before = {t.path: _np(t) for t in (deep, wide)}
  gradients = _log_loss_gradients(model, features, labels)
  model.train_on_batch(features, labels)

  for table, clip in ((deep, True), (wide, False)):
    # L2 on the batch's rows only.
    expected = gradients[table.path].copy()
    expected[present] += 2 * CONFIG.l2 * before[table.path][present]
    if clip:
      expected = reference_clip(expected, before[table.path],
                                features[field], CONFIG.r, CONFIG.zeta)
    np.testing.assert_allclose(
        _slot(model.embedding_optimizer, table, "momentum"),
        (1 - BETA_1) * expected, rtol=1e-4, atol=1e-9)
    after = _np(table)
    np.testing.assert_array_equal(after[absent], before[table.path][absent])
    np.testing.assert_allclose(
        after[present], _first_adam_step(before[table.path], expected,
                                         CONFIG.embed_lr)[present],
        rtol=1e-4, atol=1e-7)

  # A second batch without ids 0..3: those rows keep their values although
  # their Adam momentum is not zero (dense Adam would move them).
  moved_once = _np(deep)
  features, labels = _batch(1, a_ids=(4, 5))
  model.train_on_batch(features, labels)
  np.testing.assert_array_equal(_np(deep)[present], moved_once[present])
  assert not np.array_equal(_np(deep)[[4, 5]], moved_once[[4, 5]])


def test_lazy_adam_matches_numpy_row_wise_adam():
  variable = keras.Variable(np.arange(10, dtype=np.float32).reshape(5, 2))
  optimizer = optimizers.LazyAdam(learning_rate=0.1)
  optimizer.build([variable])
  expected = _np(variable).copy()
  m, v = np.zeros_like(expected), np.zeros_like(expected)
  steps = [  # (indices with a duplicate, values)
      (np.array([0, 1, 1]), np.array([[1., -2.], [3., 4.], [-1., 1.]])),
      (np.array([1, 3]), np.array([[0.5, 0.5], [2., -3.]])),
  ]
  after = []
  for step, (indices, values) in enumerate(steps, start=1):
    optimizer.apply([tf.IndexedSlices(tf.constant(values, tf.float32),
                                      tf.constant(indices))], [variable])
    gradient = np.zeros_like(expected)
    np.add.at(gradient, indices, values)
    rows = np.unique(indices)
    m[rows] = BETA_1 * m[rows] + (1 - BETA_1) * gradient[rows]
    v[rows] = BETA_2 * v[rows] + (1 - BETA_2) * gradient[rows]**2
    alpha = 0.1 * math.sqrt(1 - BETA_2**step) / (1 - BETA_1**step)
    expected[rows] -= alpha * m[rows] / (np.sqrt(v[rows]) + EPSILON)
    np.testing.assert_allclose(_np(variable), expected, rtol=1e-5)
    after.append(_np(variable))
  # Not in the second gradient: rows 0, 2, 4 did not move at all.
  np.testing.assert_array_equal(after[1][[0, 2, 4]], after[0][[0, 2, 4]])


@pytest.mark.parametrize("update", settings.EMBEDDING_UPDATES)
def test_dense_and_sparse_updates_both_train(update):
  model = _model(dataclasses.replace(CONFIG, steps_per_epoch=8, step=dataclasses.replace(CONFIG.step, embedding_update=update)))
  features, labels = _batch(3, rows=256, a_ids=tuple(range(7)))
  data = tf.data.Dataset.from_tensor_slices((features, labels)).batch(32)
  before = model.evaluate(data, verbose=0, return_dict=True)
  history = model.fit(data, epochs=6, verbose=0)
  after = model.evaluate(data, verbose=0, return_dict=True)
  assert set(history.history) == {"loss", "logloss", "auc",
                                  "clipped_fraction"}
  assert 0 <= min(history.history["clipped_fraction"])
  assert max(history.history["clipped_fraction"]) <= 1
  assert set(after) == {"loss", "logloss", "auc"}
  assert after["logloss"] < before["logloss"] - 0.1
  assert after["loss"] > after["logloss"]  # The L2 term is in the loss.


def test_non_finite_loss_raises_with_epoch_and_step():
  model = _model()
  features, labels = _batch(0, rows=32)
  features["x"][20] = np.nan  # In the third batch of 8.
  data = tf.data.Dataset.from_tensor_slices((features, labels)).batch(8)
  with pytest.raises(callbacks_lib.NonFiniteLossError,
                     match="loss became nan at epoch 1 step 3"):
    model.fit(data, epochs=2, verbose=0)


def test_training_needs_compile_model():
  model = models.build_model("wdl", VOCAB, DENSE, OPTIONS)
  model.compile(optimizer="adam")
  features, labels = _batch(0)
  with pytest.raises(RuntimeError, match="training.compile_model"):
    model.train_on_batch(features, labels)


def test_unit_sample_weights_change_nothing_and_the_loss_is_a_weighted_mean():
  """Importance weights (negative sampling): weights of 1 train exactly as
  none; the loss is a weighted MEAN, so a uniform weight leaves it as is."""
  features, labels = _batch(0)
  plain, weighted = _model(), _model()
  want = plain.train_on_batch(features, labels, return_dict=True)
  got = weighted.train_on_batch(features, labels, sample_weight=np.ones(8),
                                return_dict=True)
  for name in want:
    assert float(got[name]) == pytest.approx(float(want[name]), rel=1e-6)
  for a, b in zip(plain.weights, weighted.weights):
    np.testing.assert_allclose(_np(a), _np(b), rtol=1e-6, atol=1e-8)
  doubled = _model().test_on_batch(features, labels,
                                   sample_weight=np.full(8, 2.0),
                                   return_dict=True)
  single = _model().test_on_batch(features, labels, return_dict=True)
  assert float(doubled["logloss"]) == pytest.approx(float(single["logloss"]),
                                                    rel=1e-6)


@pytest.mark.parametrize("update", ["dense", "sparse"])
def test_a_weighted_step_trains_as_the_batch_with_copies(update):
  """Integer weight w == the example w times: loss, metrics, CowClip counts
  and the Adam updates of every weight."""
  config = dataclasses.replace(CONFIG, r=0.05, step=dataclasses.replace(CONFIG.step, embedding_update=update))
  features, labels = _batch(0, rows=12)
  weights = np.where(labels > 0, 1.0, 3.0).astype(np.float32)
  repeat = weights.astype(int)
  copies = {k: np.repeat(v, repeat) for k, v in features.items()}
  weighted, copied = _model(config), _model(config)
  got = weighted.train_on_batch(features, labels, sample_weight=weights,
                                return_dict=True)
  want = copied.train_on_batch(copies, np.repeat(labels, repeat),
                               return_dict=True)
  for name in ("loss", "logloss", "auc", "clipped_fraction"):
    assert got[name] == pytest.approx(want[name], rel=1e-5), name
  assert want["clipped_fraction"] > 0  # The clip acted on both.
  for a, b in zip(weighted.weights, copied.weights):
    np.testing.assert_allclose(_np(a), _np(b), rtol=1e-5, atol=1e-7,
                               err_msg=a.path)


def test_weighted_logloss_and_auc_against_numpy():
  model = _model()
  features, labels = _batch(3, rows=64)
  weights = np.where(labels > 0, 1.0, 4.0).astype(np.float32)
  logs = model.test_on_batch(features, labels, sample_weight=weights,
                             return_dict=True)
  z = _np(model(features)).reshape(-1).astype(np.float64)
  losses = np.maximum(z, 0) - z * labels + np.log1p(np.exp(-np.abs(z)))
  assert logs["logloss"] == pytest.approx(
      np.sum(weights * losses) / np.sum(weights), rel=1e-5)
  # Weighted AUC: P(score of a click > score of a non-click), non-clicks
  # weighted (ties absent: continuous scores).
  clicks, others = z[labels > 0], z[labels == 0]
  wins = (clicks[:, None] > others[None, :]) * weights[labels == 0][None, :]
  exact = wins.sum() / (len(clicks) * weights[labels == 0].sum())
  assert logs["auc"] == pytest.approx(exact, abs=5e-3)  # Keras' buckets.


def test_recalibrate_bias_weighs_the_rows():
  model = _model()
  features, labels = _batch(5, rows=64)
  weights = np.where(labels > 0, 1.0, 4.0).astype(np.float32)
  data = tf.data.Dataset.from_tensor_slices(
      (features, labels, weights)).batch(16)
  training.recalibrate_bias(model, data, 0.3)
  z = _np(model(features)).reshape(-1).astype(np.float64)
  mean_prediction = np.average(1 / (1 + np.exp(-z)), weights=weights)
  assert mean_prediction == pytest.approx(0.3, abs=1e-5)


def test_throughput_logger_logs_examples_per_second(tmp_path, capsys):
  model = _model()
  features, labels = _batch(0, rows=32)
  data = tf.data.Dataset.from_tensor_slices((features, labels)).batch(8)
  history = model.fit(data, epochs=2, verbose=0, callbacks=[
      callbacks_lib.ThroughputLogger(8, log_dir=str(tmp_path))])
  rates = history.history["examples_per_second"]
  assert len(rates) == 2 and all(r > 0 for r in rates)
  assert "Epoch 2:" in capsys.readouterr().out
  events = list(tmp_path.glob("events.out.tfevents.*"))
  assert events
  tags = {value.tag for event in tf.compat.v1.train.summary_iterator(
      str(events[0])) for value in event.summary.value}
  assert "examples_per_second" in tags


def test_throughput_logger_times_the_steps_after_the_warmup(capsys):
  model = _model()
  features, labels = _batch(0, rows=48)
  data = tf.data.Dataset.from_tensor_slices((features, labels)).batch(8)
  logger = callbacks_lib.ThroughputLogger(8, warmup_steps=2)
  history = model.fit(data, epochs=1, verbose=0, callbacks=[logger])
  # 6 steps, 2 of them warm-up: 4 timed.
  assert logger.timed_steps == 4 and logger.timed_seconds > 0
  assert history.history["examples_per_second"][0] == pytest.approx(
      4 * 8 / logger.timed_seconds)
  assert history.history["examples_per_cpu_second"][0] == pytest.approx(
      4 * 8 / logger.timed_cpu_seconds)
  assert "(4 steps of batch 8" in capsys.readouterr().out
  with pytest.raises(ValueError, match="warmup_steps must be >= 1"):
    callbacks_lib.ThroughputLogger(8, warmup_steps=0)


def test_fused_adam_matches_keras_adam():
  rng = np.random.default_rng(0)
  start = rng.normal(size=(6, 3)).astype(np.float32)
  fused, plain = keras.Variable(start), keras.Variable(start)
  fused_adam = optimizers.FusedAdam(learning_rate=0.05)
  plain_adam = keras.optimizers.Adam(learning_rate=0.05)
  fused_adam.build([fused])
  plain_adam.build([plain])
  for _ in range(3):
    gradient = tf.constant(rng.normal(size=(6, 3)).astype(np.float32))
    fused_adam.apply([gradient], [fused])
    plain_adam.apply([gradient], [plain])
  # Same formula; the kernels round differently (1e-5 of a 0.05 step).
  np.testing.assert_allclose(_np(fused), _np(plain), rtol=1e-5, atol=1e-6)
  assert not np.allclose(_np(fused), start)
  # ApplyAdam forms 1 - beta_2 in float32 (Keras in float64): 1.3e-5.
  np.testing.assert_allclose(_slot(fused_adam, fused, "velocity"),
                             _slot(plain_adam, plain, "velocity"), rtol=1e-4)


def test_mixed_bfloat16_keeps_float32_weights_and_table_gradients():
  keras.utils.set_random_seed(1)
  model = models.build_model(
      "deepfm", VOCAB, DENSE,
      dataclasses.replace(OPTIONS, precision="mixed_bfloat16"))
  training.compile_model(model, CONFIG)
  assert model.dnn.layers[0].compute_dtype == "bfloat16"
  assert {v.dtype for v in model.trainable_variables} == {"float32"}
  features, labels = _batch(0)
  assert model(features).dtype == "float32"
  logs = model.train_on_batch(features, labels, return_dict=True)
  assert math.isfinite(logs["loss"]) and 0 <= logs["clipped_fraction"] <= 1
  # The tables' Adam moments got (float32) gradients through CowClip.
  deep = model.embedding_tables()[0][1]
  momentum = _slot(model.embedding_optimizer, deep, "momentum")
  assert momentum.dtype == np.float32 and np.abs(momentum).max() > 0


def test_recalibrate_bias_sets_the_mean_prediction_to_the_given_rate():
  """The target is the training part's click rate, given: not the labels
  of the rows predicted (a few hundred validation rows' own click rate is
  off by its noise)."""
  model = _model()
  batches = [_batch(seed) for seed in range(4)]
  labels = np.concatenate([l for _, l in batches])
  model.bias.assign([2.5])  # Far off: predicts ~90% clicks.
  data = tf.data.Dataset.from_tensor_slices(
      ({k: np.concatenate([f[k] for f, _ in batches]) for k in batches[0][0]},
       labels)).batch(8)
  logits_before = np.concatenate(
      [_np(model(f, training=False)).reshape(-1) for f, _ in data])
  shift = training.recalibrate_bias(model, data, 0.25)
  logits_after = np.concatenate(
      [_np(model(f, training=False)).reshape(-1) for f, _ in data])
  np.testing.assert_allclose(logits_after - logits_before, shift, atol=1e-5)
  mean_prediction = (1 / (1 + np.exp(-logits_after.astype(np.float64)))).mean()
  assert mean_prediction == pytest.approx(0.25, abs=1e-5)
  assert labels.mean() != pytest.approx(0.25, abs=1e-2)
  assert shift < 0


def test_logistic_regression_trains_without_deep_tables():
  config = dataclasses.replace(CONFIG, step=dataclasses.replace(CONFIG.step, cowclip=False))
  model = _model(config, name="lr")
  wide_before = [_np(w).copy() for _, _, w in model.embedding_tables()]
  features, labels = _batch(0)
  model.train_on_batch(features, labels)
  moved = [not np.array_equal(_np(w), before) for (_, _, w), before
           in zip(model.embedding_tables(), wide_before)]
  assert all(moved)
