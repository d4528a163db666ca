"""CowClip against a plain NumPy transcription of the formula."""

import numpy as np
import pytest
import tensorflow as tf

from cowclip_reference import reference_clip
from trainer_module import cowclip
from trainer_module import settings

VOCAB, DIM = 12, 4
# Counts: 0 x4, 1 x2, 2 x2, 3 x1, 5 x2, 6 x1, 7 x2, 8 x1, 9 x1;
# 4, 10, 11 absent.
IDS = np.array([0, 0, 0, 1, 2, 3, 5, 5, 6, 7, 7, 8, 9, 1, 0, 2])
ZERO_ROW = 3  # present once, all-zero embedding: threshold is 1 * zeta.
ZERO_GRAD = 5  # present twice, zero gradient row (cancelling slices).
ABSENT = (4, 10, 11)
R, ZETA = 1.0, 0.05
MODES = ("eager", "function", "xla")


def make_table(rng):
  table = rng.normal(0.0, 0.1, (VOCAB, DIM)).astype(np.float32)
  table[ZERO_ROW] = 0.0
  return table


def make_dense_grad(rng):
  """Rows of norms spread over 3 decades, so some clip and some do not."""
  grad = rng.normal(0.0, 1.0, (VOCAB, DIM))
  grad *= 10.0 ** rng.uniform(-2.0, 1.0, (VOCAB, 1))
  grad[ZERO_ROW] *= 100.0 / np.linalg.norm(grad[ZERO_ROW])
  grad[ZERO_GRAD] = 0.0
  return grad.astype(np.float32)


def make_slices(rng):
  """A lookup's gradient: one slice per occurrence, in the ids' order."""
  values = rng.normal(0.0, 1.0, (len(IDS), DIM))
  values *= 10.0 ** rng.uniform(-2.0, 1.0, (len(IDS), 1))
  first, second = np.flatnonzero(IDS == ZERO_GRAD)
  values[second] = -values[first]
  return values.astype(np.float32), IDS


def densify(values, indices):
  dense = np.zeros((VOCAB, DIM), np.float64)
  np.add.at(dense, indices, values)
  return dense


def run(mode, fn, *args):
  if mode == "eager":
    return fn(*args)
  return tf.function(fn, jit_compile=(mode == "xla"))(*args)


def batch_ids(shape, dtype):
  return tf.constant(IDS.reshape(shape), dtype=dtype)


def every_mode_variant_and_ids(test):
  """Runs `test` eagerly, traced and under XLA, for every variant, ids of
  rank 1 and 2, int32 and int64."""
  for name, values in (("dtype", [tf.int32, tf.int64]),
                       ("shape", [(16,), (8, 2)]),
                       ("variant", cowclip.VARIANTS), ("mode", MODES)):
    test = pytest.mark.parametrize(name, values)(test)
  return test


def clip(gradient, embeddings, ids, r=R, zeta=ZETA, variant="paper",
         **kwargs):
  """The adapter with CowClip on (and no L2 unless given)."""
  return cowclip.table_gradient(
      gradient, embeddings, cowclip.distinct_ids(ids),
      clip=cowclip.ClipSettings(r, zeta, variant), **kwargs)


def test_the_settings_name_the_variants_the_clip_has():
  assert settings.COWCLIP_VARIANTS == cowclip.VARIANTS


@every_mode_variant_and_ids
def test_dense_matches_reference(mode, variant, shape, dtype):
  rng = np.random.default_rng(0)
  table, grad = make_table(rng), make_dense_grad(rng)
  variable = tf.Variable(table)
  got = run(mode, lambda g, i: clip(g, variable, i, variant=variant).gradient,
            tf.constant(grad), batch_ids(shape, dtype))
  want = reference_clip(grad, table, IDS, R, ZETA, variant)
  np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-8)
  for k in ABSENT:  # untouched, although nonzero
    np.testing.assert_array_equal(got.numpy()[k], grad[k])
  clipped = ~np.isclose(want, grad).all(axis=1)
  assert 0 < clipped.sum() < len(np.unique(IDS)), "case must mix both"


@every_mode_variant_and_ids
def test_slices_match_reference(mode, variant, shape, dtype):
  rng = np.random.default_rng(1)
  table = make_table(rng)
  values, indices = make_slices(rng)

  def sparse_clip(v, i, ids):
    out = clip(tf.IndexedSlices(v, i, tf.constant([VOCAB, DIM])),
               tf.constant(table), ids, variant=variant, sparse=True).gradient
    return out.values, out.indices

  got_values, got_indices = run(mode, sparse_clip, tf.constant(values),
                                tf.constant(indices, dtype=dtype),
                                batch_ids(shape, dtype))
  got_indices = got_indices.numpy()
  assert sorted(got_indices) == sorted(set(indices)), "one slice per id"
  want = reference_clip(densify(values, indices), table, IDS, R, ZETA, variant)
  np.testing.assert_allclose(densify(got_values.numpy(), got_indices), want,
                             rtol=1e-5, atol=1e-8)
  np.testing.assert_array_equal(want[ZERO_GRAD], 0.0)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["dense", "slices"])
def test_counts_the_batch_ids_and_the_clipped_ones(mode, kind):
  rng = np.random.default_rng(3)
  table = make_table(rng)
  if kind == "dense":
    grad = make_dense_grad(rng)
    parts = (tf.constant(grad),)
  else:  # Indices as an argument: XLA needs them from the batch (see doc).
    values, indices = make_slices(rng)
    grad = densify(values, indices).astype(np.float32)
    parts = (tf.constant(values), tf.constant(indices))
  want = reference_clip(grad, table, IDS, R, ZETA, "paper")
  present = np.unique(IDS)
  want_clipped = int(np.sum(~np.isclose(want[present], grad[present],
                                        rtol=1e-6).all(axis=1)))
  assert 0 < want_clipped < len(present), "case must mix both"

  def counts(ids, *parts):
    gradient = (parts[0] if len(parts) == 1 else
                tf.IndexedSlices(*parts, tf.constant([VOCAB, DIM])))
    result = clip(gradient, tf.constant(table), ids)
    return result.clipped, result.batch_ids

  clipped, batch = run(mode, counts, batch_ids((16,), tf.int64), *parts)
  assert (int(clipped), int(batch)) == (want_clipped, len(present))


@pytest.mark.parametrize("variant", cowclip.VARIANTS)
def test_slices_equal_dense_path(variant):
  rng = np.random.default_rng(2)
  table = tf.Variable(make_table(rng))
  values, indices = make_slices(rng)
  slices = tf.IndexedSlices(tf.constant(values), tf.constant(indices),
                            tf.constant([VOCAB, DIM]))
  ids = tf.constant(IDS)
  sparse = clip(slices, table, ids, variant=variant, sparse=True).gradient
  dense = clip(slices, table, ids, variant=variant).gradient
  from_dense = clip(tf.convert_to_tensor(slices), table, ids,
                    variant=variant).gradient
  assert isinstance(sparse, tf.IndexedSlices)
  np.testing.assert_allclose(tf.convert_to_tensor(sparse).numpy(),
                             dense.numpy(), rtol=1e-6, atol=1e-9)
  np.testing.assert_allclose(from_dense.numpy(), dense.numpy(), rtol=1e-6,
                             atol=1e-9)


@pytest.mark.parametrize("sparse", [False, True])
def test_l2_gradient_is_added_before_the_clip(sparse):
  """The loss's l2 * sum(W^2): its gradient 2 * l2 * W_k joins each batch
  row before CowClip; a dense result holds 2 * l2 * W on the other rows.
  The squared norm is the table's (dense) or the batch rows' (sparse)."""
  rng = np.random.default_rng(7)
  table = make_table(rng)
  values, indices = make_slices(rng)
  l2 = 0.3
  got = clip(tf.IndexedSlices(tf.constant(values), tf.constant(indices),
                              tf.constant([VOCAB, DIM])),
             tf.constant(table), tf.constant(IDS), l2=l2, sparse=sparse)
  present = np.unique(IDS)
  full = densify(values, indices) + 2 * l2 * table
  want = reference_clip(full, table, IDS, R, ZETA)
  np.testing.assert_allclose(tf.convert_to_tensor(got.gradient).numpy()[
      present], want[present], rtol=1e-5, atol=1e-8)
  if sparse:
    assert sorted(got.gradient.indices.numpy()) == list(present)
    want_squares = np.sum(table[present].astype(np.float64) ** 2)
  else:
    absent = list(ABSENT)
    np.testing.assert_allclose(got.gradient.numpy()[absent],
                               2 * l2 * table[absent], rtol=1e-6)
    want_squares = np.sum(table.astype(np.float64) ** 2)
  assert float(got.squared_norm) == pytest.approx(want_squares, rel=1e-6)
  assert not np.allclose(want[present], full[present]), "must clip some"


def test_weighted_counts_clip_as_repeated_examples():
  """An id's count is the sum of its examples' importance weights: a batch
  where each example stands for w copies of itself."""
  rng = np.random.default_rng(8)
  table = make_table(rng)
  values, indices = make_slices(rng)
  weights = rng.integers(1, 4, len(IDS)).astype(np.float32)
  got = cowclip.table_gradient(
      tf.IndexedSlices(tf.constant(values), tf.constant(indices),
                       tf.constant([VOCAB, DIM])), tf.constant(table),
      cowclip.distinct_ids(tf.constant(IDS), tf.constant(weights[:, None])),
      clip=cowclip.ClipSettings(R, ZETA)).gradient
  repeated = np.repeat(IDS, weights.astype(int))
  want = reference_clip(densify(values, indices), table, repeated, R, ZETA)
  np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-8)
  unweighted = reference_clip(densify(values, indices), table, IDS, R, ZETA)
  assert not np.allclose(want, unweighted), "weights must change a clip"


def test_no_clip_is_the_rows_with_l2():
  rng = np.random.default_rng(9)
  table, grad = make_table(rng), make_dense_grad(rng)
  got = cowclip.table_gradient(tf.constant(grad), tf.constant(table),
                               cowclip.distinct_ids(tf.constant(IDS)), l2=0.5)
  np.testing.assert_allclose(got.gradient.numpy(), grad + table, rtol=1e-6)
  assert got.clipped is None and got.batch_ids is None


def test_tape_gradient_under_xla():
  """The IndexedSlices a GradientTape gives for a lookup, all inside XLA."""
  rng = np.random.default_rng(3)
  table = make_table(rng)
  weights = rng.normal(0.0, 3.0, (8, 2, DIM)).astype(np.float32)
  variable = tf.Variable(table)

  @tf.function(jit_compile=True)
  def clipped_gradient(ids, weights):
    with tf.GradientTape() as tape:
      loss = tf.reduce_sum(tf.gather(variable, ids) * weights)
    grad = tape.gradient(loss, variable)
    out = clip(grad, variable, ids).gradient
    return isinstance(grad, tf.IndexedSlices), tf.convert_to_tensor(out)

  was_sparse, got = clipped_gradient(tf.constant(IDS.reshape(8, 2)),
                                     tf.constant(weights))
  assert was_sparse
  grad = densify(weights.reshape(-1, DIM), IDS)
  np.testing.assert_allclose(got.numpy(),
                             reference_clip(grad, table, IDS, R, ZETA, "paper"),
                             rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("variant", cowclip.VARIANTS)
def test_nothing_clipped_with_huge_zeta(variant):
  rng = np.random.default_rng(4)
  table, grad = make_table(rng), make_dense_grad(rng)
  got = clip(tf.constant(grad), tf.constant(table), tf.constant(IDS), R, 1e6,
             variant).gradient
  np.testing.assert_array_equal(got.numpy(), grad)


@pytest.mark.parametrize("variant", cowclip.VARIANTS)
def test_everything_clipped_to_its_threshold(variant):
  rng = np.random.default_rng(5)
  table, grad = make_table(rng), make_dense_grad(rng)
  r, zeta = 1e-3, 1e-4
  got = clip(tf.constant(grad), tf.constant(table), tf.constant(IDS), r, zeta,
             variant).gradient.numpy()
  counts = np.bincount(IDS, minlength=VOCAB)
  w_norms = np.linalg.norm(table, axis=1)
  if variant == "paper":
    thresholds = counts * np.maximum(r * w_norms, zeta)
  else:
    thresholds = counts * r * np.maximum(w_norms, r * np.sqrt(DIM) * zeta)
  for k in set(IDS) - {ZERO_GRAD}:
    assert np.linalg.norm(grad[k]) > thresholds[k]
    np.testing.assert_allclose(np.linalg.norm(got[k]), thresholds[k],
                               rtol=1e-5)
    np.testing.assert_allclose(got[k] / np.linalg.norm(got[k]),
                               grad[k] / np.linalg.norm(grad[k]), rtol=1e-5)
  np.testing.assert_array_equal(got[ZERO_GRAD], 0.0)


def test_zero_embedding_row_threshold_is_count_times_zeta():
  rng = np.random.default_rng(6)
  table, grad = make_table(rng), make_dense_grad(rng)
  got = clip(tf.constant(grad), tf.constant(table),
             tf.constant(IDS)).gradient.numpy()
  np.testing.assert_allclose(np.linalg.norm(got[ZERO_ROW]), 1 * ZETA,
                             rtol=1e-6)
  got = clip(tf.constant(grad), tf.constant(table), tf.constant(IDS),
             variant="reference").gradient.numpy()
  np.testing.assert_allclose(np.linalg.norm(got[ZERO_ROW]),
                             1 * np.sqrt(DIM) * ZETA, rtol=1e-6)


@pytest.mark.parametrize("kwargs, message", [
    ({"variant": "Paper"}, "unknown CowClip variant"),
    ({"r": -1.0}, "r >= 0"),
    ({"zeta": float("nan")}, "zeta"),
    ({"ids": tf.constant([1.0])}, "must be integers"),
    ({"embeddings": tf.zeros([VOCAB])}, r"\[V, d\] table"),
    ({"gradient": tf.zeros([VOCAB, DIM + 1])}, "dense gradient has shape"),
    ({"gradient": tf.IndexedSlices(tf.zeros([2, DIM + 1]),
                                   tf.constant([1, 2]))},
     "gradient slices have shape"),
    ({"gradient": tf.IndexedSlices(tf.zeros([3, DIM]),
                                   tf.constant([1, 2, 4]))},
     "one slice .* per id"),
])
def test_bad_input_is_rejected(kwargs, message):
  args = {"gradient": tf.zeros([VOCAB, DIM]),
          "embeddings": tf.zeros([VOCAB, DIM]), "ids": tf.constant([1, 2]),
          "r": R, "zeta": ZETA, **kwargs}
  with pytest.raises(ValueError, match=message):
    clip(**args)


def test_clip_rows_is_the_core_of_the_adapter():
  rng = np.random.default_rng(5)
  table = rng.normal(size=(6, 4)).astype(np.float32)
  gradient = rng.normal(size=(6, 4)).astype(np.float32) * 3
  ids = np.array([0, 0, 2, 5, 5, 5])
  counts = np.bincount(ids, minlength=6).astype(np.float32)
  for variant in cowclip.VARIANTS:
    full = clip(tf.constant(gradient), tf.constant(table), ids, 0.5, 1e-3,
                variant)
    rows = cowclip.clip_rows(tf.constant(gradient), tf.constant(counts),
                             tf.norm(table, axis=-1), 0.5, 1e-3, variant)
    np.testing.assert_allclose(rows.gradient.numpy(), full.gradient.numpy(),
                               rtol=1e-6)
    assert int(rows.clipped) == int(full.clipped) > 0
    assert int(rows.batch_ids) == int(full.batch_ids) == 3
