"""Tests of the CTR models: math against NumPy, input errors, train, export."""

import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf

from trainer_module import models
from trainer_module import settings
from trainer_module import training

VOCAB = {"C1": 7, "C2": 5, "C3": 11}
DENSE = ("I1", "I2")
SMALL = models.ModelOptions(embedding_dim=4, hidden_units=(16, 16),
                            cross_layers=2)


def _features(rows: int, seed: int = 0):
  rng = np.random.default_rng(seed)
  features = {f: rng.integers(0, size, rows).astype(np.int64)
              for f, size in VOCAB.items()}
  features.update({f: rng.normal(size=rows).astype(np.float32)
                   for f in DENSE})
  return features


def _learnable_labels(features):
  """Labels a CTR model can learn: a C1 id effect plus a dense effect."""
  logit = 2.0 * (features["C1"] % 2 * 2 - 1) + 1.5 * features["I1"]
  return (logit > 0).astype(np.float32)


def _np(variable):
  return keras.ops.convert_to_numpy(variable)


def _relu_dnn(model, x):
  for layer in model.dnn.layers:
    x = np.maximum(x @ _np(layer.kernel) + _np(layer.bias), 0.0)
  return x


def _fm(embedded):
  """Pairwise sum_{i<j} <e_i, e_j> the slow, obvious way."""
  fields = embedded.shape[1]
  return sum((embedded[:, i] * embedded[:, j]).sum(axis=1, keepdims=True)
             for i in range(fields) for j in range(i + 1, fields))


def _vector_cross(layer, x0):
  x = x0
  for kernel, bias in zip(layer.kernels, layer.biases):
    x = x0 * (x @ _np(kernel)) + _np(bias) + x  # x0 * (x_l . w) + b + x_l
  return x


def _matrix_cross(layer, x0):
  x = x0
  for i in range(layer.num_layers):
    bias = _np(layer.biases[i])
    if layer.low_rank is None:
      # x0 * (W x_l + b) + x_l with W = kernel^T.
      x = x0 * (np.einsum("ij,bj->bi", _np(layer.kernels[i]).T, x) + bias) + x
      continue
    experts = range(i * layer.num_experts, (i + 1) * layer.num_experts)
    outputs, gates = [], []
    for k in experts:
      v, c, u = (_np(w[k]) for w in (layer.v_kernels, layer.c_kernels,
                                      layer.u_kernels))
      low = np.tanh(np.tanh(x @ v) @ c)
      outputs.append(x0 * (low @ u + bias))
      gates.append(x @ _np(layer.gate_kernels[k]))
    gates = np.exp(np.concatenate(gates, axis=1))
    gates /= gates.sum(axis=1, keepdims=True)
    x = sum(gates[:, e:e + 1] * out for e, out in enumerate(outputs)) + x
  return x


def _numpy_forward(model, features):
  """The whole model in NumPy, written from the module docstring."""
  wide = sum(_np(w)[features[f]] for f, _, w in model.embedding_tables())
  dense = np.stack([features[f] for f in DENSE], axis=1)
  logit = wide + _np(model.bias) + dense @ _np(model.dense_linear.kernel)
  if model.architecture == "lr":
    return logit
  embedded = np.stack([_np(deep)[features[f]]
                       for f, deep, _ in model.embedding_tables()], axis=1)
  deep_input = np.concatenate(
      [embedded.reshape(len(dense), -1), dense], axis=1)
  hidden = _relu_dnn(model, deep_input)
  head = _np(model.deep_logit.kernel)
  if model.architecture == "deepfm":
    return logit + _fm(embedded) + hidden @ head
  if model.architecture == "wdl":
    return logit + hidden @ head
  cross = (_vector_cross if model.architecture == "dcn" else _matrix_cross)(
      model.interaction, deep_input)
  return logit + np.concatenate([cross, hidden], axis=1) @ head


def _randomize(model, seed):
  """Non-trivial weights everywhere (wide tables and biases start at 0)."""
  rng = np.random.default_rng(seed)
  for variable in model.weights:
    variable.assign(rng.normal(scale=0.3, size=variable.shape))


def test_model_options_validate():
  with pytest.raises(ValueError, match="hidden_units"):
    models.ModelOptions(hidden_units=())
  with pytest.raises(ValueError, match="embedding_dim"):
    models.ModelOptions(embedding_dim=0)
  with pytest.raises(ValueError, match="dcnv2_low_rank"):
    models.ModelOptions(dcnv2_low_rank=-3)
  with pytest.raises(ValueError):
    models.ModelOptions(dense_initializer="no_such_initializer")
  assert models.ModelOptions(hidden_units=[8, 4]).hidden_units == (8, 4)
  with pytest.raises(ValueError, match="precision.*float16"):
    models.ModelOptions(precision="float16")


def test_build_model_rejects_bad_arguments():
  with pytest.raises(ValueError, match="unknown model 'fm'"):
    models.build_model("fm", VOCAB, DENSE, SMALL)
  with pytest.raises(ValueError, match="'C2'"):
    models.build_model("wdl", {"C1": 3, "C2": 0}, DENSE, SMALL)
  with pytest.raises(ValueError, match="both categorical and dense"):
    models.build_model("wdl", VOCAB, ("C1",), SMALL)


def test_factorization_machine_matches_pairwise_sum():
  embedded = np.random.default_rng(0).normal(size=(3, 4, 5)).astype(
      np.float32)
  got = models.FactorizationMachine()(embedded)
  np.testing.assert_allclose(_np(got), _fm(embedded), rtol=1e-5, atol=1e-5)


def test_fm_on_a_hand_computed_example():
  # Fields e1=(1,2), e2=(3,-1), e3=(0,1): <e1,e2>=1, <e1,e3>=2, <e2,e3>=-1.
  embedded = np.array([[[1., 2.], [3., -1.], [0., 1.]]], np.float32)
  assert _np(models.FactorizationMachine()(embedded)).tolist() == [[2.0]]


def test_cross_network_matches_numpy():
  x0 = np.random.default_rng(1).normal(size=(4, 6)).astype(np.float32)
  layer = models.CrossNetwork(3)
  layer.build(x0.shape)
  _randomize(layer, 2)
  np.testing.assert_allclose(_np(layer(x0)), _vector_cross(layer, x0),
                             rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("low_rank", [None, 2])
def test_matrix_cross_network_matches_numpy(low_rank):
  x0 = np.random.default_rng(1).normal(size=(4, 6)).astype(np.float32)
  layer = models.MatrixCrossNetwork(2, low_rank=low_rank, num_experts=3)
  layer.build(x0.shape)
  _randomize(layer, 3)
  np.testing.assert_allclose(_np(layer(x0)), _matrix_cross(layer, x0),
                             rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", models.MODELS)
def test_forward_matches_numpy(name):
  options = dataclasses.replace(SMALL, dcnv2_low_rank=3, dcnv2_experts=2)
  model = models.build_model(name, VOCAB, DENSE, options)
  _randomize(model, 4)
  features = _features(5)
  # [batch, 1] ids are accepted too.
  features["C2"] = features["C2"][:, None]
  logits = _np(model(features))
  features["C2"] = features["C2"][:, 0]
  assert logits.shape == (5, 1)
  np.testing.assert_allclose(logits, _numpy_forward(model, features),
                             rtol=1e-4, atol=1e-4)


def test_embedding_tables_and_their_init():
  options = dataclasses.replace(SMALL, embedding_stddev=0.05)
  model = models.build_model("deepfm", {"C1": 4000, "C2": 3}, (), options)
  tables = model.embedding_tables()
  assert [f for f, _, _ in tables] == ["C1", "C2"]
  assert [tuple(d.shape) for _, d, _ in tables] == [(4000, 4), (3, 4)]
  assert [tuple(w.shape) for _, _, w in tables] == [(4000, 1), (3, 1)]
  assert np.std(_np(tables[0][1])) == pytest.approx(0.05, rel=0.05)
  assert not np.any(_np(tables[0][2]))  # Wide tables start at zero.
  embeddings, dense = model.split_variables()
  assert len(embeddings) == 4
  assert len(embeddings) + len(dense) == len(model.trainable_variables)
  assert model.dense_linear is None  # No dense features, no dense weights.


@pytest.mark.parametrize("change, message", [
    (lambda f: f.pop("C3"), "'C3' is missing"),
    (lambda f: f.update(C1=f["C1"].astype(np.float32)), "'C1' must hold "
     "integer ids"),
    (lambda f: f.update(I2=np.zeros((5, 2), np.float32)), r"'I2' must have "
     r"shape \[batch\] or \[batch, 1\], got \[5, 2\]"),
    (lambda f: f.update(C2=tf.sparse.from_dense(f["C2"])), "'C2' must be a "
     "dense tensor"),
])
def test_bad_input_names_the_feature(change, message):
  model = models.build_model("wdl", VOCAB, DENSE, SMALL)
  features = _features(5)
  change(features)
  with pytest.raises(ValueError, match=message):
    model(features)


def test_get_config_round_trip():
  model = models.build_model("dcnv2", VOCAB, DENSE, SMALL)
  clone = models.CTRModel.from_config(model.get_config())
  assert clone.get_config() == model.get_config()
  clone.set_weights(model.get_weights())
  features = _features(3)
  np.testing.assert_array_equal(_np(clone(features)), _np(model(features)))


class _Serving(tf.Module):
  """Serialized tf.Examples in, probability out, like the trainer's export."""

  def __init__(self, model):
    super().__init__()
    self.model = model
    self._spec = {f: tf.io.FixedLenFeature([], tf.int64) for f in VOCAB}
    self._spec.update({f: tf.io.FixedLenFeature([], tf.float32)
                       for f in DENSE})

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
  def serve(self, examples):
    features = tf.io.parse_example(examples, self._spec)
    return {"probability": tf.sigmoid(self.model(features, training=False))}


def _serialize(features):
  rows = len(next(iter(features.values())))
  examples = []
  for i in range(rows):
    feature = {f: tf.train.Feature(int64_list=tf.train.Int64List(
        value=[features[f][i]])) for f in VOCAB}
    feature.update({f: tf.train.Feature(float_list=tf.train.FloatList(
        value=[features[f][i]])) for f in DENSE})
    examples.append(tf.train.Example(features=tf.train.Features(
        feature=feature)).SerializeToString())
  return tf.constant(examples)


@pytest.mark.parametrize("name", models.MODELS)
def test_trains_then_exports_identical_outputs(name, tmp_path):
  keras.utils.set_random_seed(0)
  options = dataclasses.replace(SMALL, dcnv2_low_rank=(
      2 if name == "dcnv2" else None))
  model = models.build_model(name, VOCAB, DENSE, options)
  training.compile_model(model, training.TrainingConfig(
      dense_lr=1e-2, embed_lr=1e-2, l2=1e-5, r=1.0, zeta=1e-5,
      warmup_epochs=1.0, steps_per_epoch=4,
      step=settings.StepOptions(cowclip=name != "lr")))
  features = _features(256)
  data = tf.data.Dataset.from_tensor_slices(
      (features, _learnable_labels(features))).batch(64)
  before = model.evaluate(data, verbose=0, return_dict=True)
  model.fit(data, epochs=8, verbose=0)
  after = model.evaluate(data, verbose=0, return_dict=True)
  assert after["logloss"] < before["logloss"] - 0.1
  # The labels need feature interactions: the linear model fits less.
  assert after["auc"] > (0.8 if name == "lr" else 0.9)

  serving = _Serving(model)
  tf.saved_model.save(serving, str(tmp_path),
                      signatures={"serving_default": serving.serve})
  examples = _serialize(_features(9, seed=5))
  expected = _np(serving.serve(examples)["probability"])
  loaded = tf.saved_model.load(str(tmp_path))
  got = loaded.signatures["serving_default"](examples=examples)["probability"]
  np.testing.assert_array_equal(got.numpy(), expected)
  # The export holds the model's weights, not the Adam slots.
  saved = tf.train.list_variables(str(tmp_path / "variables" / "variables"))
  assert len(saved) - 1 == len(model.weights)  # -1: the object graph entry.


def test_logistic_regression_is_the_linear_part_alone():
  model = models.build_model("lr", VOCAB, DENSE, SMALL)
  tables = model.embedding_tables()
  assert all(deep is None for _, deep, _ in tables)
  assert [tuple(w.shape) for _, _, w in tables] == [
      (VOCAB[f], 1) for f in VOCAB]
  embeddings, dense = model.split_variables()
  assert len(embeddings) == len(VOCAB)
  # Dense weights: one per dense feature, and the bias.
  assert sorted(tuple(v.shape) for v in dense) == [(1,), (len(DENSE), 1)]
  assert len(embeddings) + len(dense) == len(model.trainable_variables)
  with pytest.raises(ValueError, match="no deep embedding tables"):
    training.compile_model(model, training.TrainingConfig(
        dense_lr=1e-2, embed_lr=1e-2, l2=1e-5, r=1.0, zeta=1e-5,
        warmup_epochs=1.0, steps_per_epoch=4))
