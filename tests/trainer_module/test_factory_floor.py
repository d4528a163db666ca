"""The Factory Floor techniques in the training step: Shampoo for the dense
layers, the rank loss and distillation (their maths: test_shampoo.py and
test_losses.py). The step's dense gradient is captured where it reaches the
dense optimizer and compared with the gradient of the intended objective."""

import dataclasses

import keras
import numpy as np
import tensorflow as tf

from test_training import CONFIG, DENSE, OPTIONS, VOCAB, _batch, _model
from trainer_module import losses
from trainer_module import models
from trainer_module import shampoo
from trainer_module import training


def _with(**step):
  return dataclasses.replace(CONFIG, step=dataclasses.replace(CONFIG.step,
                                                              **step))


def _captured_dense_gradients(model, features, labels):
  """The gradients train_step hands the dense optimizer (one step)."""
  captured = []
  apply = model.optimizer.apply

  def capture(gradients, variables):
    captured.extend(tf.convert_to_tensor(g).numpy() for g in gradients)
    return apply(gradients, variables)

  model.optimizer.apply = capture
  model.run_eagerly = True  # The gradients as values.
  model.train_on_batch(features, labels)
  return captured


def _dense_gradients(model, objective):
  _, dense = model.split_variables()
  with tf.GradientTape() as tape:
    value = objective()
  return [g.numpy() for g in tape.gradient(value, dense)]


def test_shampoo_is_the_dense_optimizer_when_asked():
  model = _model(_with(dense_optimizer="shampoo", precondition_every=3))
  assert isinstance(model.optimizer, shampoo.Shampoo)
  assert model.optimizer.precondition_every == 3
  assert isinstance(_model().optimizer, training.optimizers.FusedAdam)
  features, labels = _batch(0, rows=64)
  data = tf.data.Dataset.from_tensors((features, labels)).repeat(40)
  before = model.evaluate(data.take(1), verbose=0, return_dict=True)["loss"]
  model.fit(data, verbose=0)
  after = model.evaluate(data.take(1), verbose=0, return_dict=True)["loss"]
  assert after < before


def test_the_rank_loss_joins_the_objective():
  weight = 0.7
  features, labels = _batch(3, rows=32)
  model = _model(_with(rank_loss_weight=weight))
  reference = _model(_with(rank_loss_weight=weight))  # Same seed, weights.
  step = _captured_dense_gradients(model, features, labels)
  y = tf.reshape(tf.constant(labels), [-1, 1])

  def objective():
    logits = reference(features, training=True)
    return (tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
        labels=y, logits=logits)) + weight *
            losses.sampled_pairwise_rank_loss(
                y, logits, tf.constant([0, 0], tf.int64)))

  for got, want in zip(step, _dense_gradients(reference, objective)):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
  plain = _captured_dense_gradients(_model(), features, labels)
  assert not all(np.allclose(a, b) for a, b in zip(step, plain))


def _constant_teacher(probability):
  """A DeepFM whose prediction is `probability` for every example."""
  teacher = models.build_model("deepfm", VOCAB, DENSE, OPTIONS)
  for variable in teacher.weights:
    variable.assign(tf.zeros_like(variable))
  teacher.bias.assign([np.log(probability / (1 - probability))])
  return teacher


def test_distillation_fits_the_teachers_beside_the_labels():
  features, labels = _batch(5, rows=32)
  teachers = [_constant_teacher(0.1), _constant_teacher(0.3)]
  model = _model()
  count = len(model.weights)
  training.distill_from(model, teachers, label_weight=0.25)
  assert len(model.weights) == count  # The teachers are not its layers.
  reference = _model()
  step = _captured_dense_gradients(model, features, labels)
  y = tf.reshape(tf.constant(labels), [-1, 1])

  def objective():
    logits = reference(features, training=True)
    target = 0.25 * y + 0.75 * 0.2  # The teachers' mean: 0.2.
    return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
        labels=target, logits=logits))

  for got, want in zip(step, _dense_gradients(reference, objective)):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_a_distilled_model_moves_towards_its_teachers():
  """Pure distillation from teachers predicting 0.1 on labels of rate ~0.5:
  the student's mean prediction goes below the labels', towards 0.1."""
  features, labels = _batch(7, rows=256)
  data = tf.data.Dataset.from_tensors((features, labels)).repeat(60)

  def mean_prediction(label_weight):
    model = _model()
    training.distill_from(model, [_constant_teacher(0.1)], label_weight)
    model.fit(data, verbose=0)
    return float(tf.reduce_mean(tf.sigmoid(model(features))))

  assert mean_prediction(0.0) < 0.2 < mean_prediction(1.0)
  assert 0.3 < labels.mean() < 0.7
  keras.backend.clear_session()
