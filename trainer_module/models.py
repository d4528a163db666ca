"""Keras 3 CTR models: DeepFM, Wide&Deep, DCN and DCN-V2.

The four share one skeleton, that of the CowClip reference implementation
(bytedance/LargeBatchCTR, built on DeepCTR), so the paper's hyperparameters
mean the same thing here:

  logit = bias + linear(ids, dense) + interaction(embeddings, dense)

* Every categorical field has its own d-dim embedding table ("deep",
  N(0, embedding_stddev)) and its own 1-dim table ("wide", the linear
  weights, zero-initialised like DeepCTR). Tables are per field because
  CowClip clips each row with the counts of that field's ids in the batch.
* Dense features enter the linear part (one weight each) and the DNN/cross
  input, never the FM term: FM is defined over field embeddings.
* Interactions: DeepFM adds FM + DNN logits; Wide&Deep ("wdl") the DNN
  logit; DCN and DCN-V2 one logit of [cross output, DNN output]. DCN and
  DCN-V2 keep the linear part too, as the reference's DeepCTR versions do
  (the DCN paper has none): it costs one lookup per field and keeps the
  four models comparable.
* "lr" is the logistic-regression baseline: the linear part alone (bias +
  the width-1 "wide" table of every field + one weight per dense feature),
  trained by the same step. The pipeline trains it next to every model so
  the gate can check the model beats it, on the ids of spec.linear_features
  (the counts as log-squared buckets, no dense features) and with its own
  fit (trainer.train_baseline).
* The DNN's activation is ReLU or SmeLU (ModelOptions.activation), the
  smooth ReLU that makes retrains reproducible (docs/
  production_smelu_sampling.md).
* The model returns ONE LOGIT [batch, 1]. The sigmoid belongs to the loss
  (from logits, numerically stable) and to the serving signature.

Inputs are the Transform output (see features.py): a dict with every field
of ``vocab_sizes`` as int ids [batch] or [batch, 1] in [0, vocab size) and
every dense feature as float [batch] or [batch, 1]. Other keys are ignored.

The training step is not the model's: training.compile_model hands the
model a training.Step (its gradient chain, optimizers' updates and
metrics), which CTRModel.train_step and test_step call.
"""

import dataclasses
from typing import List, Mapping, Optional, Sequence, Tuple

import keras
from keras import ops
import tensorflow as tf

from trainer_module import callbacks as callbacks_lib
from trainer_module import precision as precision_lib
from trainer_module import settings

# The model names, the baseline's and the precisions are the settings'
# (trainer_module.settings, no TensorFlow): ModelOptions lives there too.
MODELS = settings.MODELS
LOGISTIC_REGRESSION = settings.LOGISTIC_REGRESSION
PRECISIONS = settings.PRECISIONS
ModelOptions = settings.ModelOptions


@keras.saving.register_keras_serializable(package="cowclip_ctr")
class SmeLU(keras.layers.Layer):
  """Smooth ReLU (Anil et al. 2022, "On the Factory Floor", sec. 5):

    f(z) = 0                   for z <= -beta
           (z + beta)^2 / (4 beta)  for |z| <= beta
           z                   for z >= beta

  Continuous with a continuous gradient (0, (z + beta) / (2 beta), 1), so
  small weight changes move predictions smoothly: retrains of the same
  model disagree less (prediction difference) than with ReLU's kink.
  """

  def __init__(self, beta: float = settings.DEFAULT_SMELU_BETA, **kwargs):
    super().__init__(**kwargs)
    if not beta > 0:
      raise ValueError(f"SmeLU beta must be > 0, got {beta!r}")
    self.beta = float(beta)

  def call(self, z):
    beta = ops.cast(self.beta, z.dtype)
    quadratic = ops.square(z + beta) / (4.0 * beta)
    return ops.where(z <= -beta, ops.zeros_like(z),
                     ops.where(z >= beta, z, quadratic))

  def get_config(self):
    config = super().get_config()
    config["beta"] = self.beta
    return config


def dnn_layers(options: ModelOptions) -> List[keras.layers.Layer]:
  """The DNN of every model: Dense layers with options.activation (ReLU
  inside Dense, SmeLU as its own layer after a linear Dense)."""
  layers = []
  relu = options.activation == "relu"
  for i, units in enumerate(options.hidden_units):
    layers.append(keras.layers.Dense(
        units, activation="relu" if relu else None,
        kernel_initializer=options.dense_initializer, name=f"dnn_{i}",
        dtype=options.precision))
    if not relu:
      layers.append(SmeLU(options.smelu_beta, name=f"smelu_{i}",
                          dtype=options.precision))
  return layers


@keras.saving.register_keras_serializable(package="cowclip_ctr")
class FactorizationMachine(keras.layers.Layer):
  """DeepFM's second-order term: sum over field pairs i<j of <e_i, e_j>.

  Computed in O(F d) as 0.5 * sum_d((sum_i e_i)^2 - sum_i e_i^2) instead of
  over the F(F-1)/2 pairs. Input [batch, fields, d], output [batch, 1].
  """

  def call(self, embeddings):
    square_of_sum = ops.square(ops.sum(embeddings, axis=1))
    sum_of_squares = ops.sum(ops.square(embeddings), axis=1)
    return 0.5 * ops.sum(square_of_sum - sum_of_squares, axis=1,
                         keepdims=True)


@keras.saving.register_keras_serializable(package="cowclip_ctr")
class CrossNetwork(keras.layers.Layer):
  """DCN's cross layers (vector form): x_{l+1} = x0 * (x_l . w_l) + b_l + x_l.

  Each layer adds one degree of explicit feature crossing for 2D parameters,
  which a DNN has to learn implicitly. Input and output [batch, D].
  """

  def __init__(self, num_layers: int,
               kernel_initializer="glorot_normal", **kwargs):
    super().__init__(**kwargs)
    self.num_layers = num_layers
    self.kernel_initializer = keras.initializers.get(kernel_initializer)

  def build(self, input_shape):
    dim = input_shape[-1]
    # [D, 1] kernels, like DeepCTR, so glorot's fans are (D, 1).
    self.kernels = [
        self.add_weight(shape=(dim, 1), initializer=self.kernel_initializer,
                        name=f"kernel_{i}") for i in range(self.num_layers)]
    self.biases = [
        self.add_weight(shape=(dim,), initializer="zeros", name=f"bias_{i}")
        for i in range(self.num_layers)]

  def call(self, x0):
    x = x0
    for kernel, bias in zip(self.kernels, self.biases):
      x = x0 * ops.matmul(x, kernel) + bias + x
    return x

  def get_config(self):
    config = super().get_config()
    config.update(
        num_layers=self.num_layers,
        kernel_initializer=keras.initializers.serialize(
            self.kernel_initializer))
    return config


@keras.saving.register_keras_serializable(package="cowclip_ctr")
class MatrixCrossNetwork(keras.layers.Layer):
  """DCN-V2's cross layers: x_{l+1} = x0 * (W_l x_l + b_l) + x_l.

  With ``low_rank`` = r, W_l is replaced by a mixture of ``num_experts``
  low-rank experts (DCN-V2 paper, Sec. 5; DeepCTR's CrossNetMix, which the
  reference ran): x_{l+1} = sum_i g_i(x_l) E_i(x_l) + x_l with
  E_i(x) = x0 * (U_i tanh(C_i tanh(V_i^T x)) + b_l) and gates
  g = softmax_i(G_i . x_l). Cheaper (3 D r instead of D^2 per expert) and,
  per the paper, as accurate. Input and output [batch, D].

  The full-rank kernel is stored transposed ([D_in, D_out], x @ kernel =
  W x), as Keras Dense does.
  """

  def __init__(self, num_layers: int, low_rank: Optional[int] = None,
               num_experts: int = 4, kernel_initializer="glorot_normal",
               **kwargs):
    super().__init__(**kwargs)
    self.num_layers = num_layers
    self.low_rank = low_rank
    self.num_experts = num_experts
    self.kernel_initializer = keras.initializers.get(kernel_initializer)

  def build(self, input_shape):
    dim = input_shape[-1]
    self.biases = [
        self.add_weight(shape=(dim,), initializer="zeros", name=f"bias_{i}")
        for i in range(self.num_layers)]
    if self.low_rank is None:
      self.kernels = [
          self.add_weight(shape=(dim, dim), initializer=self.kernel_initializer,
                          name=f"kernel_{i}") for i in range(self.num_layers)]
      return

    def per_expert(name, shape):
      # One 2D weight per (layer, expert), flat (index layer * experts +
      # expert: nested lists escape SavedModel tracking), so glorot's fans
      # are those of one expert, as in DeepCTR.
      return [self.add_weight(shape=shape, name=f"{name}_{i}_{e}",
                              initializer=self.kernel_initializer)
              for i in range(self.num_layers)
              for e in range(self.num_experts)]

    rank = self.low_rank
    self.v_kernels = per_expert("v", (dim, rank))
    self.c_kernels = per_expert("c", (rank, rank))
    self.u_kernels = per_expert("u", (rank, dim))
    self.gate_kernels = per_expert("gate", (dim, 1))

  def call(self, x0):
    x = x0
    for i in range(self.num_layers):
      if self.low_rank is None:
        x = x0 * (ops.matmul(x, self.kernels[i]) + self.biases[i]) + x
        continue
      experts, gates = [], []
      for k in range(i * self.num_experts, (i + 1) * self.num_experts):
        low = ops.tanh(ops.matmul(x, self.v_kernels[k]))
        low = ops.tanh(ops.matmul(low, self.c_kernels[k]))
        experts.append(
            x0 * (ops.matmul(low, self.u_kernels[k]) + self.biases[i]))
        gates.append(ops.matmul(x, self.gate_kernels[k]))
      gate_weights = ops.softmax(ops.concatenate(gates, axis=1), axis=1)
      x = ops.einsum("be,bed->bd", gate_weights,
                     ops.stack(experts, axis=1)) + x
    return x

  def get_config(self):
    config = super().get_config()
    config.update(
        num_layers=self.num_layers, low_rank=self.low_rank,
        num_experts=self.num_experts,
        kernel_initializer=keras.initializers.serialize(
            self.kernel_initializer))
    return config


@keras.saving.register_keras_serializable(package="cowclip_ctr")
class CTRModel(keras.Model):
  """One of MODELS over per-field embeddings; returns one logit [batch, 1].

  Built on construction (all variables exist), so the training step can
  split them into embedding tables and dense weights before the first batch.
  """

  # The training.Step that compile_model gives the model (None: not
  # compiled for training).
  training_step = None

  def __init__(self, architecture: str, vocab_sizes: Mapping[str, int],
               dense_features: Sequence[str],
               options: ModelOptions = ModelOptions(), **kwargs):
    if architecture not in MODELS:
      raise ValueError(f"unknown model {architecture!r}; choose one of "
                       f"{MODELS}")
    if not vocab_sizes:
      raise ValueError("a CTR model needs at least one categorical feature")
    for field, size in vocab_sizes.items():
      settings.check_positive_int(f"vocabulary size of feature {field!r}", size)
    overlap = sorted(set(vocab_sizes) & set(dense_features))
    if overlap:
      raise ValueError(f"features {overlap} are both categorical and dense")
    kwargs.setdefault("name", architecture)
    super().__init__(**kwargs)
    self.architecture = architecture
    self.options = options
    # Tuples, not dicts/lists: Keras/TF would wrap those in trackable copies.
    self.fields = tuple(vocab_sizes)
    self.vocab_size_items = tuple((f, int(vocab_sizes[f])) for f in self.fields)
    self.dense_features = tuple(dense_features)

    stddev = options.embedding_stddev
    linear_only = architecture == LOGISTIC_REGRESSION
    self.deep_embeddings = [] if linear_only else [
        keras.layers.Embedding(
            size, options.embedding_dim, name=f"embedding_{field}",
            embeddings_initializer=keras.initializers.RandomNormal(
                stddev=stddev)) for field, size in self.vocab_size_items]
    self.wide_embeddings = [
        keras.layers.Embedding(size, 1, embeddings_initializer="zeros",
                               name=f"linear_{field}")
        for field, size in self.vocab_size_items]
    self.dense_linear = keras.layers.Dense(
        1, use_bias=False, kernel_initializer=options.dense_initializer,
        name="linear_dense") if self.dense_features else None
    precision = options.precision
    self.dnn = None if linear_only else keras.Sequential(
        dnn_layers(options), name="dnn")
    self.interaction = {
        "deepfm": lambda: FactorizationMachine(name="fm"),
        "wdl": lambda: None,
        LOGISTIC_REGRESSION: lambda: None,
        "dcn": lambda: CrossNetwork(
            options.cross_layers, options.dense_initializer, name="cross",
            dtype=precision),
        "dcnv2": lambda: MatrixCrossNetwork(
            options.cross_layers, options.dcnv2_low_rank,
            options.dcnv2_experts, options.dense_initializer, name="cross",
            dtype=precision),
    }[architecture]()
    # The logit of the DNN output (DCN/DCN-V2: of [cross output, DNN output]).
    self.deep_logit = None if linear_only else keras.layers.Dense(
        1, use_bias=False, kernel_initializer=options.dense_initializer,
        name="deep_logit")
    self.build()

  @property
  def vocab_sizes(self) -> Mapping[str, int]:
    return dict(self.vocab_size_items)

  def _step(self):
    if self.training_step is None:
      raise RuntimeError(f"model {self.name!r} was not compiled for CowClip "
                         "training: call training.compile_model(model, "
                         "config) before fit/evaluate")
    return self.training_step

  def train_step(self, data):
    return self._step().train_step(self, data)

  def test_step(self, data):
    return self._step().test_step(self, data)

  @property
  def metrics(self):
    # Only the step's, so Keras resets them each epoch.
    return [] if self.training_step is None else self.training_step.metrics

  def fit(self, *args, **kwargs):
    """keras.Model.fit, always with a NonFiniteLossGuard."""
    callbacks = list(kwargs.pop("callbacks", None) or [])
    if not any(isinstance(c, callbacks_lib.NonFiniteLossGuard)
               for c in callbacks):
      callbacks.append(callbacks_lib.NonFiniteLossGuard())
    return super().fit(*args, callbacks=callbacks, **kwargs)

  def _maybe_symbolic_build(self, iterator=None, data_batch=None):
    """Nothing to build: the model is built when made and compile_model
    builds the optimizers. (Under a tf.distribute strategy Keras would
    build from the first batch reduced over the replicas: the ids averaged
    into floats by MirroredStrategy, and a failure under
    MultiWorkerMirroredStrategy.)"""
    del iterator, data_batch

  def _trackable_children(self, save_type="checkpoint", **kwargs):
    children = super()._trackable_children(save_type, **kwargs)
    if save_type == "savedmodel":
      # A serving SavedModel needs the weights, not 2 Adam slots per weight
      # (3x the embedding tables); checkpoints keep them.
      for name in ("optimizer", "embedding_optimizer"):
        children.pop(name, None)
    return children

  @property
  def deep_input_dim(self) -> int:
    """Size of the DNN/cross input: all field embeddings plus dense values."""
    return len(self.fields) * self.options.embedding_dim + len(
        self.dense_features)

  def build(self, input_shape=None):
    del input_shape  # The layout is fixed by the vocabularies.
    for table in self.deep_embeddings + self.wide_embeddings:
      table.build()
    if self.dense_linear is not None:
      self.dense_linear.build((None, len(self.dense_features)))
    self.bias = self.add_weight(shape=(1,), initializer="zeros", name="bias")
    if self.dnn is None:
      return  # Logistic regression: the linear part only.
    self.dnn.build((None, self.deep_input_dim))
    deep_out = self.options.hidden_units[-1]
    if isinstance(self.interaction, (CrossNetwork, MatrixCrossNetwork)):
      self.interaction.build((None, self.deep_input_dim))
      deep_out += self.deep_input_dim
    elif self.interaction is not None:  # The FM has no weights.
      self.interaction.build((None, len(self.fields),
                              self.options.embedding_dim))
    self.deep_logit.build((None, deep_out))

  def embedding_tables(self) -> List[Tuple[str, Optional[keras.Variable],
                                           keras.Variable]]:
    """(field, deep [V, d] table, wide [V, 1] table) for every field.

    The training step gives these their own optimizer and L2 and clips the
    deep ones with the ids of ``field``; every other trainable variable is a
    dense weight. The "lr" baseline has no deep tables (None).
    """
    if not self.deep_embeddings:
      return [(field, None, wide.embeddings)
              for field, wide in zip(self.fields, self.wide_embeddings)]
    return [(field, deep.embeddings, wide.embeddings)
            for field, deep, wide in zip(self.fields, self.deep_embeddings,
                                         self.wide_embeddings)]

  def split_variables(self) -> Tuple[List[keras.Variable],
                                     List[keras.Variable]]:
    """(embedding tables: deep and wide of each field, dense weights)."""
    tables = [v for _, deep, wide in self.embedding_tables()
              for v in (deep, wide) if v is not None]
    table_ids = {id(v) for v in tables}
    dense = [v for v in self.trainable_variables if id(v) not in table_ids]
    return tables, dense

  def field_ids(self, features: Mapping[str, object], field: str):
    """The [batch] ids of ``field``, with a clear error for bad input."""
    values = self._feature(features, field)
    if not keras.backend.standardize_dtype(values.dtype).startswith(
        ("int", "uint")):
      raise ValueError(f"{self.name}: categorical feature {field!r} must hold "
                       f"integer ids (the Transform output), got dtype "
                       f"{values.dtype}")
    return ops.reshape(values, (-1,))

  def _feature(self, features, name):
    if name not in features:
      raise ValueError(f"{self.name}: feature {name!r} is missing from the "
                       f"input; got {sorted(features)}")
    values = features[name]
    if isinstance(values, (tf.SparseTensor, tf.RaggedTensor)):
      raise ValueError(f"{self.name}: feature {name!r} must be a dense "
                       f"tensor (one value per example), got "
                       f"{type(values).__name__}")
    shape = tf.TensorShape(values.shape)
    if shape.rank is not None and not (
        shape.rank == 1 or (shape.rank == 2 and shape[1] == 1)):
      raise ValueError(f"{self.name}: feature {name!r} must have shape "
                       f"[batch] or [batch, 1], got {shape.as_list()}")
    return values

  def _dense_input(self, features):
    """[batch, dense features] float32."""
    return ops.concatenate(
        [ops.reshape(ops.cast(self._feature(features, name), "float32"),
                     (-1, 1)) for name in self.dense_features], axis=1)

  def call(self, features, training=False):
    del training  # No dropout or batch norm: same graph for train and serve.
    ids = [self.field_ids(features, field) for field in self.fields]
    wide = ops.concatenate(
        [table(i) for table, i in zip(self.wide_embeddings, ids)], axis=1)
    logit = ops.sum(wide, axis=1, keepdims=True) + self.bias
    if self.dnn is None:  # Logistic regression.
      if self.dense_features:
        logit = logit + self.dense_linear(self._dense_input(features))
      return logit
    embedded = ops.stack(
        [table(i) for table, i in zip(self.deep_embeddings, ids)], axis=1)
    deep_input = ops.reshape(
        embedded, (-1, len(self.fields) * self.options.embedding_dim))
    if self.dense_features:
      dense = self._dense_input(features)
      logit = logit + self.dense_linear(dense)
      deep_input = ops.concatenate([deep_input, dense], axis=1)
    hidden = self.dnn(deep_input)
    if isinstance(self.interaction, FactorizationMachine):
      return logit + self.interaction(embedded) + self.deep_logit(hidden)
    if self.interaction is not None:
      hidden = ops.concatenate([self.interaction(deep_input), hidden], axis=1)
    return logit + self.deep_logit(hidden)

  def get_config(self):
    config = super().get_config()
    config.update(architecture=self.architecture, vocab_sizes=self.vocab_sizes,
                  dense_features=list(self.dense_features),
                  options=dataclasses.asdict(self.options))
    return config

  @classmethod
  def from_config(cls, config):
    config = dict(config)
    config["options"] = ModelOptions(**config["options"])
    return cls(**config)


def build_model(name: str, vocab_sizes: Mapping[str, int],
                dense_features: Sequence[str],
                options: ModelOptions = ModelOptions()) -> CTRModel:
  """A built (variables created) but not compiled CTR model.

  Args:
    name: one of MODELS.
    vocab_sizes: field -> number of rows of its tables, OOV buckets
      included; the order is the order of the fields in the model.
    dense_features: names of the float features (may be empty).
    options: architecture hyperparameters.

  Returns:
    The model; compile it with training.compile_model.
  """
  chosen, _ = precision_lib.resolve(options.precision)
  return CTRModel(name, vocab_sizes, dense_features,
                  dataclasses.replace(options, precision=chosen))
