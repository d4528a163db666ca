"""TFX Trainer entry point: `run_fn`, `train`, the input pipeline, the export.

`train` is the one training path (run_fn, the tuner's trials, the study and
the benchmark call it): it composes the pure parts (scaling rule, models,
CowClip training step) on the Transform output read with tf.data. run_fn
reads the typed settings from the Trainer's custom_config
(settings.TrainerSettings), trains the model and its logistic-regression
baseline, records the hyperparameters actually used, and exports a
SavedModel whose `serving_default` signature takes serialized RAW
tf.Examples (the Transform graph is attached) and returns the click
probability.
"""

import dataclasses
import json
import math
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from absl import logging
import keras
import numpy as np
import psutil
import tensorflow as tf
import tensorflow_transform as tft

from trainer_module import contract
from trainer_module import features
from trainer_module import hparams
from trainer_module import models
from trainer_module import preprocessing
from trainer_module import scaling
from trainer_module import settings as settings_lib
from trainer_module import training
from trainer_module.settings import TrainerSettings

# The validation slice of early stopping: records of the TRAIN split whose
# hash (of the serialized record) falls in the first buckets of
# VALIDATION_BUCKETS. The eval split stays unseen until the Evaluator.
VALIDATION_BUCKETS = 1000
# Share of the train split held out for validation, capped at
# MAX_VALIDATION_EXAMPLES: enough for a stable log loss, and cheap to score
# every epoch on big data.
VALIDATION_FRACTION = 0.1
MAX_VALIDATION_EXAMPLES = 200_000
# Negative down-sampling: a keyed SipHash of the serialized record in
# SAMPLING_BUCKETS buckets decides which non-clicks are kept. Keyed, so it is
# independent of the validation slice's fingerprint (the same hash would keep
# the non-clicks of the buckets next to the slice's).
SAMPLING_BUCKETS = 1_000_000
SAMPLING_KEY = (0x5EED, 0xC11C)
# Records per element read from a file, counted per vectorised step
# (split_stats), selected per step (select_records) and cached per element
# (make_dataset). Interleaving files record by record cost ~20 us of CPU per
# record, 13x the read itself; chunks 8x larger took 0.45 GiB more memory
# (docs/benchmark_data.md).
_RECORD_CHUNK = 8192
# make_dataset's cache holds the training part and the validation slice in
# memory when their serialized records plus CACHE_ROW_OVERHEAD bytes each (a
# tf.string's header and allocation, measured in
# docs/production_smelu_sampling.md) take at most CACHE_MEMORY_SHARE of the
# free memory; else every pass reads the files, as without a cache.
CACHE_MEMORY_SHARE = 0.25
CACHE_ROW_OVERHEAD = 128


def validation_buckets(train_split_examples: int) -> int:
  """How many of the VALIDATION_BUCKETS hash buckets form the validation
  slice of a train split of this size (at least one)."""
  share = min(VALIDATION_FRACTION,
              MAX_VALIDATION_EXAMPLES / max(train_split_examples, 1))
  return max(1, int(share * VALIDATION_BUCKETS))


def in_validation_slice(serialized: tf.Tensor, buckets: int) -> tf.Tensor:
  """Whether serialized records belong to the validation slice.

  A fingerprint of the record's bytes decides, so the carve is the same in
  every run, process and tf.data order, and identical records (duplicated
  log lines) fall on the same side.
  """
  return tf.strings.to_hash_bucket_fast(serialized,
                                        VALIDATION_BUCKETS) < buckets


def _parse_labels(serialized, label):
  """float32 labels of raw examples (ExampleGen's: an int every row has)."""
  return tf.cast(tf.io.parse_example(
      serialized, {label: tf.io.FixedLenFeature([], tf.int64)})[label],
                 tf.float32)


def kept_by_sampling(serialized: tf.Tensor, labels: tf.Tensor,
                     rate: float) -> tf.Tensor:
  """Whether negative down-sampling at `rate` keeps these records: every
  click, and the non-clicks whose keyed hash falls in the first
  round(rate * SAMPLING_BUCKETS) buckets (the same records in every run)."""
  buckets = tf.strings.to_hash_bucket_strong(serialized, SAMPLING_BUCKETS,
                                             SAMPLING_KEY)
  return (tf.reshape(labels, [-1]) > 0.5) | (
      buckets < round(rate * SAMPLING_BUCKETS))


def importance_weights(labels: tf.Tensor, rate: float) -> tf.Tensor:
  """1 for a click, 1 / rate for a kept non-click (float32, labels' shape):
  each kept non-click stands for the 1 / rate non-clicks sampling drew it
  from, so weighted sums estimate the unsampled ones."""
  labels = tf.cast(labels, tf.float32)
  return tf.where(labels > 0.5, tf.ones_like(labels),
                  tf.fill(tf.shape(labels), 1.0 / rate))


def _check_part(part: str) -> None:
  if part not in ("all", "train", "validation"):
    raise ValueError(f"unknown part {part!r}: 'all', 'train' or "
                     "'validation'")


def select_records(serialized: tf.Tensor, label: str, part: str,
                   buckets: int, rate: float) -> tf.Tensor:
  """Of a chunk of serialized records, in their order, those of `part`
  ('all'; 'train' or 'validation': the validation slice's `buckets`, see
  in_validation_slice) that negative sampling at `rate` keeps
  (kept_by_sampling). Vectorised on the bytes: only the part's labels are
  parsed, and only below rate 1."""
  _check_part(part)
  if part != "all":
    in_slice = in_validation_slice(serialized, buckets)
    serialized = tf.boolean_mask(
        serialized, in_slice if part == "validation" else ~in_slice)
  if rate < 1:
    serialized = tf.boolean_mask(serialized, kept_by_sampling(
        serialized, _parse_labels(serialized, label), rate))
  return serialized


@dataclasses.dataclass(frozen=True)
class SplitStats:
  """Per hash bucket of the validation slice's fingerprint
  (in_validation_slice: VALIDATION_BUCKETS of them), what one pass over a
  split counted; the train and validation parts of any slice size are sums
  of buckets, so one pass answers every question about a part.

  Arrays of VALIDATION_BUCKETS float64:
    records: records of the bucket.
    kept: records negative sampling at `rate` keeps (= records at rate 1).
    clicks: the kept records' sum of labels.
    weight: the kept records' sum of importance_weights.
    kept_bytes: the kept records' serialized bytes (the cache's size).
  """
  rate: float
  records: np.ndarray
  kept: np.ndarray
  clicks: np.ndarray
  weight: np.ndarray
  kept_bytes: np.ndarray

  def part(self, name: str, buckets: int) -> slice:
    """The buckets of part `name` ('all', 'train', 'validation')."""
    _check_part(name)
    return {"all": slice(None), "train": slice(buckets, None),
            "validation": slice(0, buckets)}[name]

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
                   seed: int = 0) -> tf.data.Dataset:
  """Serialized records of ExampleGen's gzipped TFRecord `files`, in
  chunks of up to _RECORD_CHUNK records of one file, read from files in
  parallel (`shuffle`: in a shuffled file order, chunks in completion
  order)."""
  dataset = tf.data.Dataset.from_tensor_slices(files)
  if shuffle:
    dataset = dataset.shuffle(len(files), seed=seed)
  return dataset.interleave(
      lambda f: tf.data.TFRecordDataset(f, compression_type="GZIP").batch(
          _RECORD_CHUNK),
      num_parallel_calls=tf.data.AUTOTUNE, deterministic=not shuffle)


def split_stats(file_patterns: List[str], label: str,
                negative_sampling_rate: float = 1.0) -> SplitStats:
  """SplitStats of ExampleGen's gzipped TFRecords of raw examples, in one
  pass.

  Only the label is parsed, a chunk of records at a time: cheap next to
  training.
  """
  files = [f for p in file_patterns for f in tf.io.gfile.glob(p)]
  if not files:
    raise FileNotFoundError(f"no examples match {file_patterns}")
  rate = negative_sampling_rate

  def count(serialized):
    labels = _parse_labels(serialized, label)
    kept = tf.cast(kept_by_sampling(serialized, labels, rate) if rate < 1
                   else tf.ones_like(labels, tf.bool), tf.float64)
    columns = tf.stack([
        tf.ones_like(kept), kept, kept * tf.cast(labels, tf.float64),
        kept * tf.cast(importance_weights(labels, rate), tf.float64),
        kept * tf.cast(tf.strings.length(serialized), tf.float64)], axis=1)
    return tf.math.unsorted_segment_sum(
        columns, tf.strings.to_hash_bucket_fast(serialized,
                                                VALIDATION_BUCKETS),
        VALIDATION_BUCKETS)

  totals = _record_chunks(files).map(
      count, num_parallel_calls=tf.data.AUTOTUNE).reduce(
          tf.zeros([VALIDATION_BUCKETS, 5], tf.float64), tf.add).numpy()
  return SplitStats(rate, *totals.T)


def make_dataset(file_patterns: List[str],
                 tf_transform_output: tft.TFTransformOutput,
                 label: str,
                 batch_size: int,
                 shuffle: bool,
                 seed: int = 0,
                 part: str = "all",
                 buckets: int = 0,
                 negative_sampling_rate: float = 1.0,
                 cache: bool = False) -> tf.data.Dataset:
  """(features, label) batches of transformed features from ExampleGen's
  raw examples.

  Transform does not write transformed examples (materialize=False: Beam's
  per-record Python made that its slowest part, docs/benchmark_data.md);
  each batch is parsed with the raw schema and goes through the Transform
  graph here, as serving requests do. Records are batched BEFORE parsing
  (one parse_example and one graph call per batch instead of one per
  record), and files are read in parallel in chunks (_record_chunks), so
  input is not the bottleneck.
  `part` and `buckets` keep the train or validation part of the records,
  and a negative_sampling_rate below 1 keeps the records sampling keeps
  (select_records: on the serialized bytes, in chunks of _RECORD_CHUNK,
  before any parsing of the features); then the batches are
  (features, label, importance weight). `cache` keeps the selected
  serialized records in memory after the first full pass, so later passes
  (epochs, validations, the bias refit) neither read, decompress nor hash
  the split again; they still shuffle, parse and transform.
  """
  files = [f for p in file_patterns for f in tf.io.gfile.glob(p)]
  raw_spec = tf_transform_output.raw_feature_spec()
  transform = tf_transform_output.transform_features_layer()
  dataset = _record_chunks(files, shuffle, seed)
  rate = negative_sampling_rate
  if part != "all" or rate < 1 or cache:
    dataset = dataset.map(
        lambda chunk: select_records(chunk, label, part, buckets, rate),
        num_parallel_calls=tf.data.AUTOTUNE)
    if cache:
      dataset = dataset.cache()
  dataset = dataset.unbatch()
  if shuffle:
    dataset = dataset.shuffle(max(16 * batch_size, 10_000), seed=seed)
  dataset = dataset.batch(batch_size)

  def parse(serialized):
    parsed = dict(transform(tf.io.parse_example(serialized, raw_spec)))
    labels = parsed.pop(label)
    if rate < 1:
      return parsed, labels, importance_weights(labels, rate)
    return parsed, labels

  return dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE).prefetch(
      tf.data.AUTOTUNE)


def frequency_buckets(typical_counts: tf.Tensor,
                      thresholds: Sequence[int]) -> tf.Tensor:
  """contract.FREQUENCY_BUCKETS names of [batch] training-set id counts.

  Args:
    typical_counts: float [batch] counts (see ServingModule.slicing_features).
    thresholds: (rare/medium, medium/frequent) boundaries; a count equal to
      a boundary falls in the higher bucket.
  """
  index = tf.zeros_like(typical_counts, tf.int32)
  for threshold in thresholds:
    index += tf.cast(typical_counts >= threshold, tf.int32)
  return tf.gather(tf.constant(contract.FREQUENCY_BUCKETS), index)


def serving_outputs(probabilities: Sequence[tf.Tensor],
                    baseline_probability: tf.Tensor,
                    push: str) -> Dict[str, tf.Tensor]:
  """The serving signature's outputs from the replicas' probabilities.

  contract.PREDICTION_KEY is the one replica's probability, or with
  several the mean of their probabilities (push "ensemble", the
  self-ensemble) or replica 0's (push "single"); each replica's is also
  returned under contract.replica_output(i). contract.LR_OUTPUT is the
  logistic-regression baseline's.
  """
  outputs = {contract.LR_OUTPUT: baseline_probability}
  if len(probabilities) > 1:
    outputs.update({contract.replica_output(i): p
                    for i, p in enumerate(probabilities)})
  outputs[contract.PREDICTION_KEY] = (
      tf.add_n(list(probabilities)) / len(probabilities)
      if push == "ensemble" else probabilities[0])
  return outputs


class ServingModule(tf.Module):
  """Raw serialized tf.Examples in, click probability out.

  Besides `serve`, `slicing_features` gives the Evaluator (TFMA
  preprocessing function) each example's id-frequency bucket, from the
  training-set counts of the Transform vocabularies: the slice that shows
  whether large-batch training hurt the rare ids.
  """

  def __init__(self, replicas: Sequence[keras.Model], baseline: keras.Model,
               tf_transform_output: tft.TFTransformOutput,
               spec: features.DatasetSpec, frequency_field: str,
               frequency_thresholds: Sequence[int],
               push: str = settings_lib.DEFAULT_PUSH):
    """`replicas`: the model's replicas (one without --replicas; see
    serve); `push`: settings.PUSH_MODES, what is served with replicas."""
    super().__init__()
    self.replicas = list(replicas)
    self._push = push
    self.baseline = baseline
    self.transform_layer = tf_transform_output.transform_features_layer()
    raw_spec = tf_transform_output.raw_feature_spec()
    raw_spec.pop(spec.label, None)
    self._raw_spec = raw_spec
    fields = (spec.categorical_features if frequency_field == "all"
              else (frequency_field,))
    # Count of every id, OOV rows (rare or unseen ids) included as 0.
    self.id_counts = {
        field: tf.Variable(np.concatenate([
            preprocessing.vocabulary_frequencies(tf_transform_output, field),
            np.zeros(features.NUM_OOV_BUCKETS, np.int64)]), trainable=False,
                           name=f"id_counts_{field}")
        for field in fields}
    self._frequency_thresholds = tuple(frequency_thresholds)

  def _transform(self, examples):
    return self.transform_layer(tf.io.parse_example(examples, self._raw_spec))

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string,
                                              name="examples")])
  def serve(self, examples):
    """The click probability and the baseline's; with replicas, each
    replica's too (contract.replica_output), and the served probability is
    their mean (push "ensemble") or replica 0's (push "single")."""
    transformed = self._transform(examples)
    return serving_outputs(
        [tf.sigmoid(replica(transformed, training=False))
         for replica in self.replicas],
        tf.sigmoid(self.baseline(transformed, training=False)), self._push)

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string,
                                              name="examples")])
  def slicing_features(self, examples):
    """{contract.ID_FREQUENCY: bucket}: by the geometric mean of the
    example's id counts over the fields (or the count in the one chosen
    field)."""
    transformed = self._transform(examples)
    log_counts = [
        tf.math.log1p(tf.cast(tf.gather(counts, tf.reshape(
            transformed[field], [-1])), tf.float32))
        for field, counts in sorted(self.id_counts.items())]
    typical = tf.math.expm1(tf.reduce_mean(tf.stack(log_counts), axis=0))
    return {contract.ID_FREQUENCY: frequency_buckets(
        typical, self._frequency_thresholds)}


def export_serving_model(replicas: Sequence[keras.Model],
                         baseline: keras.Model,
                         tf_transform_output: tft.TFTransformOutput,
                         settings: TrainerSettings, export_dir: str) -> None:
  """Saves the model's replicas (one without --replicas) and its logistic-
  regression baseline with the Transform graph as a SavedModel."""
  module = ServingModule(replicas, baseline, tf_transform_output, settings.spec,
                         settings.frequency_field,
                         settings.frequency_thresholds, settings.push)
  tf.saved_model.save(module, export_dir, signatures={
      "serving_default": module.serve,
      contract.SLICING_SIGNATURE: module.slicing_features})


def training_hparams(settings: TrainerSettings, tuned: Mapping[str, float],
                     train_examples: Optional[int] = None) -> Dict[str, Any]:
  """Base (auto, possibly tuned) and scaled hyperparameters, as recorded.

  The settings' auto_hparams that were not tuned are derived from
  `train_examples` (scaling.auto_base_hparams; not when it is None, e.g. to
  show a tuning result); tuned values replace the others.
  """
  tuned_base = {k: v for k, v in tuned.items() if k in hparams.BY_NAME}
  auto = [k for k in settings.auto_hparams
          if k not in tuned_base] if train_examples else []
  base = scaling.auto_base_hparams(
      settings.base_hparams, settings.reference_examples, train_examples,
      auto) if auto else dict(settings.base_hparams)
  base.update(tuned_base)
  scaled = scaling.scale_hparams(settings.scaling_rule, base,
                                 settings.base_batch_size,
                                 settings.batch_size)
  return {"rule": settings.scaling_rule,
          "auto": auto,
          "base_batch_size": settings.base_batch_size,
          "batch_size": settings.batch_size,
          "base": base,
          "scaled": scaled}


def model_options(settings: TrainerSettings,
                  tuned: Mapping[str, Any]) -> models.ModelOptions:
  """The configured ModelOptions with the tuned sizes among `tuned`."""
  options = settings.model_options
  sizes = {}
  if "embedding_dim" in tuned:
    sizes["embedding_dim"] = tuned["embedding_dim"]
  if "dnn_units" in tuned or "dnn_layers" in tuned:
    units = tuned.get("dnn_units", options.hidden_units[0])
    sizes["hidden_units"] = (units,) * tuned.get("dnn_layers",
                                                 len(options.hidden_units))
  return dataclasses.replace(options, **sizes)


def steps_per_epoch(train_examples: int, batch_size: int) -> int:
  """Training steps of one epoch: the last, partial batch is a step."""
  return math.ceil(train_examples / batch_size)


def build_and_compile(settings: TrainerSettings, tuned: Mapping[str, Any],
                      tf_transform_output: tft.TFTransformOutput,
                      train_examples: int, click_rate: float,
                      architecture: Optional[str] = None,
                      vocab_scale: int = 1
                     ) -> Tuple[models.CTRModel, Dict[str, Any]]:
  """The configured model, compiled with the scaled (tuned) hyperparameters.

  The first half of train(); KerasTuner calls it alone to build a trial's
  model (CtrHyperModel.build), then train() with that model.

  Args:
    settings: the Trainer's settings.
    tuned: KerasTuner values: base hyperparameters (at the base batch size;
      they replace settings.base_hparams before scaling) and
      search_space.MODEL_SIZE_KEYS. Other keys are ignored.
    tf_transform_output: the Transform output (vocabulary sizes).
    train_examples: training examples (the auto base hyperparameters and
      the steps per epoch, the warmup length, follow from it).
    click_rate: the training click rate. The global bias starts at its
      log-odds, so the model is calibrated from the first step instead of
      spending its early (warmup) steps learning the base rate: short runs
      otherwise end miscalibrated by 10-20%.
    architecture: a models.MODELS name instead of settings.model: the
      logistic-regression baseline (models.LOGISTIC_REGRESSION), trained
      with the same hyperparameters and without CowClip (it has no deep
      embeddings to clip).
    vocab_scale: tables this many times larger than the vocabularies (the
      benchmark's step cost against table size; the ids still index the
      first rows). 1 everywhere else.

  Returns:
    The model and the record of what it was built with: training_hparams
    plus vocab_sizes and model_options.
  """
  spec = settings.spec
  architecture = architecture or settings.model
  record = training_hparams(settings, tuned, train_examples)
  options = model_options(settings, tuned)
  vocab_sizes = {field: size * vocab_scale for field, size in
                 preprocessing.vocabulary_sizes(tf_transform_output,
                                                spec).items()}
  model = models.build_model(architecture, vocab_sizes, spec.dense, options)
  rate = min(max(click_rate, 1e-6), 1 - 1e-6)
  model.bias.assign([math.log(rate / (1 - rate))])
  training.compile_model(model, training.TrainingConfig(
      **record["scaled"],
      steps_per_epoch=steps_per_epoch(train_examples, settings.batch_size),
      cowclip=(settings.cowclip and
               architecture != models.LOGISTIC_REGRESSION),
      cowclip_variant=settings.cowclip_variant,
      embedding_update=settings.embedding_update,
      bias_constraints=(settings.bias_constraints if
                        architecture != models.LOGISTIC_REGRESSION else ()),
      bias_constraint_lr=settings.bias_constraint_lr))
  record.update(vocab_sizes=vocab_sizes, click_rate=click_rate,
                model_options=dataclasses.asdict(options))
  return model, record


def check_training_fits(vocab_sizes: Mapping[str, int], embedding_dim: int,
                        batch_size: int, train_examples: int,
                        available_bytes: int, replicas: int = 1) -> str:
  """Fails before training when the batch or the tables cannot fit.

  Returns a one-line summary of the table sizes for the log. The estimate
  counts the deep (d) and wide (1) tables with Adam's two moments, float32,
  once per replica (run_fn holds every replica until the export).
  """
  if train_examples <= 0:
    raise ValueError("the training split is empty: nothing to train on")
  if batch_size > train_examples:
    raise ValueError(f"batch size {batch_size} is larger than the "
                     f"{train_examples} training examples: lower --batch-size "
                     "or give more data")
  rows = sum(vocab_sizes.values())
  table_bytes = rows * (embedding_dim + 1) * 4 * 3 * replicas
  summary = (f"{len(vocab_sizes)} embedding tables, {rows:,} rows (each with "
             f"{features.NUM_OOV_BUCKETS} OOV bucket), ~{table_bytes / 2**20:,.0f}"
             " MiB with Adam state"
             + (f" for {replicas} replicas" if replicas > 1 else ""))
  if table_bytes > available_bytes:
    raise ValueError(f"{summary}: more than the {available_bytes / 2**20:,.0f}"
                     " MiB of free memory; raise --min-frequency to shrink "
                     "the vocabularies or lower --embedding-dim")
  return summary


@dataclasses.dataclass(frozen=True)
class TrainingData:
  """The train split, carved into the part trained on and the validation
  slice of early stopping (the eval split is not read: it is the
  Evaluator's honest test).

  Attributes:
    train: shuffled (features, label) batches of the training part.
    validation: (features, label) batches of the validation slice.
    train_examples: examples in the training part.
    validation_examples: examples in the validation slice.
    click_rate: click rate of the training part (importance-weighted
      under negative sampling: the unsampled rate's estimate).
    validation_buckets: the slice's hash buckets (validation_buckets).
    negative_sampling: {} without negative sampling; else the record of
      sampling_record (rate, weights, the instability warning).
    cached: whether the training part keeps its records in memory after
      its first pass (make_dataset's cache; cache_fits). The validation
      slice keeps them whenever it fits on its own.
  """
  train: tf.data.Dataset
  validation: tf.data.Dataset
  train_examples: int
  validation_examples: int
  click_rate: float
  validation_buckets: int
  negative_sampling: Mapping[str, Any] = dataclasses.field(
      default_factory=dict)
  cached: bool = False


def cache_fits(rows: int, serialized_bytes: int,
               available_bytes: int) -> bool:
  """Whether make_dataset's cache of these records fits the memory budget
  (CACHE_MEMORY_SHARE of the free memory, CACHE_ROW_OVERHEAD per row)."""
  return (serialized_bytes + rows * CACHE_ROW_OVERHEAD
          <= CACHE_MEMORY_SHARE * available_bytes)


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
                  seed: int, cache: bool = False) -> tf.data.Dataset:
  """The shuffled training part of the train split (TrainingData.train):
  one definition for training_data and each replica's own shuffle."""
  return make_dataset(train_files, tf_transform_output, label, batch_size,
                      shuffle=True, seed=seed, part="train", buckets=buckets,
                      negative_sampling_rate=negative_sampling_rate,
                      cache=cache)


def training_data(train_files: List[str],
                  tf_transform_output: tft.TFTransformOutput, label: str,
                  batch_size: int, seed: int = 0,
                  negative_sampling_rate: float = 1.0) -> TrainingData:
  """The training part and the validation slice of the train split
  (`seed`: the training part's shuffle).

  Negative sampling (rate below 1) applies to both parts, with the same
  weights: the weighted validation log loss estimates the unsampled one,
  so early stopping and the bias refit judge the objective training
  minimises, at the sampled cost. The eval split is never sampled: TFMA
  (the Evaluator, the study) scores the unsampled eval examples without
  weights, the distribution the model serves.

  One pass over the split counts both parts (split_stats); when the kept
  records fit (cache_fits), both parts are cached in memory, so epochs
  after the first read, decompress and hash only what sampling kept. When
  they do not, the validation slice (at most MAX_VALIDATION_EXAMPLES) is
  still cached on its own: else every validation and the bias refit would
  read the whole split again to find it.
  """
  rate = negative_sampling_rate
  stats = split_stats(train_files, label, rate)
  split_examples = int(stats.records.sum())
  buckets = validation_buckets(split_examples)
  train_examples, click_rate = stats.label_stats("train", buckets)
  validation_examples = stats.label_stats("validation", buckets)[0]
  if validation_examples == 0 or train_examples == 0:
    raise ValueError(f"the train split's {split_examples} examples are too "
                     "few to hold out a validation slice for early stopping; "
                     "give more data")
  sampling = {}
  if rate < 1:
    sampling = sampling_record(rate, click_rate, batch_size)
    if sampling["warning"]:
      logging.warning("%s", sampling["warning"])
  available = psutil.virtual_memory().available
  cache = cache_fits(int(stats.kept.sum()), int(stats.kept_bytes.sum()),
                     available)
  validation = stats.part("validation", buckets)
  cache_validation = cache or cache_fits(
      int(stats.kept[validation].sum()),
      int(stats.kept_bytes[validation].sum()), available)
  return TrainingData(
      train=training_part(train_files, tf_transform_output, label,
                          batch_size, buckets, rate, seed, cache),
      validation=make_dataset(train_files, tf_transform_output, label,
                              batch_size, shuffle=False, part="validation",
                              buckets=buckets, negative_sampling_rate=rate,
                              cache=cache_validation),
      train_examples=train_examples, validation_examples=validation_examples,
      click_rate=click_rate, validation_buckets=buckets,
      negative_sampling=sampling, cached=cache)


def fit(model: models.CTRModel, data: TrainingData, epochs: int,
        callbacks: Sequence[keras.callbacks.Callback] = (),
        verbose: Any = "auto", initial_epoch: int = 0,
        epoch_steps: Optional[int] = None) -> Dict[str, Any]:
  """Trains up to `epochs` epochs with early stopping on the validation
  slice; the model ends with its best epoch's weights, its bias refitted on
  that slice (training.recalibrate_bias).

  `initial_epoch` resumes (Hyperband's trials); `epoch_steps` caps the
  steps of an epoch (the benchmark's fixed step count; None: the whole
  training part).

  Returns:
    The record of the training: history (every epoch run), epochs_run and
    best_epoch (1-based) with its validation metrics, and the bias_shift.
  """
  stopping = training.early_stopping()
  history = model.fit(data.train, validation_data=data.validation,
                      epochs=epochs, initial_epoch=initial_epoch,
                      steps_per_epoch=epoch_steps, verbose=verbose,
                      callbacks=[*callbacks, stopping])
  curves = {k: [float(v) for v in vs] for k, vs in history.history.items()}
  # Index into this fit's epochs (Hyperband resumes at initial_epoch).
  best = max(stopping.best_epoch - initial_epoch, 0)
  return {"history": curves,
          "bias_shift": training.recalibrate_bias(model, data.validation),
          "epochs_run": len(curves.get("loss", [])),
          "best_epoch": best + 1,
          "best": {k: vs[best] for k, vs in curves.items()
                   if k.startswith("val_") and len(vs) > best}}


def train(settings: TrainerSettings, data: TrainingData,
          tf_transform_output: tft.TFTransformOutput,
          tuned: Optional[Mapping[str, Any]] = None, *,
          architecture: Optional[str] = None,
          model: Optional[models.CTRModel] = None,
          seed: Optional[int] = None,
          epochs: Optional[int] = None, initial_epoch: int = 0,
          epoch_steps: Optional[int] = None, vocab_scale: int = 1,
          callbacks: Sequence[keras.callbacks.Callback] = (),
          verbose: Any = "auto") -> Tuple[models.CTRModel, Dict[str, Any]]:
  """The one training path: run_fn, the tuner's trials, the study and the
  benchmark all train through it, on the Transform output.

  Builds the model (build_and_compile: the scaling rule maps the base, auto
  or tuned hyperparameters to the batch size; CowClip step), then fits it
  (fit: early stopping on the validation slice, best epoch kept, bias
  refitted).

  Args:
    settings: the Trainer's settings.
    data: the train split's training part and validation slice
      (training_data, at settings.batch_size).
    tf_transform_output: the Transform output.
    tuned: KerasTuner values (see build_and_compile); None: none.
    architecture: build this models.MODELS name instead of settings.model
      (the logistic-regression baseline).
    model: a model build_and_compile already made from these settings and
      `tuned` (KerasTuner builds a trial's model before fitting it); None:
      build it here.
    seed: seeds Python, NumPy and TensorFlow before building (the study's
      and the benchmark's repeatable runs); None: leave them.
    epochs: the most epochs (None: settings.epochs; Hyperband's rounds).
    initial_epoch, epoch_steps: see fit.
    vocab_scale: see build_and_compile.
    callbacks: extra Keras callbacks (the step timer, TensorBoard, the
      tuner's own).
    verbose: Keras' fit verbosity.

  Returns:
    The trained model and its record: build_and_compile's (when it built
    the model) updated with fit's.
  """
  if seed is not None:
    keras.utils.set_random_seed(seed)
  record = {}
  if model is None:
    model, record = build_and_compile(
        settings, tuned or {}, tf_transform_output, data.train_examples,
        data.click_rate, architecture, vocab_scale)
  record.update(fit(model, data, settings.epochs if epochs is None else epochs,
                    callbacks, verbose, initial_epoch, epoch_steps))
  if data.negative_sampling:
    record["negative_sampling"] = dict(data.negative_sampling)
  if model.bias_constraints is not None:
    record["bias_multipliers"] = model.bias_constraints.values()
  return model, record


def train_replicas(settings: TrainerSettings, data: TrainingData,
                   train_files: List[str],
                   tf_transform_output: tft.TFTransformOutput,
                   tuned: Mapping[str, Any], log_dir: Optional[str],
                   seed: Optional[int] = None, verbose: Any = "auto",
                   callbacks: Sequence[keras.callbacks.Callback] = ()
                  ) -> Tuple[List[models.CTRModel], Dict[str, Any]]:
  """settings.replicas models trained through train(), identically but for
  the seed: replica i is seeded with seed + i (initialisation) and reads the
  training part shuffled with that seed (data order), as two retrains
  differ.

  `seed` None (run_fn): replicas are seeded 0..N-1, and one replica (the
  default) trains unseeded, as before; the study gives its run's seed. One
  replica trains on `data` as given (its shuffle seeded by training_data).
  `log_dir`: TensorBoard logs (None: none); `callbacks`: more Keras
  callbacks, given to every replica's fit. The record is replica 0's; with
  replicas, "replicas" lists each one's seed, epochs and best validation
  metrics (the report's per-replica AUC).
  """
  count = settings.replicas
  replicas, records = [], []
  for index in range(count):
    replica_seed = None if seed is None and count == 1 else (
        (seed or 0) + index)
    replica_data = data if count == 1 else dataclasses.replace(
        data, train=training_part(
            train_files, tf_transform_output, settings.spec.label,
            settings.batch_size, data.validation_buckets,
            settings.negative_sampling_rate, replica_seed, data.cached))
    replica_callbacks = [training.ThroughputLogger(settings.batch_size),
                         *callbacks]
    if log_dir is not None:
      replica_callbacks.append(keras.callbacks.TensorBoard(log_dir=(
          log_dir if count == 1 else
          os.path.join(log_dir, contract.replica_output(index)))))
    model, record = train(
        settings, replica_data, tf_transform_output, tuned, seed=replica_seed,
        callbacks=replica_callbacks, verbose=verbose)
    replicas.append(model)
    records.append(record)
  record = records[0]
  if count > 1:
    record.update(push=settings.push, replicas=[
        {"seed": (seed or 0) + index, **{k: r[k] for k in (
            "epochs_run", "best_epoch", "best", "bias_shift")}}
        for index, r in enumerate(records)])
  return replicas, record


def run_fn(fn_args) -> None:
  """Trains the configured CTR model with CowClip and its logistic-
  regression baseline, and exports both in one SavedModel."""
  settings = TrainerSettings.from_custom_config(fn_args.custom_config)
  tf_transform_output = tft.TFTransformOutput(fn_args.transform_output)
  tuned = (fn_args.hyperparameters or {}).get("values", {})
  batch_size = settings.batch_size

  data = training_data(fn_args.train_files, tf_transform_output,
                       settings.spec.label, batch_size,
                       negative_sampling_rate=settings.negative_sampling_rate)
  logging.info("%s", check_training_fits(
      preprocessing.vocabulary_sizes(tf_transform_output, settings.spec),
      model_options(settings, tuned).embedding_dim, batch_size,
      data.train_examples, psutil.virtual_memory().available,
      settings.replicas))
  replicas, record = train_replicas(
      settings, data, fn_args.train_files, tf_transform_output, tuned,
      fn_args.model_run_dir)
  baseline, baseline_record = train(
      settings, data, tf_transform_output, tuned,
      architecture=models.LOGISTIC_REGRESSION)
  record.update(
      train_examples=data.train_examples,
      validation_examples=data.validation_examples,
      steps_per_epoch=steps_per_epoch(data.train_examples, batch_size),
      logistic_regression={k: baseline_record[k] for k in (
          "history", "epochs_run", "best_epoch", "best", "scaled")})
  export_serving_model(replicas, baseline, tf_transform_output, settings,
                       fn_args.serving_model_dir)
  for directory in (fn_args.model_run_dir, fn_args.serving_model_dir):
    with tf.io.gfile.GFile(os.path.join(directory, contract.TRAINING_RECORD),
                           "w") as f:
      json.dump(record, f, indent=2, sort_keys=True)
