"""Bias constraints in the training objective ("On the Factory Floor", §7).

Anil et al. 2022 (arXiv 2209.05310, §7) call label minus prediction the
calibration bias and want it zero in every bucket k of a slice, not only on
average:

    (constraint)   sum_{i in S_k} (y_i - yhat_i) = 0      for every bucket k

and add it to the objective with one learned multiplier per bucket. The
form implemented here is that constrained problem's Lagrangian, minimised
over the model weights w and maximised over the multipliers lambda:

    min_w max_lambda  L(w) + sum_f sum_k lambda_{f,k} * r_{f,k}(w),
    r_{f,k} = (1/B) * sum_{i in batch, i in S_{f,k}} (y_i - sigmoid(z_i))

on each mini-batch of B examples (f: a constrained slice feature; the 1/B
puts the term on the scale of the batch-mean log loss, and makes r an
unbiased estimate of the per-example constraint). The weights descend the
whole objective with their own optimizers; each multiplier ascends its
constraint by plain gradient ascent, lambda_{f,k} += lr * r_{f,k} (the
gradient of the term w.r.t. lambda_{f,k} is r_{f,k}). Where a bucket is
under-predicted (r > 0) its multiplier grows and, through
d term / d z_i = -lambda_{f,k} * yhat_i (1 - yhat_i) / B, pushes the
bucket's logits up, until its residual is 0 in expectation.
(Caveat: the paper's text was not retrievable from this machine; the
constraint is quoted from the issue, and the multiplier form is the
standard Lagrangian of that constraint, as the issue describes it.)

Buckets (NUM_BUCKETS per constrained feature):
  * a categorical feature: its Transform ids are the vocabulary's rank by
    training count (most frequent first, OOV ids after the vocabulary), so
    ids 0 .. NUM_BUCKETS-2 are the top ids, each its own bucket, and every
    other id (rarer ids, OOV) shares the last bucket. The per-value slices
    of the Evaluator show the same top values.
  * PREDICTED_CTR: the deciles of the batch's predicted CTR (by rank, ties
    by position; assignment carries no gradient).

The multipliers are plain tf.Variables held by this object, not Keras
weights: the main optimizers never see them, early stopping's weight
restore leaves them alone, and the serving SavedModel does not hold them.
"""

from typing import Dict, List, Optional, Sequence

import tensorflow as tf

from trainer_module import distribution

from trainer_module import settings

# The reserved slice name of the predicted-CTR buckets.
PREDICTED_CTR = settings.PREDICTED_CTR
# Buckets per constrained feature: the top 9 ids + all others; deciles.
NUM_BUCKETS = 10


def id_buckets(ids: tf.Tensor, num_buckets: int = NUM_BUCKETS) -> tf.Tensor:
  """[batch] bucket of frequency-ranked ids: the top num_buckets-1 ids
  their own, every other id the last bucket."""
  return tf.cast(tf.minimum(tf.cast(ids, tf.int64), num_buckets - 1),
                 tf.int32)


def rank_buckets(logits: tf.Tensor, num_buckets: int = NUM_BUCKETS
                ) -> tf.Tensor:
  """[batch] quantile bucket of each logit within the batch (0: lowest):
  floor(rank * num_buckets / batch)."""
  logits = tf.reshape(tf.stop_gradient(logits), [-1])
  order = tf.argsort(logits, stable=True)
  ranks = tf.math.invert_permutation(order)
  size = tf.shape(logits, out_type=tf.int64)[0]
  return tf.cast(tf.cast(ranks, tf.int64) * num_buckets // size, tf.int32)


def bucket_residuals(labels: tf.Tensor, predictions: tf.Tensor,
                     buckets: tf.Tensor, num_buckets: int = NUM_BUCKETS,
                     weights: Optional[tf.Tensor] = None,
                     total: Optional[tf.Tensor] = None) -> tf.Tensor:
  """[num_buckets] r_k = (1/B) sum_{i in bucket k} (y_i - yhat_i).

  With importance weights (negative down-sampling), r_k = sum_k w_i (y_i -
  yhat_i) / sum_i w_i: the residuals of the unsampled data, as the weighted
  log loss is its loss. ``total``: B (or sum_i w_i) of the global batch when
  these rows are one replica's share of it (None: these rows').
  """
  residual = tf.reshape(labels - predictions, [-1])
  if weights is not None:
    weights = tf.reshape(tf.cast(weights, residual.dtype), [-1])
    residual *= weights
  if total is None:
    total = (tf.cast(tf.size(residual), residual.dtype) if weights is None
             else tf.reduce_sum(weights))
  return tf.math.unsorted_segment_sum(residual, buckets, num_buckets) / total


def constraint_term(multipliers: tf.Tensor, residuals: tf.Tensor
                   ) -> tf.Tensor:
  """sum_k lambda_k r_k: the Lagrangian term of one feature (the
  multipliers enter as constants: they ascend separately)."""
  return tf.reduce_sum(tf.stop_gradient(multipliers) * residuals)


def _global_rank_buckets(logits: tf.Tensor) -> tf.Tensor:
  """rank_buckets of this replica's logits within the global batch."""
  logits = tf.reshape(tf.stop_gradient(logits), [-1])
  (everyone,) = distribution.gather_batch([logits])
  return distribution.local_rows(rank_buckets(everyone), tf.size(logits))


class BiasConstraints:
  """One multiplier per bucket of each constrained feature, and the term.

  Attributes:
    features: the constrained slices (categorical features, PREDICTED_CTR).
    learning_rate: the multipliers' gradient-ascent step.
    multipliers: {feature: tf.Variable [NUM_BUCKETS]}, starting at 0.
  """

  def __init__(self, features: Sequence[str], learning_rate: float):
    if not features:
      raise ValueError("BiasConstraints needs at least one feature")
    self.features = tuple(features)
    self.learning_rate = float(learning_rate)
    # Every replica ascends with the global batch's residuals: one copy's
    # update is the update (distribution.py).
    self.multipliers = {
        name: tf.Variable(
            tf.zeros([NUM_BUCKETS]), trainable=False,
            name=f"bias_multipliers_{name}",
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        for name in self.features}

  def buckets(self, model, features, logits) -> Dict[str, tf.Tensor]:
    """{feature: [batch] bucket} of a batch (model.field_ids for ids; the
    predicted-CTR rank is taken within the global batch when the batch is
    split over replicas)."""
    return {name: (_global_rank_buckets(logits) if name == PREDICTED_CTR
                   else id_buckets(model.field_ids(features, name)))
            for name in self.features}

  def term(self, labels, logits, buckets: Dict[str, tf.Tensor],
           weights: Optional[tf.Tensor] = None,
           total: Optional[tf.Tensor] = None):
    """(the summed Lagrangian term, {feature: residuals}) of a batch (its
    importance weights, if any; ``total`` as in bucket_residuals);
    differentiate the term w.r.t. the logits inside the tape."""
    predictions = tf.sigmoid(logits)
    residuals = {name: bucket_residuals(labels, predictions, buckets[name],
                                        weights=weights, total=total)
                 for name in self.features}
    return tf.add_n([constraint_term(self.multipliers[name], residuals[name])
                     for name in self.features]), residuals

  def ascend(self, residuals: Dict[str, tf.Tensor]) -> None:
    """lambda += learning_rate * r: gradient ascent on the term."""
    for name in self.features:
      self.multipliers[name].assign_add(
          self.learning_rate * tf.stop_gradient(residuals[name]))

  def values(self) -> Dict[str, List[float]]:
    """The multipliers as lists (the training record)."""
    return {name: [float(v) for v in variable.numpy()]
            for name, variable in self.multipliers.items()}
