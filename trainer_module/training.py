"""The CowClip training step of the CTR models and its optimizers.

compile_model(model, config) sets a models.CTRModel up so that
``model.fit(dataset_of_(features, label), ...)`` trains it the way the
CowClip paper and its reference implementation (bytedance/LargeBatchCTR) do:

* Two Adams. Every embedding table (deep and wide) is updated at a constant
  ``embed_lr``; every other weight at ``dense_lr`` reached by a linear warmup
  over ``warmup_epochs`` (the paper warms up the dense weights only: the
  embedding rate is not scaled with the batch, so it needs no warmup).
* Loss = mean-over-batch binary cross-entropy of the logits + the L2 term.
  L2 convention (the reference's Keras ``l2(l2)`` embedding regularizer):
  ``l2 * sum(W ** 2)``, i.e. gradient ``2 * l2 * W``, on every embedding
  table, deep and wide. Dense weights get no L2 (the reference's DeepCTR
  defaults also put 1e-5 on its dense-feature linear weights and DCN cross
  kernels; the paper's L2, the one scaled with the batch, is this one).
  - embedding_update="dense": the sum runs over whole tables, so every row
    decays at every step, and Adam updates every row (the reference).
  - embedding_update="sparse": the sum runs over the rows of the ids present
    in the batch (each distinct id once), gradients stay tf.IndexedSlices
    and LazyAdam touches only those rows. Much less work per step with big
    vocabularies; a different algorithm (rows of absent ids do not move).
* CowClip: the gradient of every DEEP table (loss + L2 term, as the
  reference clips it) is clipped with the field's ids of the batch (on the
  batch's rows: absent rows are never clipped, so that is the whole
  table's clip). Wide tables and dense weights are not clipped. The tables'
  gradients go down one chain (gradient_chain: gather, one row per
  distinct id, L2, CowClip), composed once per compile (Step); both
  updates work on one row per distinct id and the dense one applies a
  fused Adam.
* Tracked metrics: ``loss`` (the objective above), ``logloss`` (its BCE part,
  the CTR metric) and ``auc``, the same in train_step and test_step. (A
  custom Keras 3 train_step has to track its loss itself.) With CowClip on,
  training also logs ``clipped_fraction``: of the (field, id) rows updated
  in the epoch, the share whose gradient CowClip scaled down. Near 0 means
  the clip does not act at this batch size and these hyperparameters.
* Importance weights (negative down-sampling,
  input_pipeline.training_data): when the data are (features, label, weight) triples, the loss is the WEIGHTED
  mean sum(w_i l_i) / sum(w_i) (the paper's batch mean when every w_i = 1,
  so the L2 term keeps its scale), CowClip counts an id's occurrences by
  their weights, and loss, logloss and auc are weighted too, in train_step
  and test_step: an example of integer weight w trains exactly as w copies
  of it would (the unsampled batch it stands for). recalibrate_bias weighs
  its rows the same way.
* A non-finite loss raises callbacks.NonFiniteLossError during fit (a
  guard callback CTRModel.fit always adds), rather than exporting a broken
  model.

XLA (``jit_compile``, default off, on a GPU too): the dense update compiles
(tf.unique of the batch's ids has a bounded dynamic shape) and XLA fuses its
[V, d]-wide L2, clip and Adam element-wise work, but on CPU XLA runs those
fused loops on one thread while TensorFlow's kernels use every core.
Measured here (DeepFM, Criteo-like 26 fields / 537k rows, 2 shared
cores): XLA cut CPU time per step by 10-15% but was no faster in wall time
(batch 8192: 206-234 vs 172-203 ms per step over two runs; batch 1024
with CowClip: slower). On a GPU XLA has never compiled, run or been timed
(only its kernels are checked: tests/trainer_module/test_gpu_kernels.py),
so it runs only when asked for; the sparse update uses tf.unique
(batch-dependent shapes), which XLA cannot compile at all.
"""

import dataclasses
from typing import List, Tuple

import keras
import numpy as np
import tensorflow as tf

from trainer_module import cowclip
from trainer_module import distribution
from trainer_module import gradient_chain
from trainer_module import hparams
from trainer_module import losses
from trainer_module import models
from trainer_module import optimizers
from trainer_module import shampoo
from trainer_module.settings import StepOptions



@dataclasses.dataclass(frozen=True)
class TrainingConfig:
  """How to train: the SCALED hyperparameters, the steps per epoch and the
  step's options (the Trainer's: CowClip and its variant, the embedding
  update, the bias constraints).

  The first six fields are hparams.NAMES, after the scaling rule
  (``TrainingConfig(**scaled, steps_per_epoch=..., step=...)``).

  Attributes:
    dense_lr: peak Adam learning rate of the dense weights.
    embed_lr: constant Adam learning rate of all embedding tables.
    l2: L2 coefficient on the embedding tables (loss term l2 * sum(W^2)).
    r: CowClip ratio of the row norm allowed per id occurrence.
    zeta: CowClip lower bound of the per-occurrence threshold.
    warmup_epochs: epochs of linear warmup of dense_lr (0: none).
    steps_per_epoch: training steps in one epoch (sets the warmup length).
    step: the step's options (the logistic-regression baseline's have
      CowClip and the bias constraints off).
    jit_compile: XLA for the train and test steps; off by default, on a
      GPU too: that path is kernel-checked only (see module doc).
  """
  dense_lr: float
  embed_lr: float
  l2: float
  r: float
  zeta: float
  warmup_epochs: float
  steps_per_epoch: int
  step: StepOptions = StepOptions()
  jit_compile: bool = False

  def __post_init__(self):
    for name in hparams.NAMES:
      hparams.check_value(name, getattr(self, name), "TrainingConfig")
    if (isinstance(self.steps_per_epoch, bool) or
        not isinstance(self.steps_per_epoch, int) or
        self.steps_per_epoch <= 0):
      raise ValueError("TrainingConfig.steps_per_epoch must be a positive "
                       f"integer, got {self.steps_per_epoch!r}")
    if self.step.embedding_update == "sparse" and self.jit_compile:
      raise ValueError("sparse embedding updates cannot use XLA "
                       "(jit_compile=True): they need tf.unique, whose "
                       "output shape depends on the batch")

  @property
  def warmup_steps(self) -> int:
    return round(self.warmup_epochs * self.steps_per_epoch)


class Step:
  """The training and evaluation steps of a compiled models.CTRModel.

  compile_model makes one from the TrainingConfig and hands it to the model
  (CTRModel.train_step and test_step call it): the tables' gradient chain
  (gradient_chain.table_chain: gather, rows, L2, CowClip) and the two
  optimizer updates are composed here once, from the step's options, and
  the step itself has no option branches. A plain object, not a Keras
  layer: its metrics are the model's (CTRModel.metrics), reset each epoch
  by Keras; the optimizers stay the model's, so checkpoints hold them.
  """

  def __init__(self, model, config: TrainingConfig):
    self.config = config
    self.loss_tracker = keras.metrics.Mean(name="loss")
    self.logloss_tracker = keras.metrics.Mean(name="logloss")
    self.auc = keras.metrics.AUC(from_logits=True, name="auc")
    self.clipped_tracker = keras.metrics.Mean(name="clipped_fraction")
    self.distillation = None  # distill_from sets it.
    self.tables = gradient_chain.tables_of(model)
    dense = config.step.embedding_update == "dense"
    clip = (cowclip.ClipSettings(config.r, config.zeta,
                                 config.step.cowclip_variant)
            if config.step.cowclip else None)
    self.table_chain = gradient_chain.table_chain(config.l2, dense, clip)
    self.table_gradients = gradient_chain.table_gradients(config.l2, dense)
    self.clips = clip is not None

  @property
  def metrics(self):
    return [self.loss_tracker, self.logloss_tracker, self.auc,
            self.clipped_tracker]

  def _features_and_labels(self, data):
    """(features, [batch, 1] labels, [batch, 1] importance weights or None
    when the data carry none)."""
    features, labels, sample_weight = keras.utils.unpack_x_y_sample_weight(
        data)
    if labels is None:
      raise ValueError("training and evaluation data must be "
                       "(features, label) pairs or (features, label, "
                       "weight) triples")
    if sample_weight is not None:
      sample_weight = tf.reshape(tf.cast(sample_weight, tf.float32), [-1, 1])
    return (features, tf.reshape(tf.cast(labels, tf.float32), [-1, 1]),
            sample_weight)

  def _l2_penalty(self, model, field_ids):
    """l2 * sum(W^2) over the tables (dense) or the rows of the batch's ids
    (sparse; ``field_ids`` in embedding_tables' field order)."""
    squares = []
    for ids, (_, deep, wide) in zip(field_ids, model.embedding_tables()):
      present = [t for t in (deep, wide) if t is not None]
      if self.config.step.embedding_update == "dense":
        squares += [tf.reduce_sum(tf.square(t)) for t in present]
      else:
        rows, _ = tf.unique(ids)
        squares += [tf.reduce_sum(tf.square(tf.gather(t, rows)))
                    for t in present]
    return self.config.l2 * tf.add_n(squares)

  def _distillation_loss(self, features, labels, logits, weights):
    """The batch's summed distillation loss (losses.distillation_loss):
    against the label and the teachers' mean predicted click rate."""
    teachers = self.distillation.teachers
    probabilities = tf.stop_gradient(tf.add_n(
        [tf.sigmoid(tf.cast(t(features, training=False), tf.float32))
         for t in teachers]) / len(teachers))
    per_example = losses.distillation_loss(
        labels, logits, probabilities, self.distillation.label_weight)
    if weights is not None:
      per_example *= weights
    return tf.reduce_sum(per_example)

  def _update_metrics(self, labels, logits, logloss, loss, weights=None):
    """Updates loss, logloss and auc with the GLOBAL batch (the replicas'
    labels, logits and weights gathered; weighted by the importance
    weights, if any); returns them for the logs."""
    labels, logits, *weights = distribution.gather_columns(
        [labels, tf.cast(tf.stop_gradient(logits), tf.float32)] +
        ([] if weights is None else [weights]))
    weights = weights[0] if weights else None
    batch = (tf.shape(labels)[0] if weights is None
             else tf.reduce_sum(weights))
    self.loss_tracker.update_state(loss, sample_weight=batch)
    self.logloss_tracker.update_state(logloss, sample_weight=batch)
    self.auc.update_state(labels, logits, sample_weight=weights)
    return {m.name: m.result()
            for m in (self.loss_tracker, self.logloss_tracker, self.auc)}

  def train_step(self, model, data):
    """One update on the global batch, whether it runs on one device or is
    split over replicas (distribution.py: the same update either way)."""
    features, labels, weights = self._features_and_labels(data)
    tables, dense = model.split_variables()
    total = distribution.global_sum(_total_weight(labels, weights))
    with tf.GradientTape() as tape:
      logits = model(features, training=True)
      logloss = _summed_log_loss(labels, logits, weights) / total
      objective = logloss
      if self.distillation is not None:
        objective = self._distillation_loss(features, labels, logits,
                                            weights) / total
      if self.config.step.rank_loss_weight:
        objective += self.config.step.rank_loss_weight * _rank_loss(
            labels, logits, weights, model.optimizer.iterations)
    # The L2 term's gradient (2 * l2 * W) is added per row, not taped.
    gradients = tape.gradient(objective, tables + dense)
    state = self.table_chain(gradient_chain.start(
        self.tables, [model.field_ids(features, field)
                      for field in model.fields],
        gradients[:len(tables)], weights))
    if self.clips:
      batch_ids = tf.cast(tf.add_n(state.batch_ids), tf.float32)
      self.clipped_tracker.update_state(
          tf.cast(tf.add_n(state.clipped), tf.float32) / batch_ids,
          sample_weight=batch_ids)
    model.embedding_optimizer.apply(self.table_gradients(state), tables)
    model.optimizer.apply(distribution.global_sum(gradients[len(tables):]),
                          dense)
    logloss = distribution.global_sum(logloss)
    l2_term = self.config.l2 * tf.add_n(state.squared_norms)
    logs = self._update_metrics(labels, logits, logloss, logloss + l2_term,
                                weights)
    if self.clips:
      logs["clipped_fraction"] = self.clipped_tracker.result()
    return distribution.replica_logs(logs)

  def test_step(self, model, data):
    features, labels, weights = self._features_and_labels(data)
    logits = model(features, training=False)
    total = distribution.global_sum(_total_weight(labels, weights))
    logloss = distribution.global_sum(
        _summed_log_loss(labels, logits, weights) / total)
    field_ids = [model.field_ids(features, field) for field in model.fields]
    if self.config.step.embedding_update == "sparse":  # Their rows' penalty.
      field_ids = distribution.gather_columns(field_ids)
    loss = logloss + self._l2_penalty(model, field_ids)
    return distribution.replica_logs(
        self._update_metrics(labels, logits, logloss, loss, weights))


def _total_weight(labels, weights=None):
  """The batch's examples, or the sum of their importance weights: what
  the loss is averaged over."""
  if weights is None:
    return tf.cast(tf.shape(labels)[0], tf.float32)
  return tf.reduce_sum(weights)


def _summed_log_loss(labels, logits, weights=None):
  """The batch's summed cross-entropy (importance-weighted: sum(w l)); over
  _total_weight of the GLOBAL batch, the mean log loss."""
  losses = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels,
                                                   logits=logits)
  if weights is None:
    return tf.reduce_sum(losses)
  return tf.reduce_sum(weights * losses)


def _rank_loss(labels, logits, weights, step):
  """losses.sampled_pairwise_rank_loss over this replica's share of the
  batch (pairs are drawn within a device's share; one device: the whole
  batch), divided by the replicas so that their summed gradients average
  them. The draw is seeded by the step and the replica."""
  context = tf.distribute.get_replica_context()
  seed = tf.stack([tf.cast(step, tf.int64),
                   tf.cast(context.replica_id_in_sync_group, tf.int64)])
  return losses.sampled_pairwise_rank_loss(
      labels, logits, seed, weights) / context.num_replicas_in_sync


class Distillation:
  """The teachers a student model is distilled from, and the label's share
  of its target. A plain object, so Keras does not track the teachers as
  the student's layers (their weights stay out of its variables and its
  SavedModel)."""

  def __init__(self, teachers, label_weight: float):
    self.teachers = list(teachers)
    self.label_weight = label_weight


def distill_from(model: models.CTRModel, teachers, label_weight: float
                ) -> None:
  """Makes ``model``'s training step fit the teachers' mean predicted
  click rate beside the labels (losses.distillation_loss with
  ``label_weight``); its tracked log loss stays the one of the labels."""
  model.training_step.distillation = Distillation(teachers, label_weight)


def compile_model(model: models.CTRModel, config: TrainingConfig) -> None:
  """Sets up ``model`` (a models.CTRModel) for fit/evaluate with ``config``.

  Creates the embedding optimizer (Adam, or LazyAdam for sparse updates) and
  the warmed-up dense Adam, each built on its own variables only (no Adam
  slots for variables another optimizer updates), and compiles the model
  with the dense one as ``model.optimizer`` (so Keras callbacks that read
  ``optimizer.iterations``/``learning_rate`` see the step count and the
  warmup). XLA only with ``config.jit_compile``, never Keras' "auto" (XLA
  whenever a GPU is present): an XLA_GPU_JIT kernel says an op lowers to
  XLA, not that XLA's GPU compiler builds the step, and XLA has never run
  on a GPU (see module doc).
  """
  if not isinstance(model, models.CTRModel):
    raise TypeError(f"compile_model needs a models.CTRModel, got "
                    f"{type(model).__name__}")
  if config.step.cowclip and any(deep is None
                           for _, deep, _ in model.embedding_tables()):
    raise ValueError(f"model {model.name!r} has no deep embedding tables, "
                     "the ones CowClip clips: compile it with cowclip=False")
  tables, dense = model.split_variables()
  if config.step.embedding_update == "sparse":
    embedding_optimizer = optimizers.LazyAdam(
        learning_rate=config.embed_lr, unique_indices=True,
        name="embedding_adam")
  else:
    embedding_optimizer = optimizers.FusedAdam(
        learning_rate=config.embed_lr, name="embedding_adam")
  embedding_optimizer.build(tables)
  warmup = optimizers.LinearWarmup(config.dense_lr, config.warmup_steps)
  if config.step.dense_optimizer == "shampoo":
    dense_optimizer = shampoo.Shampoo(
        learning_rate=warmup,
        precondition_every=config.step.precondition_every,
        name="dense_shampoo")
  else:
    dense_optimizer = optimizers.FusedAdam(learning_rate=warmup,
                                           name="dense_adam")
  dense_optimizer.build(dense)
  model.compile(optimizer=dense_optimizer, jit_compile=config.jit_compile)
  model.embedding_optimizer = embedding_optimizer
  model.training_step = Step(model, config)


def recalibrate_bias(model: models.CTRModel, data: tf.data.Dataset,
                     click_rate: float) -> float:
  """Shifts the model's global bias so that its mean predicted click rate
  on ``data`` ((features, label) batches, or (features, label, weight):
  then the mean is weighted) equals ``click_rate``, the training part's.

  Why: early stopping keeps the epoch with the best log loss, but the
  embeddings (at embed_lr) move the logits further than the bias (at the
  warmed-up dense_lr) re-centres them, and the kept model was measured to
  under-predict by 7-15% on small data (docs/defaults.md), outside the
  gate's calibration band. The predictions are the held-out validation
  slice's (never the eval split), the target the training part's click
  rate: the slice's own click rate, on a few hundred rows, is off the
  split's by its noise (+-8% at 720 rows), and recentring on it moved
  whole models by that much (docs/production_calibration.md, "Recentring
  on the slice's noise"); the mean of the slice's predictions varies
  several times less. AUC is unchanged. Bisection on
  mean(sigmoid(z + shift)) = click_rate (monotone in the shift), float64.

  Returns:
    The shift added to the bias (a logit).
  """
  logits, weights = [], []
  for batch in data:
    features, label, weight = keras.utils.unpack_x_y_sample_weight(batch)
    logits.append(keras.ops.convert_to_numpy(
        model(features, training=False)).reshape(-1))
    weights.append(np.ones_like(logits[-1], np.float64) if weight is None
                   else keras.ops.convert_to_numpy(weight).reshape(-1))
  z = np.concatenate(logits).astype(np.float64)
  w = np.concatenate(weights).astype(np.float64)
  rate = float(np.clip(click_rate, 1e-6, 1 - 1e-6))
  low, high = -30.0, 30.0  # The mean prediction grows with the shift.
  for _ in range(60):
    shift = (low + high) / 2
    if np.average(1.0 / (1.0 + np.exp(-(z + shift))), weights=w) > rate:
      high = shift
    else:
      low = shift
  shift = (low + high) / 2
  model.bias.assign_add([shift])
  return shift
