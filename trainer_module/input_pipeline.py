"""The Trainer's input: the train split carved into the training part and
the validation slice, negative sampling, and the tf.data pipeline.

Both the carve and the sampling hash each example's parsed values
(example_keys), not its serialized bytes: the same example encoded
differently (another feature order, another writer) keeps its side.
One pass counts the split per hash bucket of its records (split_stats);
the same carve (in_part) and the same sampling (kept_by_sampling) then
select the records that are read (select_records), so the counts that set
the steps per epoch, the warmup, the auto hyperparameters and the bias
initialisation are those of the data trained on.
"""

import ctypes
import dataclasses
import gc
from typing import Any, Dict, List, Mapping, Optional, Tuple

from absl import logging
import numpy as np
import psutil
import tensorflow as tf
import tensorflow_transform as tft

from trainer_module import in_memory as in_memory_lib
from trainer_module import kept_split
from trainer_module import settings

# The validation slice of early stopping: records of the TRAIN split whose
# key (example_keys) falls in the first buckets of VALIDATION_BUCKETS. The
# eval split stays unseen until the Evaluator.
VALIDATION_BUCKETS = 1000
# Share of the train split held out for validation, capped at
# MAX_VALIDATION_EXAMPLES: enough for a stable log loss, and cheap to score
# every epoch on big data.
VALIDATION_FRACTION = 0.1
MAX_VALIDATION_EXAMPLES = 200_000
# Negative down-sampling: a keyed SipHash of the record's key (example_keys)
# in SAMPLING_BUCKETS buckets decides which non-clicks are kept. Keyed, so it
# is independent of the validation slice's buckets (the same hash would keep
# the non-clicks of the buckets next to the slice's).
SAMPLING_BUCKETS = 1_000_000
SAMPLING_KEY = (0x5EED, 0xC11C)
# Records per element read from a file, counted per vectorised step
# (split_stats), selected per step (select_records) and cached per element
# (make_dataset). Interleaving files record by record cost ~20 us of CPU per
# record, 13x the read itself; chunks 8x larger took 0.45 GiB more memory
# (docs/benchmark_data.md).
_RECORD_CHUNK = 8192
# The default of the readers' negative_sampling_rate: keep every record.
NO_SAMPLING = settings.DEFAULT_NEGATIVE_SAMPLING_RATE
# What an absent feature counts as in example_keys (ExampleGen leaves out
# an empty field): values no real field holds in practice.
_ABSENT = {tf.int64: -2**63, tf.string: b"\x00absent"}


def validation_buckets(train_split_examples: int) -> int:
  """How many of the VALIDATION_BUCKETS hash buckets form the validation
  slice of a train split of this size (at least one)."""
  share = min(VALIDATION_FRACTION,
              MAX_VALIDATION_EXAMPLES / max(train_split_examples, 1))
  return max(1, int(share * VALIDATION_BUCKETS))


def example_keys(serialized: tf.Tensor, raw_spec: Mapping[str, Any],
                 label: str) -> Tuple[tf.Tensor, tf.Tensor]:
  """(key, float32 label) of each serialized raw example. The key
  (int64) is a fingerprint of its raw features' values, in the order of
  their names (tf.sparse.cross_hashed), so it does not depend on how the
  example was serialized: a proto's map entries have no fixed order, and
  another writer (or version) may order them differently. The raw features
  are single-valued (ExampleGen's); an absent one counts as _ABSENT. One
  parse of the chunk: ~7 us per Criteo record, 30x hashing its bytes
  (docs/benchmark_data.md, seeded runs).
  """
  names = sorted(raw_spec)
  parsed = tf.io.parse_example(serialized, {
      name: tf.io.FixedLenFeature([1], raw_spec[name].dtype,
                                  _ABSENT[raw_spec[name].dtype])
      for name in names})
  keys = tf.sparse.cross_hashed([parsed[name] for name in names]).values
  return keys, tf.cast(tf.reshape(parsed[label], [-1]), tf.float32)


def kept_by_sampling(keys: tf.Tensor, labels: tf.Tensor,
                     rate: float) -> tf.Tensor:
  """Whether negative down-sampling at `rate` keeps the records of these
  example_keys: every click, and the non-clicks whose keyed hash falls in
  the first round(rate * SAMPLING_BUCKETS) buckets (the same records in
  every run)."""
  buckets = tf.strings.to_hash_bucket_strong(
      tf.strings.as_string(keys), SAMPLING_BUCKETS, SAMPLING_KEY)
  return (tf.reshape(labels, [-1]) > 0.5) | (
      buckets < round(rate * SAMPLING_BUCKETS))


def importance_weights(labels: tf.Tensor, rate: float) -> tf.Tensor:
  """1 for a click, 1 / rate for a kept non-click (float32, labels' shape):
  each kept non-click stands for the 1 / rate non-clicks sampling drew it
  from, so weighted sums estimate the unsampled ones."""
  labels = tf.cast(labels, tf.float32)
  return tf.where(labels > 0.5, tf.ones_like(labels),
                  tf.fill(tf.shape(labels), 1.0 / rate))


def record_buckets(keys: tf.Tensor) -> tf.Tensor:
  """The bucket (of VALIDATION_BUCKETS) of each record's example_keys,
  which carves the validation slice (in_part).

  A fingerprint of the example's values decides, so the carve is the same
  in every run, process, tf.data order and encoding, and identical
  records (duplicated log lines) fall on the same side.
  """
  return tf.math.floormod(keys, VALIDATION_BUCKETS)


def _check_part(part: str) -> None:
  if part not in ("all", "train", "validation"):
    raise ValueError(f"unknown part {part!r}: 'all', 'train' or "
                     "'validation'")


def in_part(bucket, part: str, buckets: int):
  """Whether records of these record_buckets (a tensor or a NumPy array)
  are in `part`: 'all'; 'validation', the first `buckets` buckets;
  'train', the others. The one carve: split_stats' counts (SplitStats.part)
  and the records read (select_records) both go through it."""
  _check_part(part)
  if part == "all":
    return bucket >= 0
  return bucket < buckets if part == "validation" else bucket >= buckets


def select_records(serialized: tf.Tensor, raw_spec: Mapping[str, Any],
                   label: str, part: str, buckets: int,
                   rate: float) -> tf.Tensor:
  """Of a chunk of serialized records, in their order, those of `part`
  (in_part) that negative sampling at `rate` keeps (kept_by_sampling).
  Vectorised: one example_keys parse of the chunk, none for 'all' at
  rate 1."""
  if part == "all" and rate >= 1:
    return serialized
  keys, labels = example_keys(serialized, raw_spec, label)
  keep = in_part(record_buckets(keys), part, buckets)
  if rate < 1:
    keep &= kept_by_sampling(keys, labels, rate)
  return tf.boolean_mask(serialized, keep)


@dataclasses.dataclass(frozen=True)
class SplitStats:
  """Per hash bucket of the records (record_buckets: VALIDATION_BUCKETS of
  them), what one pass over a split counted; the train and validation parts
  of any slice size are sums of buckets (in_part), so one pass answers
  every question about a part.

  Arrays of VALIDATION_BUCKETS float64:
    records: records of the bucket.
    kept: records negative sampling at `rate` keeps (= records at rate 1).
    clicks: the kept records' sum of labels.
    weight: the kept records' sum of importance_weights.
  """
  rate: float
  records: np.ndarray
  kept: np.ndarray
  clicks: np.ndarray
  weight: np.ndarray

  def part(self, name: str, buckets: int) -> np.ndarray:
    """Which buckets are in part `name` (in_part)."""
    return in_part(np.arange(VALIDATION_BUCKETS), name, buckets)

  def label_stats(self, part: str = "all",
                  buckets: int = 0) -> Tuple[int, float]:
    """(examples kept, click rate) of part `part` (select_records). With
    negative sampling (rate < 1), the click rate of the kept examples
    weighted by importance_weights: the estimate of the unsampled rate."""
    where = self.part(part, buckets)
    return (int(self.kept[where].sum()),
            float(self.clicks[where].sum()) /
            max(float(self.weight[where].sum()), 1.0))


def _record_chunks(files: List[str], shuffle: bool = False,
                   seed: Optional[int] = None) -> tf.data.Dataset:
  """Serialized records of ExampleGen's gzipped TFRecord `files`, in
  chunks of up to _RECORD_CHUNK records of one file, read from files in
  parallel (`shuffle`: in a file order shuffled with `seed`). The chunks
  come in a fixed order, so a seeded read is the same in every run; only
  an unseeded shuffled read, which promises no order, takes them as they
  complete (a few percent faster at most: docs/benchmark_data.md, seeded
  runs).
  """
  dataset = tf.data.Dataset.from_tensor_slices(files)
  if shuffle:
    dataset = dataset.shuffle(len(files), seed=seed)
  return dataset.interleave(
      lambda f: tf.data.TFRecordDataset(f, compression_type="GZIP").batch(
          _RECORD_CHUNK),
      num_parallel_calls=tf.data.AUTOTUNE,
      deterministic=not shuffle or seed is not None)


# The input functions branch on Python values only: AutoGraph's rewrite of
# them and of the Transform layer they call cost seconds of every Trainer
# start for nothing (docs/tests.md).
_not_converted = tf.autograph.experimental.do_not_convert


def split_stats(file_patterns: List[str], raw_spec: Mapping[str, Any],
                label: str,
                negative_sampling_rate: float = NO_SAMPLING) -> SplitStats:
  """SplitStats of ExampleGen's gzipped TFRecords of raw examples (of
  `raw_spec`), in one pass.

  Only example_keys are parsed, a chunk of records at a time: cheap next
  to training.
  """
  files = [f for p in file_patterns for f in tf.io.gfile.glob(p)]
  if not files:
    raise FileNotFoundError(f"no examples match {file_patterns}")
  rate = negative_sampling_rate

  @_not_converted
  def count(serialized):
    keys, labels = example_keys(serialized, raw_spec, label)
    kept = tf.cast(kept_by_sampling(keys, labels, rate) if rate < 1
                   else tf.ones_like(labels, tf.bool), tf.float64)
    columns = tf.stack([
        tf.ones_like(kept), kept, kept * tf.cast(labels, tf.float64),
        kept * tf.cast(importance_weights(labels, rate), tf.float64)],
                       axis=1)
    return tf.math.unsorted_segment_sum(
        columns, record_buckets(keys), VALIDATION_BUCKETS)

  totals = _record_chunks(files).map(
      count, num_parallel_calls=tf.data.AUTOTUNE).reduce(
          tf.zeros([VALIDATION_BUCKETS, 4], tf.float64), tf.add).numpy()
  return SplitStats(rate, *totals.T)


def make_dataset(file_patterns: List[str],
                 tf_transform_output: tft.TFTransformOutput,
                 label: str,
                 batch_size: int,
                 shuffle: bool,
                 seed: Optional[int] = None,
                 part: str = "all",
                 buckets: int = 0,
                 negative_sampling_rate: float = NO_SAMPLING
                ) -> tf.data.Dataset:
  """(features, label) batches of transformed features from ExampleGen's
  raw examples.

  Transform does not write transformed examples (materialize=False: Beam's
  per-record Python made that its slowest part, docs/benchmark_data.md);
  each batch is parsed with the raw schema and goes through the Transform
  graph here, as serving requests do. Records are batched BEFORE parsing
  (one parse_example and one graph call per batch instead of one per
  record), and files are read in parallel in chunks (_record_chunks), so
  input is not the bottleneck. `seed` seeds the shuffles (None: a new
  order every run, files read as they complete: _record_chunks).
  `part` and `buckets` keep the train or validation part of the records,
  and a negative_sampling_rate below 1 keeps the records sampling keeps
  (select_records: on example_keys, in chunks of _RECORD_CHUNK, before
  the batches are parsed and transformed); then the batches are
  (features, label, importance weight). Every pass reads the files again:
  training_data holds a part in memory instead when it fits
  (in_memory.InMemoryPart).
  """
  files = [f for p in file_patterns for f in tf.io.gfile.glob(p)]
  raw_spec = tf_transform_output.raw_feature_spec()
  transform = tf_transform_output.transform_features_layer()
  dataset = _record_chunks(files, shuffle, seed)
  rate = negative_sampling_rate
  if part != "all" or rate < 1:
    dataset = dataset.map(
        _not_converted(lambda chunk: select_records(
            chunk, raw_spec, label, part, buckets, rate)),
        num_parallel_calls=tf.data.AUTOTUNE)
  dataset = dataset.unbatch()
  if shuffle:
    dataset = dataset.shuffle(max(16 * batch_size, 10_000), seed=seed)
  dataset = dataset.batch(batch_size)

  @_not_converted
  def parse(serialized):
    parsed = dict(transform(tf.io.parse_example(serialized, raw_spec)))
    labels = parsed.pop(label)
    if rate < 1:
      return parsed, labels, importance_weights(labels, rate)
    return parsed, labels

  return dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE).prefetch(
      tf.data.AUTOTUNE)


@dataclasses.dataclass(frozen=True)
class HeldSplit:
  """What training_data reads of the train split before it batches. Free
  of batch size and seed, so the study's runs share one (hold_split).

  Attributes:
    train_examples: examples in the training part.
    validation_examples: examples in the validation slice of early
      stopping (the eval split is not read: it is the Evaluator's honest
      test).
    click_rate: click rate of the training part (importance-weighted
      under negative sampling: the unsampled rate's estimate).
    validation_buckets: the slice's hash buckets (validation_buckets).
    in_memory: the training part held in memory (in_memory.InMemoryPart;
      None: it did not fit, and every epoch reads the files).
    validation_in_memory: the validation slice held in memory (None: it
      did not fit either).
  """
  train_examples: int
  validation_examples: int
  click_rate: float
  validation_buckets: int
  in_memory: Optional[in_memory_lib.InMemoryPart] = None
  validation_in_memory: Optional[in_memory_lib.InMemoryPart] = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainingData(HeldSplit):
  """The held split, batched (training_data).

  Attributes:
    train: shuffled (features, label) batches of the training part.
    validation: (features, label) batches of the validation slice.
    negative_sampling: {} without negative sampling; else the record of
      sampling_record (rate, weights, the instability warning).
  """
  train: tf.data.Dataset
  validation: tf.data.Dataset
  negative_sampling: Mapping[str, Any] = dataclasses.field(
      default_factory=dict)


def release_memory() -> None:
  """Gives the memory of datasets no longer referenced (their buffers and
  in_memory.InMemoryPart's columns) back to the system when training ends.
  glibc keeps freed small allocations for the process: after run_fn on
  900k records, 1.0 GiB until malloc_trim (docs/benchmark_data.md, the
  cache's release). A garbage collection first frees what only reference
  cycles still hold. Elsewhere than glibc, the allocator decides."""
  gc.collect()
  try:
    ctypes.CDLL("libc.so.6").malloc_trim(0)
  except (OSError, AttributeError):
    pass


def sampling_record(rate: float, click_rate: float,
                    batch_size: int) -> Dict[str, Any]:
  """What negative sampling at `rate` does to training, and a warning when
  its weights make training unstable.

  The rule: a kept non-click weighs 1 / rate; when that is more than the
  clicks a training batch holds on average (batch_size times the kept
  click share, c / (c + rate (1 - c)) at click rate c), ONE non-click
  outweighs all the batch's clicks, and the gradient of a step hangs on
  which few non-clicks the hash kept. Also recorded: the batch's effective
  sample size (sum w)^2 / sum w^2 as a share of the batch (1 unweighted).
  """
  c = min(max(click_rate, 1e-9), 1 - 1e-9)
  kept_click_share = c / (c + rate * (1 - c))
  clicks_per_batch = batch_size * kept_click_share
  weight = 1.0 / rate
  effective = (kept_click_share + (1 - kept_click_share) * weight) ** 2 / (
      kept_click_share + (1 - kept_click_share) * weight ** 2)
  warning = None
  if weight > clicks_per_batch:
    warning = (f"negative sampling rate {rate} weighs a kept non-click "
               f"{weight:.4g}x, more than the {clicks_per_batch:.1f} clicks "
               f"of an average batch of {batch_size}: one non-click "
               "outweighs the batch's clicks and training is unstable; "
               "raise --negative-sampling-rate or --batch-size")
  return {"rate": rate, "non_click_weight": weight,
          "kept_click_share": kept_click_share,
          "clicks_per_batch": clicks_per_batch,
          "effective_batch_share": effective, "warning": warning}


def training_part(train_files: List[str],
                  tf_transform_output: tft.TFTransformOutput, label: str,
                  batch_size: int, buckets: int, negative_sampling_rate: float,
                  seed: Optional[int],
                  in_memory: Optional[in_memory_lib.InMemoryPart] = None
                 ) -> tf.data.Dataset:
  """The shuffled training part of the train split (TrainingData.train):
  from `in_memory` when the part is held there, else read from the files.
  One definition for training_data and each replica's own shuffle."""
  if in_memory is not None:
    return in_memory.batches(batch_size, shuffle=True, seed=seed)
  return make_dataset(train_files, tf_transform_output, label, batch_size,
                      shuffle=True, seed=seed, part="train", buckets=buckets,
                      negative_sampling_rate=negative_sampling_rate)


def hold_split(train_files: List[str],
               tf_transform_output: tft.TFTransformOutput, label: str,
               negative_sampling_rate: float = NO_SAMPLING,
               keep_in: Optional[str] = None) -> HeldSplit:
  """One pass over the split counts both parts (split_stats). Each part
  that fits (in_memory.memory_fits; the validation slice first, it is at
  most MAX_VALIDATION_EXAMPLES) is then parsed and transformed once and
  held in memory (in_memory.load_in_memory): epochs, validations and the
  bias refit gather from it.

  `keep_in`: a local directory that keeps the held split between
  processes (kept_split): read back from it when it was kept from these
  files, this Transform output, label and rate by this code, with the
  parts this machine holds; else read from the files and kept there (3 s
  for 3.1 GB at 8.8M Criteo rows). A remote directory (gs://) keeps
  nothing: the parts are written with local file calls.
  """
  rate = negative_sampling_rate
  if keep_in and "://" in keep_in:
    keep_in = None
  row_bytes = in_memory_lib.transformed_row_bytes(tf_transform_output, rate < 1)

  def fits(rows: int) -> bool:
    return in_memory_lib.memory_fits(rows, row_bytes,
                                     psutil.virtual_memory().total)

  def part_dataset(part: str, buckets: int) -> tf.data.Dataset:
    return make_dataset(
        train_files, tf_transform_output, label, in_memory_lib.LOAD_BATCH,
        shuffle=False, part=part, buckets=buckets,
        negative_sampling_rate=rate)

  inputs = None
  if keep_in:
    inputs = kept_split.split_inputs(
        train_files, tf_transform_output.transform_savedmodel_dir, label,
        rate, [__file__, in_memory_lib.__file__])
    kept = kept_split.read_kept(
        keep_in, inputs, fits,
        lambda part, buckets: part_dataset(part, buckets).element_spec)
    if kept is not None:
      return HeldSplit(**kept)
  stats = split_stats(train_files, tf_transform_output.raw_feature_spec(),
                      label, rate)
  split_examples = int(stats.records.sum())
  buckets = validation_buckets(split_examples)
  train_examples, click_rate = stats.label_stats("train", buckets)
  validation_examples = stats.label_stats("validation", buckets)[0]
  if validation_examples == 0 or train_examples == 0:
    raise ValueError(f"the train split's {split_examples} examples are too "
                     "few to hold out a validation slice for early stopping; "
                     "give more data")

  def held(part: str, rows: int) -> Optional[in_memory_lib.InMemoryPart]:
    return (in_memory_lib.load_in_memory(part_dataset(part, buckets), rows)
            if fits(rows) else None)

  validation = held("validation", validation_examples)
  split = HeldSplit(train_examples, validation_examples, click_rate, buckets,
                    in_memory=held("train", train_examples),
                    validation_in_memory=validation)
  if keep_in:
    kept_split.keep_split({field.name: getattr(split, field.name)
                           for field in dataclasses.fields(split)},
                          keep_in, inputs)
  return split


def training_data(train_files: List[str],
                  tf_transform_output: tft.TFTransformOutput, label: str,
                  batch_size: int, seed: Optional[int] = None,
                  negative_sampling_rate: float = NO_SAMPLING,
                  held: Optional[HeldSplit] = None) -> TrainingData:
  """The training part and the validation slice of the train split
  (`seed`: the training part's shuffle), batched.

  Negative sampling (rate below 1) applies to both parts, with the same
  weights: the weighted validation log loss estimates the unsampled one,
  so early stopping and the bias refit judge the objective training
  minimises, at the sampled cost. The eval split is never sampled: TFMA
  (the Evaluator, the study) scores the unsampled eval examples without
  weights, the distribution the model serves.

  `held`: hold_split's of these files at this rate, read once for several
  calls (the study's runs); None: read here. A part not held in memory is
  read from the files every epoch (make_dataset).
  """
  if seed is not None:
    # tf.data pairs a shuffle's seed with TensorFlow's global seed: set it
    # too, or the order would hang on what ran before in the process.
    tf.random.set_seed(seed)
  rate = negative_sampling_rate
  if held is None:
    held = hold_split(train_files, tf_transform_output, label, rate)
  sampling = {}
  if rate < 1:
    sampling = sampling_record(rate, held.click_rate, batch_size)
    if sampling["warning"]:
      logging.warning("%s", sampling["warning"])
  buckets = held.validation_buckets
  validation = held.validation_in_memory
  return TrainingData(
      **{field.name: getattr(held, field.name)
         for field in dataclasses.fields(HeldSplit)},
      train=training_part(train_files, tf_transform_output, label,
                          batch_size, buckets, rate, seed, held.in_memory),
      validation=(validation.batches(batch_size, shuffle=False)
                  if validation is not None else
                  make_dataset(train_files, tf_transform_output, label,
                               batch_size, shuffle=False, part="validation",
                               buckets=buckets, negative_sampling_rate=rate)),
      negative_sampling=sampling)
