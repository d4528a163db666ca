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
clip (rows, counts, norms in; clipped rows out) and ``gradient_rows`` the
adapter that turns a dense or IndexedSlices table gradient into those rows;
``clip_embedding_gradient`` composes the two.

Variants. "paper" is the formula printed in the paper. "reference" follows the
authors' public code (bytedance/LargeBatchCTR, train.py + clip.py): it passes
``r * sqrt(d) * zeta`` as the floor on ||W_k|| and multiplies the result by r,
so with r = 1 the only difference is that zeta is scaled by sqrt(d) (the norm
of a d-vector whose entries all equal zeta). One other difference is not
reproduced: the reference's dense path treats absent ids as cnt = 1 and clips
their rows too; here absent rows are never touched (with an L2 gradient
2 * l2 * W_k that only matters when 2 * l2 > r).

The gradient to pass is the one tf.GradientTape gives for the loss as Keras
computes it: the mean-over-batch data loss plus the L2 regularisation term.
The thresholds apply to that sum as is, like the reference does.

Both paths run eagerly, in tf.function and with jit_compile=True (XLA). The
dense path has static shapes and costs O(V * d) per table. The IndexedSlices
path costs O(N * d) plus an O(V) id count, and its output has a data-dependent
row count (tf.unique): XLA compiles it as a bounded dynamic shape [<= N], which
works when the indices come from the batch as in training; with indices that
are compile-time constants, TF constant folding and XLA disagree on that size
and compilation fails. Densifying the gradient (tf.convert_to_tensor) and using
the dense path is the fully static alternative.
"""

import math
from typing import NamedTuple, Optional, Union

import tensorflow as tf

from trainer_module import settings

VARIANTS = settings.COWCLIP_VARIANTS

Gradient = Union[tf.Tensor, tf.IndexedSlices]


class ClipResult(NamedTuple):
  """A clipped gradient and how many of the batch's ids it clipped.

  ``clipped / batch_ids`` over training is the share of id updates CowClip
  changed: whether the clip acts at all on a dataset, at a batch size, is
  the first thing to know when judging it.
  """
  gradient: Gradient
  clipped: tf.Tensor  # distinct ids of the batch whose row was clipped
  batch_ids: tf.Tensor  # distinct ids of the batch (rows with cnt > 0)


def id_counts(ids: tf.Tensor, vocab_size: Union[int, tf.Tensor],
              dtype: tf.DType = tf.float32) -> tf.Tensor:
  """Occurrences of every id of [0, vocab_size) in ``ids``, as a [V] vector.

  A fixed-size bincount (segment sum over V rows), so it compiles with XLA
  and any id can be looked up with a gather.

  Args:
    ids: integer ids, any shape.
    vocab_size: V, the number of rows of the embedding table.
    dtype: dtype of the counts.

  Returns:
    A [vocab_size] tensor of counts.
  """
  flat = tf.reshape(ids, [-1])
  return tf.math.unsorted_segment_sum(
      tf.ones_like(flat, dtype=dtype), flat, vocab_size)


class GradientRows(NamedTuple):
  """One table's gradient as rows, with what the clip needs per row.

  Attributes:
    rows: [n, d] gradient rows (each the sum over its id's slices).
    counts: [n] occurrences of each row's id in the batch (0: absent).
    weight_norms: [n] ||W_k|| of each row's embedding.
    indices: [n] table rows of a sparse gradient (None: dense, n = V).
  """
  rows: tf.Tensor
  counts: tf.Tensor
  weight_norms: tf.Tensor
  indices: Optional[tf.Tensor]


def gradient_rows(gradient: Gradient, embeddings, ids: tf.Tensor
                 ) -> GradientRows:
  """The adapter: a dense [V, d] or IndexedSlices gradient as GradientRows.

  Dense: every row of the table, counts over the vocabulary. IndexedSlices:
  one row per distinct index (tf.unique order), its slices summed (the norm
  is that of the summed row), counts and norms gathered for those rows only.

  Raises:
    ValueError: non-integer ids, or shapes of gradient and embeddings that
      do not match.
  """
  ids = tf.convert_to_tensor(ids)
  if not ids.dtype.is_integer:
    raise ValueError(f"CowClip ids must be integers, got dtype {ids.dtype}")
  table_shape = tf.TensorShape(embeddings.shape)
  if table_shape.rank != 2 or table_shape[1] is None:
    raise ValueError("CowClip embeddings must be a [V, d] table with known d, "
                     f"got shape {table_shape}")
  dim = table_shape[1]
  vocab_size = tf.shape(embeddings)[0]
  if isinstance(gradient, tf.IndexedSlices):
    if not gradient.values.shape[-1:].is_compatible_with([dim]):
      raise ValueError(f"CowClip gradient slices have shape "
                       f"{gradient.values.shape}, embeddings {table_shape}")
    unique_ids, position = tf.unique(gradient.indices)
    rows = tf.math.unsorted_segment_sum(gradient.values, position,
                                        tf.size(unique_ids))
    rows.set_shape([None, dim])
    return GradientRows(
        rows, tf.gather(id_counts(ids, vocab_size, rows.dtype), unique_ids),
        tf.norm(tf.gather(embeddings, unique_ids), axis=-1), unique_ids)
  rows = tf.convert_to_tensor(gradient)
  if not rows.shape.is_compatible_with(table_shape):
    raise ValueError(f"CowClip dense gradient has shape {rows.shape}, "
                     f"embeddings {table_shape}")
  return GradientRows(rows, id_counts(ids, vocab_size, rows.dtype),
                      tf.norm(embeddings, axis=-1), None)


def clip_embedding_gradient(gradient: Gradient, embeddings, ids: tf.Tensor,
                            r: float, zeta: float,
                            variant: str = "paper") -> ClipResult:
  """Applies CowClip to one embedding table's gradient (see module doc):
  gradient_rows (the adapter), then clip_rows (the pure row clip).

  Args:
    gradient: the gradient of ``embeddings``, either a dense [V, d] tensor or
      a tf.IndexedSlices (as tf.GradientTape returns for embedding lookups;
      repeated indices allowed, values [N, d]).
    embeddings: the [V, d] table (tf.Variable, keras.Variable or tensor).
    ids: integer (int32/int64) ids of this field in the batch, any shape.
    r: ratio of the weight norm allowed as gradient norm per occurrence.
    zeta: lower bound of the per-occurrence threshold.
    variant: "paper" or "reference".

  Returns:
    A ClipResult (int32 counts) whose gradient is of the same kind as
    ``gradient``:
      * dense in -> dense [V, d] out; rows of absent ids unchanged;
      * tf.IndexedSlices in -> deduplicated tf.IndexedSlices out: one slice
        per distinct input index (tf.unique order), holding the clipped SUM
        of that index's slices; same dense_shape. Deduplication is needed
        anyway (the norm is that of the summed row) and is what Keras 3
        optimizers need: Adam squares slice values before summing
        duplicates. Indices absent from ``ids`` keep their summed values.

  Raises:
    ValueError: unknown variant, negative r or zeta, non-integer ids, or
      shapes of gradient and embeddings that do not match.
  """
  check_clip_settings(r, zeta, variant)
  rows = gradient_rows(gradient, embeddings, ids)
  result = clip_rows(rows.rows, rows.counts, rows.weight_norms, r, zeta,
                     variant)
  if rows.indices is None:
    return result
  return result._replace(gradient=tf.IndexedSlices(
      result.gradient, rows.indices, gradient.dense_shape))


def check_clip_settings(r: float, zeta: float, variant: str) -> None:
  """Raises ValueError for an unknown variant or a negative r or zeta."""
  if variant not in VARIANTS:
    raise ValueError(f"unknown CowClip variant {variant!r}; choose one of "
                     f"{VARIANTS}")
  if not (r >= 0 and zeta >= 0):
    raise ValueError(f"CowClip needs r >= 0 and zeta >= 0, got r={r}, "
                     f"zeta={zeta}")


def clip_rows(rows: tf.Tensor, counts: tf.Tensor, weight_norms: tf.Tensor,
              r: float, zeta: float, variant: str = "paper") -> ClipResult:
  """The pure row clip: CowClip on rows whose counts and norms are known.

  A function of its inputs only (no tables, no ids, no tf.unique), like
  optax's clipping transforms: clip_embedding_gradient feeds it through the
  gradient_rows adapter, and the training step, which deduplicates the
  batch's ids once per field and gathers their weight rows once, calls it
  directly.

  Args:
    rows: [n, d] gradient rows (summed over each id's occurrences).
    counts: [n] occurrences in the batch of each row's id (0: absent, the
      row is returned unchanged).
    weight_norms: [n] ||W_k|| of each row's embedding.
    r, zeta, variant: as in clip_embedding_gradient (not checked here).

  Returns:
    A ClipResult with the clipped [n, d] rows.
  """
  dim = rows.shape[-1]
  if dim is None:
    raise ValueError("CowClip gradient rows need a known width d")
  thresholds = _thresholds(tf.cast(counts, rows.dtype),
                           tf.cast(weight_norms, rows.dtype), r, zeta, dim,
                           variant)
  grad_norms = tf.norm(rows, axis=-1)
  in_batch = counts > 0
  clipped = in_batch & (grad_norms > thresholds)
  factors = tf.where(clipped, tf.math.divide_no_nan(thresholds, grad_norms),
                     tf.ones_like(grad_norms))
  return ClipResult(rows * factors[:, tf.newaxis],
                    tf.math.count_nonzero(clipped, dtype=tf.int32),
                    tf.math.count_nonzero(in_batch, dtype=tf.int32))


def _thresholds(counts: tf.Tensor, weight_norms: tf.Tensor, r: float,
                zeta: float, dim: int, variant: str) -> tf.Tensor:
  """clip_k of the module docstring, per row."""
  if variant == "paper":
    return counts * tf.maximum(r * weight_norms, zeta)
  return counts * r * tf.maximum(weight_norms, r * math.sqrt(dim) * zeta)
