"""The tf.Transform preprocessing_fn and readers of what it writes.

TFX Transform analyses the train split and transforms train and eval with the
result, so every vocabulary (and its stored frequencies) is a training-set
statistic. The output contract is in the ``trainer_module.features``
docstring. Each analyzer costs a fixed pipeline overhead (~2 s, and a Beam
stage per analyzer), so the dense counts share ONE min/max analyzer (log1p,
then scaled to [0, 1]) and every categorical field's vocabulary (and that
of each count's log-squared bucket, the logistic regression's view of the
counts: count_bucket_tokens) comes from ONE analyzer (FieldVocabularies,
tensorflow/transform#180) that counts (field, token) pairs in one pass, in
Arrow inside one Beam combiner (not one Beam element per pair, as
tft.vocabulary does), and writes one vocabulary file per field in
tf.Transform's own format ('count token' lines, most frequent first).

Missing values: the curated schemas have no fixed ``shape``, so every raw
feature arrives as a SparseTensor that may have no value for a row (Criteo has
many empty fields; a serving request may omit any feature). Missing
categoricals become the empty token, which tf.Transform never puts in a
vocabulary, so they land in the OOV bucket with the rare ids.
"""

import os
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from absl import logging
import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import tensorflow as tf
import tensorflow_transform as tft
from tensorflow_transform import analyzers as tft_analyzers
from tensorflow_transform import tf_utils
from tensorflow_transform.beam import experimental as tft_beam_experimental

from trainer_module import features

# Sakamoto's day-of-week offsets by month; the formula's 0 is Sunday.
_MONTH_OFFSETS = (0, 3, 2, 5, 0, 3, 5, 1, 4, 6, 2, 4)
_WEEKDAY_TOKENS = ("Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat")

# What tf.Transform writes (count 1) when a vocabulary would be empty, e.g.
# every value of a field is below the frequency threshold.
_EMPTY_VOCABULARY_TOKEN = tft_analyzers.get_empy_vocabulary_dummy_value(
    tf.string)[1]


def dataset_config(custom_config: Optional[Mapping[str, Any]]
                  ) -> Tuple[features.DatasetSpec, int]:
  """The dataset spec and vocabulary frequency threshold of a custom_config.

  Args:
    custom_config: Transform's custom_config: 'dataset' ('criteo'|'avazu') and
      optional 'min_frequency' (int >= 1, default the spec's).

  Returns:
    (spec, min_frequency).

  Raises:
    ValueError: if a key is missing or has a bad value.
  """
  if not custom_config or "dataset" not in custom_config:
    raise ValueError("Transform custom_config needs a 'dataset' key "
                     f"({sorted(features.DATASETS)}); got {custom_config!r}")
  spec = features.get_spec(custom_config["dataset"])
  min_frequency = custom_config.get("min_frequency", spec.min_frequency)
  if (isinstance(min_frequency, bool) or not isinstance(min_frequency, int) or
      min_frequency < 1):
    raise ValueError("custom_config['min_frequency'] must be an int >= 1; "
                     f"got {min_frequency!r}")
  return spec, min_frequency


def _to_dense_vector(x: tf.SparseTensor, default_value: Any) -> tf.Tensor:
  """[batch] values of a single-valued feature; absent values -> default."""
  return tf.reshape(
      tft.sparse_tensor_to_dense_with_shape(x, [None, 1], default_value), [-1])


def _to_dense_tokens(x: tf.SparseTensor) -> tf.Tensor:
  """[batch] string tokens of a categorical feature; absent -> ''."""
  if x.dtype != tf.string:
    x = tf.sparse.map_values(tf.strings.as_string, x)
  return _to_dense_vector(x, "")


def log1p_counts(counts: tf.Tensor) -> tf.Tensor:
  """float32 log1p(max(count, 0)) of integer count features.

  The Criteo counts are heavy-tailed (most values are small, a few reach
  millions), so log1p gives them a usable scale; the preprocessing_fn then
  min-max scales the logs to [0, 1]. Negative values are rare sentinel-like
  codes (I2 has -1..-3) and are clipped to 0. The CowClip reference min-max
  scaled the raw counts; one outlier in the training data then squashes every
  other value towards 0, which the log prevents.

  Args:
    counts: integer (or float) tensor of raw counts.

  Returns:
    float32 tensor of the same shape.
  """
  return tf.math.log1p(tf.maximum(tf.cast(counts, tf.float32), 0.0))


def count_bucket_tokens(counts: tf.Tensor) -> tf.Tensor:
  """The log-squared bucket token of every integer count.

  A count x > 2 is the bucket 'b<floor(ln(x)^2)>', any other (0, 1, 2,
  the negative codes) its own value 'v<x>': the Criteo winners' transform
  (and docs/scripts/lr_baseline_ab.py's), under which one weight per bucket lets a
  linear model follow any shape of a count's effect, which one weight on
  log1p(x) cannot. In float64, so a count on a bucket boundary falls where
  NumPy's float64 puts it.

  Args:
    counts: int64 tensor of raw counts.

  Returns:
    string tensor of the same shape.
  """
  counts = tf.cast(counts, tf.int64)
  logs = tf.math.log(tf.cast(tf.maximum(counts, 1), tf.float64))
  buckets = tf.cast(tf.floor(tf.square(logs)), tf.int64)
  return tf.where(counts > 2,
                  tf.strings.join(["b", tf.strings.as_string(buckets)]),
                  tf.strings.join(["v", tf.strings.as_string(counts)]))


def time_tokens(yymmddhh: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
  """Hour-of-day ('00'..'23') and weekday ('Mon'..'Sun') tokens of YYMMDDHH.

  Years are 20YY. Values that are not a YYMMDDHH (negative, month 13, hour
  24, the missing-value default -1, ...) give '' tokens, so they land in the
  OOV bucket instead of failing the whole Transform run.

  Args:
    yymmddhh: int64 tensor such as 14102100 (2014-10-21, 00h).

  Returns:
    (hour_of_day tokens, weekday tokens), string tensors of the input shape.
  """
  hour = yymmddhh % 100
  day = (yymmddhh // 100) % 100
  month = (yymmddhh // 10000) % 100
  valid = ((yymmddhh >= 0) & (yymmddhh < 100_000_000) & (hour <= 23) &
           (day >= 1) & (day <= 31) & (month >= 1) & (month <= 12))
  # Sakamoto's method: January and February count in the previous year.
  year = 2000 + yymmddhh // 1_000_000 - tf.cast(month < 3, tf.int64)
  offset = tf.gather(tf.constant(_MONTH_OFFSETS, tf.int64),
                     tf.clip_by_value(month - 1, 0, 11))
  weekday = (year + year // 4 - year // 100 + year // 400 + offset + day) % 7
  empty = tf.fill(tf.shape(yymmddhh), "")
  hour_tokens = tf.where(valid, tf.strings.as_string(hour, width=2, fill="0"),
                         empty)
  weekday_tokens = tf.where(valid, tf.gather(_WEEKDAY_TOKENS, weekday), empty)
  return hour_tokens, weekday_tokens


def _raw_input(inputs: Mapping[str, tf.SparseTensor], name: str,
               spec: features.DatasetSpec) -> tf.SparseTensor:
  """inputs[name], checked to be what the curated schema gives."""
  if name not in inputs:
    raise ValueError(f"{spec.name} preprocessing_fn: raw feature {name!r} is "
                     f"not in the inputs ({sorted(inputs)}); does the schema "
                     "match trainer_module/features.py?")
  if not isinstance(inputs[name], tf.SparseTensor):
    raise TypeError(f"{spec.name} preprocessing_fn: raw feature {name!r} is a "
                    f"{type(inputs[name]).__name__}, expected a SparseTensor; "
                    "the schema must not give it a fixed shape")
  return inputs[name]


class TokenCounts:
  """Counts of (field, token) pairs as an Arrow table, compacted lazily.

  Every added table has unique (field, token) keys (a hash aggregation's
  output). They wait in `pending` until they outnumber the compacted rows
  (or COMPACT_ROWS); then one hash aggregation folds them in. A pair takes
  its token's bytes plus 16 (field, count, offset).
  """
  COMPACT_ROWS = 1 << 20
  KEYS = ("field", "token")

  def __init__(self):
    self.compacted = pa.table({"field": pa.array([], pa.int32()),
                               "token": pa.array([], pa.binary()),
                               "count": pa.array([], pa.int64())})
    self.pending: List[pa.Table] = []
    self.pending_rows = 0

  def add(self, counts: pa.Table) -> "TokenCounts":
    self.pending.append(counts)
    self.pending_rows += counts.num_rows
    if self.pending_rows >= max(self.compacted.num_rows, self.COMPACT_ROWS):
      self.compact()
    return self

  def compact(self) -> pa.Table:
    if len(self.pending) == 1 and not self.compacted.num_rows:
      # Its keys are unique already. Beam merges the one accumulator of the
      # in-memory runner into an empty one at the end: aggregating it again
      # there took the full-size run's peak to 4.79 GiB
      # (docs/benchmark_data.md).
      self.compacted = self.pending[0]
    elif self.pending:
      summed = pa.concat_tables([self.compacted] + self.pending).group_by(
          list(self.KEYS)).aggregate([("count", "sum")])
      self.compacted = pa.table({
          "field": summed["field"], "token": summed["token"],
          "count": summed["count_sum"]})
    self.pending, self.pending_rows = [], 0
    return self.compacted


def batch_token_counts(tokens: np.ndarray) -> pa.Table:
  """(field, token, count) of a [batch, fields] token array; '' dropped."""
  batch_size, num_fields = tokens.shape
  table = pa.table({
      "field": np.tile(np.arange(num_fields, dtype=np.int32), batch_size),
      "token": pa.array(tokens.ravel(), pa.binary())})
  table = table.filter(pc.not_equal(table["token"], b""))
  counted = table.group_by(list(TokenCounts.KEYS)).aggregate(
      [("field", "count")])
  return pa.table({"field": counted["field"], "token": counted["token"],
                   "count": counted["field_count"]})


class CountTokensFn(beam.CombineFn):
  """Sums (field, token) counts inside the combiner's accumulator.

  One Beam element per batch: emitting one per (field, token) per batch
  into CombinePerKey took half of Transform's time at 10M rows
  (docs/benchmark_data.md).
  """

  def create_accumulator(self) -> TokenCounts:
    return TokenCounts()

  def add_input(self, accumulator: TokenCounts,
                batch: Tuple[np.ndarray]) -> TokenCounts:
    return accumulator.add(batch_token_counts(batch[0]))

  def merge_accumulators(self, accumulators) -> TokenCounts:
    merged = TokenCounts()
    for accumulator in accumulators:
      merged.add(accumulator.compact())
    return merged

  def compact(self, accumulator: TokenCounts) -> TokenCounts:
    accumulator.compact()
    return accumulator

  def extract_output(self, accumulator: TokenCounts) -> pa.Table:
    return accumulator.compact()


class FieldVocabularies(tft_beam_experimental.PTransformAnalyzer):
  """Beam side of the one vocabulary analyzer of every categorical field.

  Input: batches of [batch, fields] string tokens (column i = fields[i]).
  Output: one PCollection per field holding the path of its vocabulary file:
  tokens seen at least min_frequency times, as 'count token' lines sorted by
  decreasing count then decreasing token (tft.vocabulary's order), the empty
  token (a missing value) excluded; a field without such tokens gets
  tf.Transform's one-line placeholder, as tft.vocabulary writes.
  """

  def __init__(self, fields: Sequence[str], min_frequency: int):
    super().__init__()
    self._fields = tuple(fields)
    self._min_frequency = min_frequency

  def _write_files(self, counts: pa.Table
                  ) -> Iterator[beam.pvalue.TaggedOutput]:
    kept = counts.filter(
        pc.greater_equal(counts["count"], self._min_frequency)).sort_by(
            [("field", "ascending"), ("count", "descending"),
             ("token", "descending")])
    logging.info("FieldVocabularies: %d distinct (field, token) pairs "
                 "counted, %d seen at least %d times kept", counts.num_rows,
                 kept.num_rows, self._min_frequency)
    columns = kept["field"].to_numpy()
    starts = np.searchsorted(columns, np.arange(len(self._fields) + 1))
    tf.io.gfile.makedirs(self.base_temp_dir)
    for column, field in enumerate(self._fields):
      rows = kept.slice(starts[column], starts[column + 1] - starts[column])
      entries = zip(rows["count"].to_pylist(), rows["token"].to_pylist())
      lines = b"".join(b"%d %s\n" % entry for entry in entries) or (
          b"1 %s\n" % _EMPTY_VOCABULARY_TOKEN)
      path = os.path.join(self.base_temp_dir, features.vocabulary_name(field))
      with tf.io.gfile.GFile(path, "wb") as f:
        f.write(lines)
      yield beam.pvalue.TaggedOutput(field, np.array(path.encode()))

  def expand(self, batches: beam.PCollection) -> Tuple[beam.PCollection]:
    files = (
        batches
        | "CountTokens" >> beam.CombineGlobally(CountTokensFn())
        | "WriteFiles" >> beam.FlatMap(self._write_files).with_outputs(
            *self._fields))
    return tuple(files[field] for field in self._fields)


def _frequency_file_lookup(tokens: tf.Tensor, vocabulary_path: tf.Tensor
                          ) -> Tuple[tf.Tensor, tf.Tensor]:
  """(ids, table size) of tokens in a 'count token' vocabulary file."""
  table = tf.lookup.StaticVocabularyTable(
      tf.lookup.TextFileInitializer(
          vocabulary_path, key_dtype=tf.string, key_index=1,
          value_dtype=tf.int64,
          value_index=tf.lookup.TextFileIndex.LINE_NUMBER, delimiter=" "),
      num_oov_buckets=features.NUM_OOV_BUCKETS)
  return table.lookup(tokens), table.size()


def _apply_field_vocabularies(tokens: Mapping[str, tf.Tensor],
                              min_frequency: int) -> Dict[str, tf.Tensor]:
  """Ids of every field's tokens from ONE FieldVocabularies analyzer."""
  fields = list(tokens)
  # Spaces would split the 'count token' lines (as tft.vocabulary does).
  stacked = tf_utils.maybe_format_vocabulary_input(
      tf.stack([tokens[field] for field in fields], axis=1))
  paths = tft.experimental.ptransform_analyzer(
      inputs=[stacked],
      ptransform=FieldVocabularies(fields, min_frequency),
      output_dtypes=[tf.string] * len(fields),
      output_shapes=[[]] * len(fields),
      # Each file's content while the analysis has not run yet.
      output_asset_default_values=[b"1 " + _EMPTY_VOCABULARY_TOKEN] *
      len(fields),
      name="field_vocabularies")
  # num_oov_buckets only sets the schema's id range: the lookup has them.
  return {field: tft.apply_vocabulary(
      stacked[:, i], path, num_oov_buckets=features.NUM_OOV_BUCKETS,
      lookup_fn=_frequency_file_lookup)
          for i, (field, path) in enumerate(zip(fields, paths))}


def preprocessing_fn(inputs: Mapping[str, tf.SparseTensor],
                     custom_config: Mapping[str, Any]) -> Dict[str, tf.Tensor]:
  """Maps raw features to the transformed-feature contract of features.py.

  Args:
    inputs: raw features parsed with the curated schema (SparseTensors). The
      label may be absent (serving); it is then not emitted.
    custom_config: see `dataset_config`.

  Returns:
    {categorical field: int64 [batch] ids, dense field: float32 [batch],
     label: float32 [batch] (if given)}.
  """
  spec, min_frequency = dataset_config(custom_config)
  outputs = {}
  if spec.dense:
    # log1p tames the heavy tail; scaling to [0, 1] (train-split min/max of
    # the log counts, all fields in ONE analyzer) keeps the initial logits
    # of the linear and DNN parts near 0, as the reference's [0, 1] inputs
    # did. A serving value beyond the training max maps a little above 1.
    logs = tf.stack([
        log1p_counts(_to_dense_vector(_raw_input(inputs, name, spec), 0))
        for name in spec.dense], axis=1)
    scaled = tft.scale_to_0_1(logs, elementwise=True)
    for i, name in enumerate(spec.dense):
      outputs[name] = scaled[:, i]

  tokens = {}
  for name in spec.int_categorical + spec.str_categorical:
    tokens[name] = _to_dense_tokens(_raw_input(inputs, name, spec))
  for name, bucket in zip(spec.dense, spec.bucket_features):
    # A missing count is '', the OOV bucket's own row among so few buckets.
    tokens[bucket] = _to_dense_tokens(tf.sparse.map_values(
        count_bucket_tokens, _raw_input(inputs, name, spec)))
  if spec.time_field:
    tokens[features.HOUR_OF_DAY], tokens[features.WEEKDAY] = time_tokens(
        _to_dense_vector(_raw_input(inputs, spec.time_field, spec), -1))
  outputs.update(_apply_field_vocabularies(
      {name: tokens[name] for name in spec.linear_features}, min_frequency))

  if spec.label in inputs:
    outputs[spec.label] = tf.cast(
        _to_dense_vector(_raw_input(inputs, spec.label, spec), 0), tf.float32)
  return outputs


def vocabulary_sizes(tf_transform_output: tft.TFTransformOutput,
                     spec: features.DatasetSpec,
                     linear: bool = False) -> Dict[str, int]:
  """Embedding table sizes: vocabulary size + NUM_OOV_BUCKETS per field of
  spec.categorical_features (the models'), or with `linear` of
  spec.linear_features (the logistic regression's)."""
  return {
      name: tf_transform_output.vocabulary_size_by_name(
          features.vocabulary_name(name)) + features.NUM_OOV_BUCKETS
      for name in (spec.linear_features if linear
                   else spec.categorical_features)
  }


def vocabulary_frequencies(tf_transform_output: tft.TFTransformOutput,
                           field: str) -> np.ndarray:
  """Training-set count of every in-vocabulary id of a field.

  Args:
    tf_transform_output: the Transform output.
    field: a name in spec.categorical_features.

  Returns:
    int64 array: element i is the train-split count of the token with id i
    (ids are sorted by decreasing count). OOV ids are not included.

  Raises:
    ValueError: if the vocabulary is missing or a line is malformed.
  """
  name = features.vocabulary_name(field)
  path = tf_transform_output.vocabulary_file_by_name(name)
  if not path:
    raise ValueError(f"no vocabulary {name!r} in the Transform output "
                     f"{tf_transform_output.transform_savedmodel_dir}")
  counts = []
  with tf.io.gfile.GFile(path, "rb") as f:
    for line_number, line in enumerate(f, start=1):
      count, _, token = line.rstrip(b"\n").partition(b" ")
      if not count.isdigit() or not token:
        raise ValueError(f"{path}:{line_number}: expected 'count token', got "
                         f"{line!r}")
      counts.append(0 if token == _EMPTY_VOCABULARY_TOKEN else int(count))
  return np.asarray(counts, dtype=np.int64)
