"""Tests of SmeLU: values and gradients against NumPy, serialisation, models."""

import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf

from trainer_module import models
from trainer_module import settings

VOCAB = {"C1": 7, "C2": 5, "C3": 11}
DENSE = ("I1",)
SMELU = models.ModelOptions(embedding_dim=4, hidden_units=(16, 8),
                            cross_layers=2, activation="smelu",
                            smelu_beta=0.5)


def _smelu(z, beta):
  """The paper's definition, piece by piece."""
  return np.where(z <= -beta, 0.0,
                  np.where(z >= beta, z, (z + beta) ** 2 / (4 * beta)))


def _smelu_gradient(z, beta):
  return np.where(z <= -beta, 0.0,
                  np.where(z >= beta, 1.0, (z + beta) / (2 * beta)))


@pytest.mark.parametrize("beta", [0.5, 1.0, 2.5])
def test_values_and_gradients_at_the_knots_and_inside(beta):
  # The knots -beta, 0, beta, points inside each piece and far outside.
  z = np.array([-3 * beta, -beta, -0.5 * beta, 0.0, 0.25 * beta, beta,
                1.5 * beta, 10.0], np.float64)
  layer = models.SmeLU(beta, dtype="float64")
  x = tf.constant(z)
  with tf.GradientTape() as tape:
    tape.watch(x)
    y = layer(x)
  gradient = tape.gradient(y, x).numpy()
  np.testing.assert_allclose(y.numpy(), _smelu(z, beta), rtol=0, atol=1e-15)
  np.testing.assert_allclose(gradient, _smelu_gradient(z, beta), rtol=0,
                             atol=1e-15)
  # At the knots by hand: f(-b) = 0, f(0) = b/4, f(b) = b; f' = 0, 1/2, 1.
  np.testing.assert_allclose(y.numpy()[[1, 3, 5]], [0.0, beta / 4, beta])
  np.testing.assert_allclose(gradient[[1, 3, 5]], [0.0, 0.5, 1.0])


def test_is_continuous_and_smooth_around_the_knots():
  beta = 0.7
  layer = models.SmeLU(beta, dtype="float64")
  for knot in (-beta, beta):
    side = np.array([knot - 1e-9, knot + 1e-9])
    x = tf.constant(side)
    with tf.GradientTape() as tape:
      tape.watch(x)
      y = layer(x)
    values, gradients = y.numpy(), tape.gradient(y, x).numpy()
    assert abs(values[1] - values[0]) < 1e-8
    assert abs(gradients[1] - gradients[0]) < 1e-8


def test_rejects_a_non_positive_beta():
  with pytest.raises(ValueError, match="beta must be > 0"):
    models.SmeLU(0.0)
  with pytest.raises(ValueError, match="smelu_beta must be a number > 0"):
    models.ModelOptions(activation="smelu", smelu_beta=-1.0)
  with pytest.raises(ValueError, match="unknown activation 'gelu'"):
    models.ModelOptions(activation="gelu")


def test_layer_serialisation_round_trip():
  layer = models.SmeLU(0.3, name="s")
  clone = keras.saving.deserialize_keras_object(
      keras.saving.serialize_keras_object(layer))
  assert isinstance(clone, models.SmeLU)
  assert clone.beta == 0.3 and clone.name == "s"
  z = np.linspace(-1, 1, 11).astype(np.float32)
  np.testing.assert_array_equal(keras.ops.convert_to_numpy(clone(z)),
                                keras.ops.convert_to_numpy(layer(z)))


def _features(rows, seed=0):
  rng = np.random.default_rng(seed)
  features = {f: rng.integers(0, size, rows).astype(np.int64)
              for f, size in VOCAB.items()}
  features["I1"] = rng.normal(size=rows).astype(np.float32)
  return features


@pytest.mark.parametrize("name", [m for m in models.MODELS if m != "lr"])
def test_every_model_builds_with_smelu_in_its_dnn(name, tmp_path):
  model = models.build_model(name, VOCAB, DENSE, SMELU)
  smelus = [l for l in model.dnn.layers if isinstance(l, models.SmeLU)]
  dense = [l for l in model.dnn.layers if isinstance(l, keras.layers.Dense)]
  assert [l.beta for l in smelus] == [0.5, 0.5]
  assert all(l.activation is keras.activations.linear for l in dense)
  # The DNN is Dense -> SmeLU per layer, as NumPy computes it.
  x = np.random.default_rng(1).normal(size=(6, model.deep_input_dim))
  expected = x.astype(np.float32)
  for layer in dense:
    expected = _smelu(expected @ keras.ops.convert_to_numpy(layer.kernel) +
                      keras.ops.convert_to_numpy(layer.bias), 0.5)
  np.testing.assert_allclose(keras.ops.convert_to_numpy(model.dnn(x)),
                             expected, rtol=1e-5, atol=1e-6)
  # The config round trip keeps the activation.
  clone = models.CTRModel.from_config(model.get_config())
  clone.set_weights(model.get_weights())
  features = _features(4)
  np.testing.assert_array_equal(keras.ops.convert_to_numpy(clone(features)),
                                keras.ops.convert_to_numpy(model(features)))
  assert clone.options.activation == "smelu"


def test_relu_stays_the_default_dnn():
  model = models.build_model("deepfm", VOCAB, DENSE,
                             dataclasses.replace(
                                 SMELU, activation="relu",
                                 smelu_beta=settings.DEFAULT_SMELU_BETA))
  assert not any(isinstance(l, models.SmeLU) for l in model.dnn.layers)
  assert [l.name for l in model.dnn.layers] == ["dnn_0", "dnn_1"]
  assert settings.ModelOptions().activation == "relu"


def test_smelu_model_exports_as_a_saved_model(tmp_path):
  model = models.build_model("deepfm", VOCAB, DENSE, SMELU)
  rng = np.random.default_rng(3)
  for variable in model.weights:
    variable.assign(rng.normal(scale=0.3, size=variable.shape))
  spec = {f: tf.TensorSpec([None], tf.int64) for f in VOCAB}
  spec["I1"] = tf.TensorSpec([None], tf.float32)

  class Serving(tf.Module):

    def __init__(self):
      super().__init__()
      self.model = model

    @tf.function(input_signature=[spec])
    def serve(self, features):
      return {"p": tf.sigmoid(self.model(features, training=False))}

  serving = Serving()
  tf.saved_model.save(serving, str(tmp_path),
                      signatures={"serving_default": serving.serve})
  features = _features(9, seed=5)
  loaded = tf.saved_model.load(str(tmp_path))
  got = loaded.serve({k: tf.constant(v)
                      for k, v in features.items()})["p"].numpy()
  np.testing.assert_allclose(got, serving.serve(features)["p"].numpy(),
                             rtol=1e-6)
