"""The tables' gradient chain: its packed CowClip is the per-table one."""

import numpy as np
import pytest
import tensorflow as tf

from trainer_module import cowclip
from trainer_module import gradient_chain


def _state(rng, weights):
  """Three fields, each with a deep [V, 4] and a wide [V, 1] table, and a
  lookup gradient of 50 repeated ids per field."""
  tables, field_ids, gradients = [], [], []
  for field, vocab in enumerate((7, 30, 300)):
    ids = tf.constant(rng.integers(0, vocab, 50))
    field_ids.append(ids)
    for width, deep in ((4, True), (1, False)):
      table = tf.Variable(rng.normal(0, 0.05, (vocab, width)).astype("f4"))
      tables.append(gradient_chain.Table(table, field, deep))
      gradients.append(tf.IndexedSlices(
          tf.constant(rng.normal(0, 0.1, (50, width)).astype("f4")), ids,
          tf.constant([vocab, width], tf.int64)))
  return gradient_chain.start(tables, field_ids, gradients, weights)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("dense", [False, True])
def test_packed_clip_gives_the_per_table_clip_bit_for_bit(weighted, dense):
  rng = np.random.default_rng(3)
  weights = (tf.constant(rng.integers(1, 4, (50, 1)).astype("f4"))
             if weighted else None)
  settings = cowclip.ClipSettings(r=0.5, zeta=1e-3)
  results = []
  for packed in (True, False):
    state = gradient_chain.chain(
        gradient_chain.batch_rows(read_rows=not dense),
        gradient_chain.add_l2(1e-2, dense),
        gradient_chain.clip_deep_rows(settings, packed=packed))(
            _state(np.random.default_rng(3), weights))
    results.append((gradient_chain.table_gradients(1e-2, dense)(state),
                    int(tf.add_n(state.clipped)),
                    int(tf.add_n(state.batch_ids))))
  (packed, clipped, ids), (alone, clipped_alone, ids_alone) = results
  assert 0 < clipped == clipped_alone < ids == ids_alone
  for a, b in zip(packed, alone):
    if isinstance(a, tf.IndexedSlices):
      a, b = tf.convert_to_tensor(a), tf.convert_to_tensor(b)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
