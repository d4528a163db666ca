"""CowClip: adaptive column-wise clipping of embedding-table gradients.

Algorithm 1 of Zheng et al., "CowClip: Reducing CTR Prediction Model Training
Time from 12 hours to 10 minutes on 1 GPU" (AAAI 2023). For one field's
embedding table W ([V, d]) and a batch whose ids of that field are ``ids``,
every id k present in the batch, with cnt_k its number of occurrences in
``ids``, W_k its embedding row and G_k its gradient row, gets

  paper:      clip_k = cnt_k * max(r * ||W_k||, zeta)
  reference:  clip_k = cnt_k * r * max(||W_k||, r * sqrt(d) * zeta)

  G_k <- G_k * min(1, clip_k / ||G_k||)        (G_k = 0 stays 0)

Rows of ids absent from the batch are returned unchanged.

Why frequency-adaptive: an id seen cnt_k times in the batch gets cnt_k
per-example contributions. For a frequent id they are many and consistent, so
its threshold grows with cnt_k; a rare id's gradient comes from one or two
noisy examples and, relative to its small row, is large, so it is held to a
fraction r of the row's own norm and one step cannot wipe the row out. zeta is
a floor for rows still near zero (small initialisation), which could otherwise
hardly move. This per-id control is what lets the embedding learning rate
stay fixed as the batch grows (see scaling.py).

Nearest relative: adaptive gradient clipping (AGC; Brock et al., "High-
Performance Large-Scale Image Recognition Without Normalization", ICML 2021;
optax.adaptive_grad_clip), which clips each unit's gradient to
lambda * max(||W_unit||, eps). CowClip is AGC with the embedding row as the
unit, lambda = r, a floor zeta, and one thing AGC lacks: the threshold
grows with the row's count in the batch, because an embedding row's
gradient is a sum over the examples that hold its id (the "reference"
variant below is exactly AGC's form times cnt_k).

Code shape, as optax's clipping transforms: ``clip_rows`` is the pure row
clip (rows, counts, norms in; clipped rows out). The training step runs
the same functions as a chain over all its tables (gradient_chain.py):
from a lookup's gradient and the field's ids deduplicated once
(``distinct_ids``, shared by the field's tables) it builds the rows of the
batch's ids (``gradient_rows``) with the L2 gradient (``add_l2``), clips
them (``clip_gradient_rows``: counts, optionally importance-weighted, row
norms and ``clip_rows``) and gives the table's gradient, dense or sparse
(``dense_gradient``, ``sparse_gradient``). ``table_gradient`` is that
composition for one table, in the chain's order of operations: the form
the reference cases (tests/trainer_module/test_cowclip.py) pin against
NumPy. The module imports no other project module: the caller passes the
settings.

Variants. "paper" is the formula printed in the paper. "reference" follows the
authors' public code (bytedance/LargeBatchCTR, train.py + clip.py): it passes
``r * sqrt(d) * zeta`` as the floor on ||W_k|| and multiplies the result by r,
so with r = 1 the only difference is that zeta is scaled by sqrt(d) (the norm
of a d-vector whose entries all equal zeta). One other difference is not
reproduced: the reference's dense path treats absent ids as cnt = 1 and clips
their rows too; here absent rows are never touched (with an L2 gradient
2 * l2 * W_k that only matters when 2 * l2 > r).

The gradient clipped is the one of the loss as Keras computes it: the
mean-over-batch data loss plus the L2 regularisation term. The thresholds
apply to that sum as is, like the reference does.

Every function runs eagerly, in tf.function and with jit_compile=True (XLA):
tf.unique's output has a data-dependent row count, which XLA compiles as a
bounded dynamic shape [<= N] when the ids come from the batch as in
training; with ids that are compile-time constants, TF constant folding and
XLA disagree on that size and compilation fails. The work is O(N * d) per
table, plus one [V, d] pass for a dense result.
"""

import dataclasses
import math
from typing import Callable, Dict, NamedTuple, Optional, Union

import tensorflow as tf

Gradient = Union[tf.Tensor, tf.IndexedSlices]


def _paper_thresholds(counts, weight_norms, r, zeta, dim):
  del dim
  return counts * tf.maximum(r * weight_norms, zeta)


def _reference_thresholds(counts, weight_norms, r, zeta, dim):
  return counts * r * tf.maximum(weight_norms, r * math.sqrt(dim) * zeta)


# clip_k of the module docstring, by variant.
THRESHOLDS: Dict[str, Callable[..., tf.Tensor]] = {
    "paper": _paper_thresholds, "reference": _reference_thresholds}
VARIANTS = tuple(THRESHOLDS)


@dataclasses.dataclass(frozen=True)
class ClipSettings:
  """CowClip's hyperparameters, checked once when made.

  Attributes:
    r: ratio of the weight norm allowed as gradient norm per occurrence.
    zeta: lower bound of the per-occurrence threshold.
    variant: the threshold formula, one of VARIANTS.
  """
  r: float
  zeta: float
  variant: str = "paper"

  def __post_init__(self):
    if self.variant not in VARIANTS:
      raise ValueError(f"unknown CowClip variant {self.variant!r}; choose "
                       f"one of {VARIANTS}")
    if not (self.r >= 0 and self.zeta >= 0):
      raise ValueError(f"CowClip needs r >= 0 and zeta >= 0, got r={self.r}, "
                       f"zeta={self.zeta}")


class ClipResult(NamedTuple):
  """Clipped gradient rows and how many of the batch's ids they clipped.

  ``clipped / batch_ids`` over training is the share of id updates CowClip
  changed: whether the clip acts at all on a dataset, at a batch size, is
  the first thing to know when judging it.
  """
  gradient: tf.Tensor  # the clipped [n, d] rows
  clipped: tf.Tensor  # distinct ids of the batch whose row was clipped
  batch_ids: tf.Tensor  # distinct ids of the batch (rows with cnt > 0)


class DistinctIds(NamedTuple):
  """A field's ids in the batch, deduplicated once for all its tables.

  Attributes:
    ids: [n] the distinct ids (tf.unique order): the rows updated.
    position: [N] each occurrence's index into ``ids``.
    weights: [N] each occurrence's importance weight (None: 1 each).
  """
  ids: tf.Tensor
  position: tf.Tensor
  weights: Optional[tf.Tensor]


def distinct_ids(ids: tf.Tensor, weights: Optional[tf.Tensor] = None
                ) -> DistinctIds:
  """One tf.unique of a field's batch ids (any shape, flattened).

  With importance ``weights`` (one per id), an id's count is the sum of its
  examples' weights: its count in the batch where each example appears
  weight times, which a weighted-mean loss stands for.

  Raises:
    ValueError: non-integer ids.
  """
  ids = tf.convert_to_tensor(ids)
  if not ids.dtype.is_integer:
    raise ValueError(f"CowClip ids must be integers, got dtype {ids.dtype}")
  distinct, position = tf.unique(tf.reshape(ids, [-1]))
  return DistinctIds(distinct, position,
                     None if weights is None else tf.reshape(weights, [-1]))


class GradientRows(NamedTuple):
  """One table's gradient on the batch's distinct ids.

  Attributes:
    rows: [n, d] gradient rows (each the sum over its id's slices, plus the
      L2 gradient 2 * l2 * W_k).
    weights: [n, d] the table's rows W_k of those ids.
  """
  rows: tf.Tensor
  weights: tf.Tensor


def gradient_rows(gradient: Gradient, embeddings, ids: DistinctIds
                 ) -> GradientRows:
  """A lookup's gradient as one row per distinct id.

  ``gradient`` is the gradient of a lookup of ``embeddings`` by the field's
  ids: a tf.IndexedSlices with one slice per id, in the ids' order (what
  tf.GradientTape gives), or a dense [V, d] tensor.

  Raises:
    ValueError: shapes of gradient, embeddings and ids that do not match.
  """
  table_shape = tf.TensorShape(embeddings.shape)
  if table_shape.rank != 2 or table_shape[1] is None:
    raise ValueError("CowClip embeddings must be a [V, d] table with known d, "
                     f"got shape {table_shape}")
  weights = tf.gather(embeddings, ids.ids)
  if isinstance(gradient, tf.IndexedSlices):
    if not gradient.values.shape.is_compatible_with(
        ids.position.shape.concatenate(table_shape[1:])):
      raise ValueError(f"CowClip gradient slices have shape "
                       f"{gradient.values.shape}: it needs one slice of "
                       f"embeddings {table_shape} per id, "
                       f"{ids.position.shape[0]} ids")
    rows = tf.math.unsorted_segment_sum(gradient.values, ids.position,
                                        tf.size(ids.ids))
  else:
    if not gradient.shape.is_compatible_with(table_shape):
      raise ValueError(f"CowClip dense gradient has shape {gradient.shape}, "
                       f"embeddings {table_shape}")
    rows = tf.gather(gradient, ids.ids)
  return GradientRows(rows, weights)


def add_l2(rows: GradientRows, l2: float) -> GradientRows:
  """The rows' L2 gradient added: 2 * l2 * W_k (the loss's l2 * sum(W^2))."""
  return rows._replace(rows=rows.rows + (2 * l2) * rows.weights)


def dense_gradient(rows: tf.Tensor, ids: DistinctIds, embeddings, l2: float,
                   data_gradient: Optional[tf.Tensor] = None) -> tf.Tensor:
  """A table's whole [V, d] gradient: the batch's `rows` in place, every
  other row its L2 gradient 2 * l2 * W (plus a dense `data_gradient`'s
  row): the full-table gradient of the loss + L2, without a [V, d] pass
  per op."""
  outside = (2 * l2) * tf.convert_to_tensor(embeddings)
  if data_gradient is not None:
    outside += data_gradient
  return tf.tensor_scatter_nd_update(outside, ids.ids[:, tf.newaxis], rows)


def sparse_gradient(rows: tf.Tensor, ids: DistinctIds,
                    embeddings) -> tf.IndexedSlices:
  """A table's gradient on the batch's rows only: one slice per distinct id
  (what Keras 3 optimizers need: Adam squares slice values before summing
  duplicates)."""
  return tf.IndexedSlices(rows, ids.ids,
                          tf.shape(embeddings, out_type=ids.ids.dtype))


def clip_gradient_rows(rows: GradientRows, ids: DistinctIds,
                       settings: ClipSettings) -> ClipResult:
  """CowClip's own work on a table's batch rows: the ids' counts
  (importance-weighted when ``ids`` has weights), the rows' norms and
  clip_rows."""
  ones = (tf.ones_like(ids.position, rows.rows.dtype) if ids.weights is None
          else tf.cast(ids.weights, rows.rows.dtype))
  counts = tf.math.unsorted_segment_sum(ones, ids.position, tf.size(ids.ids))
  return clip_rows(rows.rows, counts, tf.norm(rows.weights, axis=-1),
                   settings.r, settings.zeta, settings.variant)


class TableGradient(NamedTuple):
  """An embedding table's gradient for the optimizer, and what the loss
  and the logs need.

  Attributes:
    gradient: dense [V, d], or tf.IndexedSlices with one slice per distinct
      id of the batch (what Keras 3 optimizers need: Adam squares slice
      values before summing duplicates).
    squared_norm: sum(W^2) over the rows the gradient covers (the table,
      or the batch's rows): the loss's L2 term is l2 times it.
    clipped, batch_ids: ClipResult's counts (None: not clipped).
  """
  gradient: Gradient
  squared_norm: tf.Tensor
  clipped: Optional[tf.Tensor]
  batch_ids: Optional[tf.Tensor]


def table_gradient(gradient: Gradient, embeddings, ids: DistinctIds,
                   l2: float = 0.0, clip: Optional[ClipSettings] = None,
                   sparse: bool = False) -> TableGradient:
  """One table's gradient for the optimizer: a lookup's gradient plus L2,
  CowClip-clipped, as the step's chain computes it (see the module doc).

  Args:
    gradient: the gradient of a lookup of ``embeddings`` by the field's ids
      (gradient_rows).
    embeddings: the [V, d] table (tf.Variable, keras.Variable or tensor).
    ids: the field's distinct_ids.
    l2: the L2 coefficient: the loss holds l2 * sum(W^2), over the whole
      table (dense) or the batch's rows (sparse).
    clip: CowClip's settings (None: no clip).
    sparse: return tf.IndexedSlices on the batch's rows instead of the
      whole table's gradient.

  Returns:
    A TableGradient. Dense: the gradient with 2 * l2 * W added and the
    batch's rows replaced by their (clipped) rows; rows outside the batch
    are never clipped. Sparse: only the batch's rows.
  """
  rows = add_l2(gradient_rows(gradient, embeddings, ids), l2)
  clipped = batch_ids = None
  grad_rows = rows.rows
  if clip is not None:
    grad_rows, clipped, batch_ids = clip_gradient_rows(rows, ids, clip)
  if sparse:
    return TableGradient(sparse_gradient(grad_rows, ids, embeddings),
                         tf.reduce_sum(tf.square(rows.weights)), clipped,
                         batch_ids)
  return TableGradient(
      dense_gradient(grad_rows, ids, embeddings, l2,
                     None if isinstance(gradient, tf.IndexedSlices)
                     else gradient),
      tf.reduce_sum(tf.square(tf.convert_to_tensor(embeddings))), clipped,
      batch_ids)


def clip_rows(rows: tf.Tensor, counts: tf.Tensor, weight_norms: tf.Tensor,
              r: float, zeta: float, variant: str = "paper") -> ClipResult:
  """The pure row clip: CowClip on rows whose counts and norms are known.

  A function of its inputs only (no tables, no ids, no tf.unique), like
  optax's clipping transforms; clip_gradient_rows feeds it.

  Args:
    rows: [n, d] gradient rows (summed over each id's occurrences).
    counts: [n] occurrences in the batch of each row's id (0: absent, the
      row is returned unchanged).
    weight_norms: [n] ||W_k|| of each row's embedding.
    r, zeta, variant: as in ClipSettings (not checked here).

  Returns:
    A ClipResult with the clipped [n, d] rows.
  """
  dim = rows.shape[-1]
  if dim is None:
    raise ValueError("CowClip gradient rows need a known width d")
  thresholds = THRESHOLDS[variant](tf.cast(counts, rows.dtype),
                                   tf.cast(weight_norms, rows.dtype), r, zeta,
                                   dim)
  grad_norms = tf.norm(rows, axis=-1)
  in_batch = counts > 0
  clipped = in_batch & (grad_norms > thresholds)
  factors = tf.where(clipped, tf.math.divide_no_nan(thresholds, grad_norms),
                     tf.ones_like(grad_norms))
  return ClipResult(rows * factors[:, tf.newaxis],
                    tf.math.count_nonzero(clipped, dtype=tf.int32),
                    tf.math.count_nonzero(in_batch, dtype=tf.int32))
