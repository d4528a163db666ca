"""A part of the train split held in memory: parsed and transformed once,
then every epoch's batches gathered from its columns (InMemoryPart), and
whether a part fits the memory budget (memory_fits).
"""

import dataclasses
from typing import Any, Optional, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_transform as tft

# input_pipeline.training_data holds the training part and the validation
# slice in memory as the Transform output's columns (InMemoryPart) when
# they take at most MEMORY_SHARE of the machine's memory: each epoch then
# gathers its shuffled batches from them instead of parsing and
# transforming every record again, which ran at about half the step's rate
# at batch 8192 on 2 cores (docs/benchmark.md, the input path). Else every
# pass reads the files. A share of the total memory, not of what is free:
# every worker of a multi-worker run must decide alike, or their orders, and
# so their share of each global batch, would differ.
MEMORY_SHARE = 0.25
# Rows per batch of the one pass that loads a part into memory.
LOAD_BATCH = 8192


@dataclasses.dataclass(frozen=True)
class InMemoryPart:
  """A part of the split, parsed and transformed once (load_in_memory) and
  held in memory: each epoch gathers its batches from it.

  The single-valued columns of one dtype are held as one [rows, columns]
  block, so a batch is one gather per dtype of adjacent values, not one
  gather per column: 8x less CPU at batch 32768 (41.7 against 5.2 ms for
  Criteo's 39 id columns, docs/benchmark.md).

  Attributes:
    structure: a batch of make_dataset ((features, label) or (features,
      label, weight)): the structure the batches are packed back into.
    blocks: the held values: per dtype a [rows, columns] tensor, and a
      tensor of its own for a column of several values per row.
    slots: per leaf of `structure` (tf.nest order), (its block, its column
      in it), or (its block, None) when the block is that leaf alone.
    rows: the part's examples.
  """
  structure: Any
  blocks: Tuple[tf.Tensor, ...]
  slots: Tuple[Tuple[int, Optional[int]], ...]
  rows: int

  def batches(self, batch_size: int, shuffle: bool,
              seed: Optional[int] = None) -> tf.data.Dataset:
    """The part's batches, in a new random order every pass when `shuffle`
    (a whole permutation of its rows, seeded by `seed`), else in order.

    The permutation is one tensor op per pass, sliced into batches of
    indices: a shuffle buffer of the row indices, element by element, cost
    1.8 CPU s per pass of 900k rows (64 ms a batch of 32768, most of the
    input's share of the step), this 0.07 s."""
    rows, steps = self.rows, -(-self.rows // batch_size)

    def index_batches(order):
      return tf.data.Dataset.range(steps).map(
          lambda step: order[step * batch_size:
                             tf.minimum((step + 1) * batch_size, rows)])

    if shuffle:
      # A new seed every pass (reproducible from `seed`), so a new order.
      indices = tf.data.Dataset.random(
          seed=seed, rerandomize_each_iteration=True).take(1).flat_map(
              lambda pass_seed: index_batches(
                  tf.random.experimental.stateless_shuffle(
                      tf.range(rows, dtype=tf.int64),
                      seed=tf.stack([pass_seed, 0]))))
    else:
      indices = index_batches(tf.range(rows, dtype=tf.int64))
    blocks, slots, structure = self.blocks, self.slots, self.structure

    def gather(rows):
      taken = [tf.gather(block, rows) for block in blocks]
      return tf.nest.pack_sequence_as(structure, [
          taken[block] if column is None else taken[block][:, column]
          for block, column in slots])

    return indices.map(gather, num_parallel_calls=tf.data.AUTOTUNE).prefetch(
        tf.data.AUTOTUNE)


def load_in_memory(dataset: tf.data.Dataset, rows: int) -> InMemoryPart:
  """The `rows` examples of an unshuffled make_dataset, in InMemoryPart's
  blocks.

  Each block is allocated once at its full size and filled batch by batch,
  then copied into a tensor and let go before the next block is: the peak
  is the part's size plus its largest block, not twice the part.

  Raises:
    ValueError: the dataset does not hold `rows` examples (the counting
      pass and this one disagree).
  """
  structure, arrays, slots, filled = None, [], [], 0
  for batch in dataset:
    values = tf.nest.flatten(batch)
    size = int(values[0].shape[0])
    if filled + size > rows:
      break
    if structure is None:
      structure = tf.nest.map_structure(lambda _: 0, batch)
      by_dtype = {}
      for value in values:
        dtype = value.dtype.as_numpy_dtype
        if value.shape.rank == 1:
          by_dtype.setdefault(dtype, len(by_dtype))
      widths = [0] * len(by_dtype)
      for value in values:
        if value.shape.rank == 1:
          block = by_dtype[value.dtype.as_numpy_dtype]
          slots.append((block, widths[block]))
          widths[block] += 1
        else:
          slots.append((len(by_dtype) + len(arrays), None))
          arrays.append(np.empty((rows, *value.shape[1:]),
                                 value.dtype.as_numpy_dtype))
      arrays = [np.empty((rows, width), dtype) for dtype, width in
                zip(by_dtype, widths)] + arrays
    for (block, column), value in zip(slots, values):
      target = arrays[block] if column is None else arrays[block][:, column]
      target[filled:filled + size] = value.numpy()
    filled += size
  if filled != rows:
    raise ValueError(f"the input holds {filled}+ examples where the counting "
                     f"pass found {rows}")
  blocks = []
  while arrays:
    blocks.append(tf.convert_to_tensor(arrays.pop(0)))
  return InMemoryPart(structure, tuple(blocks), tuple(slots), rows)


def transformed_row_bytes(tf_transform_output: tft.TFTransformOutput,
                          weighted: bool) -> Optional[int]:
  """Bytes of one example in an InMemoryPart (the Transform output's
  fixed-length features and the label, the importance weight when
  `weighted`, and its index in a pass's permutation); None when a feature
  has no fixed length."""
  total = 8 + (4 if weighted else 0)
  for spec in tf_transform_output.transformed_feature_spec().values():
    if not isinstance(spec, tf.io.FixedLenFeature):
      return None
    total += spec.dtype.size * int(np.prod(spec.shape, dtype=np.int64))
  return total


def memory_fits(rows: int, row_bytes: Optional[int],
                memory_bytes: int) -> bool:
  """Whether `rows` examples of `row_bytes` each fit the memory budget
  (MEMORY_SHARE of the machine's `memory_bytes`)."""
  return row_bytes is not None and (
      rows * row_bytes <= MEMORY_SHARE * memory_bytes)
