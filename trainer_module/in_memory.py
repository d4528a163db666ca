"""A part of the train split held in memory: parsed and transformed once,
then every epoch's batches gathered from its columns (InMemoryPart);
whether a part fits the memory budget (memory_fits); and a part kept on
disk between processes (save_part, read_part).
"""

import dataclasses
import os
from typing import Any, List, Optional, Tuple

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


@dataclasses.dataclass(frozen=True)
class PartLayout:
  """How an InMemoryPart holds the batches of a dataset: what part_layout
  derives from the dataset's element_spec alone, so a part kept on disk
  (save_part) is read back without reading the dataset (read_part).

  Attributes:
    structure: InMemoryPart.structure.
    slots: InMemoryPart.slots.
    blocks: per block, its dtype and the shape of one of its rows.
  """
  structure: Any
  slots: Tuple[Tuple[int, Optional[int]], ...]
  blocks: Tuple[Tuple[Any, Tuple[int, ...]], ...]


def part_layout(element_spec: Any) -> PartLayout:
  """The single-valued columns of one dtype side by side in one block (in
  the order the dtypes first appear), then a block for each column of
  several values, in tf.nest order."""
  specs = tf.nest.flatten(element_spec)
  for spec in specs:
    if spec.shape.rank is None or not spec.shape[1:].is_fully_defined():
      raise ValueError(f"a column of shape {spec.shape} has no fixed "
                       "length: it cannot be held in memory")
  by_dtype = {}
  for spec in specs:
    if spec.shape.rank == 1:
      by_dtype.setdefault(spec.dtype.as_numpy_dtype, len(by_dtype))
  widths, slots, wide = [0] * len(by_dtype), [], []
  for spec in specs:
    if spec.shape.rank == 1:
      block = by_dtype[spec.dtype.as_numpy_dtype]
      slots.append((block, widths[block]))
      widths[block] += 1
    else:
      slots.append((len(by_dtype) + len(wide), None))
      wide.append((spec.dtype.as_numpy_dtype, tuple(spec.shape[1:])))
  return PartLayout(
      structure=tf.nest.map_structure(lambda _: 0, element_spec),
      slots=tuple(slots),
      blocks=tuple((dtype, (width,)) for dtype, width
                   in zip(by_dtype, widths)) + tuple(wide))


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
  layout = part_layout(dataset.element_spec)
  arrays = [np.empty((rows, *shape), dtype) for dtype, shape in layout.blocks]
  filled = 0
  for batch in dataset:
    values = tf.nest.flatten(batch)
    size = int(values[0].shape[0])
    if filled + size > rows:
      break
    for (block, column), value in zip(layout.slots, values):
      target = arrays[block] if column is None else arrays[block][:, column]
      target[filled:filled + size] = value.numpy()
    filled += size
  if filled != rows:
    raise ValueError(f"the input holds {filled}+ examples where the counting "
                     f"pass found {rows}")
  return InMemoryPart(layout.structure, _tensors(arrays), layout.slots, rows)


def _tensors(arrays: List[np.ndarray]) -> Tuple[tf.Tensor, ...]:
  """The arrays as tensors, each array let go once copied: the peak is
  the arrays plus the largest one, not twice them all."""
  blocks = []
  while arrays:
    blocks.append(tf.convert_to_tensor(arrays.pop(0)))
  return tuple(blocks)


def save_part(part: InMemoryPart, directory: str) -> None:
  """Writes the part's blocks to `directory`, one .npy file each."""
  os.makedirs(directory, exist_ok=True)
  for index, block in enumerate(part.blocks):
    np.save(os.path.join(directory, f"block_{index}.npy"), block.numpy(),
            allow_pickle=False)


def read_part(directory: str, element_spec: Any, rows: int) -> InMemoryPart:
  """The part save_part wrote to `directory`, for batches of
  `element_spec` (the dataset it was loaded from).

  Raises:
    ValueError: the files do not hold `rows` rows of that layout.
  """
  layout = part_layout(element_spec)
  arrays = []
  for index, (dtype, shape) in enumerate(layout.blocks):
    array = np.load(os.path.join(directory, f"block_{index}.npy"),
                    allow_pickle=False)
    if array.dtype != dtype or array.shape != (rows, *shape):
      raise ValueError(
          f"{directory}: block {index} holds {array.dtype}{array.shape} "
          f"where the data's layout has {np.dtype(dtype)}{(rows, *shape)}")
    arrays.append(array)
  return InMemoryPart(layout.structure, _tensors(arrays), layout.slots, rows)


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
