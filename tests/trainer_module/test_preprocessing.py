"""Tests of trainer_module.preprocessing.

Fast tests trace the preprocessing_fn or run its pieces eagerly. The slow
tests run one real tf.Transform Beam analysis per dataset (shared by a
module fixture) on tf.Examples parsed with the curated schema, then transform
eval and serving inputs through the saved TFTransformOutput, the way TFX
Transform and the Trainer's serving signature do.
"""

import collections
import datetime
import functools
import json
import math
import os
from typing import Any, Dict, List, Mapping, Optional

import apache_beam as beam
import keras
import numpy as np
import pytest
from sklearn.metrics import roc_auc_score
import tensorflow as tf
import tensorflow_transform as tft
import tensorflow_transform.beam as tft_beam
from tfx.utils import io_utils
from tfx_bsl.public import tfxio as tfx_tfxio

from commands.experiments import study_evaluation
from pipeline.config import PipelineConfig
from trainer_module import contract
from trainer_module import features
from trainer_module import models
from trainer_module import preprocessing
from trainer_module import serving
from trainer_module.settings import ModelOptions
from trainer_module.settings import TrainerSettings

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
# Small enough that a handful of rows exercises the threshold.
_MIN_FREQUENCY = 2


def _schema(spec: features.DatasetSpec):
  return io_utils.SchemaReader().read(
      os.path.join(_REPO, "schema", spec.name, "schema.pbtxt"))


def _tfxio(spec: features.DatasetSpec) -> tfx_tfxio.TFExampleBeamRecord:
  """How TFX Transform reads the raw tf.Examples with the curated schema."""
  return tfx_tfxio.TFExampleBeamRecord(
      physical_format="inmem", telemetry_descriptors=["test"],
      schema=_schema(spec))


def _type_specs(spec: features.DatasetSpec,
                drop: tuple = ()) -> Dict[str, tf.TypeSpec]:
  type_specs = _tfxio(spec).TensorAdapter().TypeSpecs()
  return {k: v for k, v in type_specs.items() if k not in drop}


def _example(row: Mapping[str, Any]) -> bytes:
  """A serialized tf.Example; keys absent from row are absent features."""
  example = tf.train.Example()
  for name, value in row.items():
    feature = example.features.feature[name]
    if isinstance(value, int):
      feature.int64_list.value.append(value)
    else:
      feature.bytes_list.value.append(value)
  return example.SerializeToString()


def _full_row(spec: features.DatasetSpec, **values: Optional[Any]
             ) -> Dict[str, Any]:
  """A raw row with filler values; values[name]=None makes name absent."""
  row = {}
  for name in spec.raw_features:
    row[name] = 1 if spec.raw_dtype(name) == "int" else b"filler"
  if spec.time_field:
    row[spec.time_field] = 14102100
  row.update(values)
  return {k: v for k, v in row.items() if v is not None}


def _vocabulary(tft_output: tft.TFTransformOutput,
                field: str) -> Dict[bytes, int]:
  """token -> id, read independently of preprocessing.vocabulary_*."""
  lines = tft_output.vocabulary_by_name(features.vocabulary_name(field))
  return {line.split(b" ", 1)[1]: i for i, line in enumerate(lines)}


def _transform(tft_output: tft.TFTransformOutput, rows: List[Mapping[str, Any]],
               drop: tuple = ()) -> Dict[str, np.ndarray]:
  """Parses rows as a serving signature would and applies the transform."""
  raw_spec = {k: v for k, v in tft_output.raw_feature_spec().items()
              if k not in drop}
  parsed = tf.io.parse_example([_example(r) for r in rows], raw_spec)
  outputs = tft_output.transform_raw_features(parsed,
                                              drop_unused_features=True)
  return {k: v.numpy() for k, v in outputs.items()}


def _analyze_and_transform(spec: features.DatasetSpec,
                           rows: List[Mapping[str, Any]],
                           work_dir: str) -> List[Dict[str, Any]]:
  """Runs Transform's analysis+transform on rows; returns transformed rows."""
  tfxio = _tfxio(spec)
  fn = functools.partial(preprocessing.preprocessing_fn, custom_config={
      "dataset": spec.name, "min_frequency": _MIN_FREQUENCY})
  out_prefix = os.path.join(work_dir, "transformed")
  with beam.Pipeline() as pipeline:
    with tft_beam.Context(temp_dir=os.path.join(work_dir, "tmp")):
      raw = (pipeline | beam.Create([_example(r) for r in rows])
             | tfxio.BeamSource())
      (transformed, _), transform_fn = (
          (raw, tfxio.TensorAdapterConfig())
          | tft_beam.AnalyzeAndTransformDataset(fn))
      output_dir = os.path.join(work_dir, "transform_output")
      _ = transform_fn | tft_beam.WriteTransformFn(output_dir)
      # As TFX Transform does: the Trainer reads the raw feature spec here.
      _ = (tft.DatasetMetadata(_schema(spec)) | tft_beam.WriteMetadata(
          os.path.join(output_dir, tft.TFTransformOutput.RAW_METADATA_DIR),
          pipeline))
      _ = (transformed
           | beam.Map(json.dumps, default=lambda v: v.item())
           | beam.io.WriteToText(out_prefix, shard_name_template=""))
  with open(out_prefix) as f:
    return [json.loads(line) for line in f]


# ---------------------------------------------------------------- fast tests


def test_dataset_config_defaults_and_overrides():
  assert preprocessing.dataset_config({"dataset": "avazu"}) == (
      features.AVAZU, features.AVAZU.min_frequency)
  assert preprocessing.dataset_config(
      {"dataset": "criteo", "min_frequency": 3}) == (features.CRITEO, 3)


@pytest.mark.parametrize("config, message", [
    ({}, "'dataset'"),
    (None, "'dataset'"),
    ({"dataset": "movielens"}, "unknown dataset"),
    ({"dataset": "criteo", "min_frequency": 0}, "min_frequency"),
    ({"dataset": "criteo", "min_frequency": "10"}, "min_frequency"),
    ({"dataset": "criteo", "min_frequency": True}, "min_frequency"),
])
def test_dataset_config_rejects_bad_config(config, message):
  with pytest.raises(ValueError, match=message):
    preprocessing.dataset_config(config)


def test_log1p_counts_clips_negatives():
  got = preprocessing.log1p_counts(tf.constant([0, 1, 9, -3, 10**6], tf.int64))
  assert got.dtype == tf.float32
  np.testing.assert_allclose(
      got.numpy(), [0.0, math.log(2), math.log(10), 0.0, math.log1p(10**6)],
      rtol=1e-6)


def test_count_bucket_tokens_match_a_numpy_reference():
  """floor(ln(x)^2) for x > 2, the value itself otherwise, also on either
  side of every bucket boundary exp(sqrt(k)) up to 2^40."""
  edges = np.exp(np.sqrt(np.arange(1, 770)))
  counts = np.unique(np.concatenate([
      np.arange(-3, 30), np.floor(edges), np.ceil(edges), [2**40]]).astype(
          np.int64))
  expected = [f"b{int(np.floor(np.log(x) ** 2))}" if x > 2 else f"v{x}"
              for x in counts]
  got = preprocessing.count_bucket_tokens(tf.constant(counts))
  assert [t.decode() for t in got.numpy()] == expected
  assert expected[:6] == ["v-3", "v-2", "v-1", "v0", "v1", "v2"]
  assert "b1" in expected  # 3 and 1 differ: 'b1' is not 'v1'.


def test_time_tokens_match_python_calendar():
  dates = [datetime.date(2000, 1, 1) + datetime.timedelta(days=d)
           for d in range(0, 36500, 7)]  # every month and weekday, leap years
  dates += [datetime.date(2014, 10, 21), datetime.date(2016, 2, 29),
            datetime.date(2099, 12, 31)]
  hours = [d.toordinal() % 24 for d in dates]
  values = [int(d.strftime("%y%m%d")) * 100 + h for d, h in zip(dates, hours)]
  hour_tokens, weekday_tokens = preprocessing.time_tokens(
      tf.constant(values, tf.int64))
  assert hour_tokens.numpy().tolist() == [b"%02d" % h for h in hours]
  assert weekday_tokens.numpy().tolist() == [
      d.strftime("%a").encode() for d in dates]


def test_time_tokens_avazu_example_and_invalid_values():
  # 14102100: 2014-10-21 (a Tuesday), 00h. The rest are not YYMMDDHH.
  hour_tokens, weekday_tokens = preprocessing.time_tokens(
      tf.constant([14102100, -1, 14132100, 14100000, 14102124, 10**8],
                  tf.int64))
  assert hour_tokens.numpy().tolist() == [b"00", b"", b"", b"", b"", b""]
  assert weekday_tokens.numpy().tolist() == [b"Tue", b"", b"", b"", b"", b""]


def _token_batches() -> List[np.ndarray]:
  """[batch, 2 fields] token batches: field 0 has a tie and a rare token,
  field 1 only a missing value ('') and a rare token."""
  return [np.array([[b"b", b""], [b"a", b""], [b"c", b"z"]], dtype=object),
          np.array([[b"b", b""], [b"a", b""]], dtype=object),
          np.array([[b"d", b""]], dtype=object)]


def test_token_counts_equal_a_counter_across_compactions(monkeypatch):
  """Per-batch counts folded in Arrow, compacting after every batch and
  merging two accumulators, sum to what collections.Counter counts."""
  monkeypatch.setattr(preprocessing.TokenCounts, "COMPACT_ROWS", 1)
  batches = _token_batches()
  combine = preprocessing.CountTokensFn()
  first = combine.add_input(combine.create_accumulator(), (batches[0],))
  second = combine.create_accumulator()
  for batch in batches[1:]:
    second = combine.add_input(second, (batch,))
  counts = combine.extract_output(combine.merge_accumulators([first, second]))
  got = {(field, token): count for field, token, count in zip(
      counts["field"].to_pylist(), counts["token"].to_pylist(),
      counts["count"].to_pylist())}
  expected = collections.Counter(
      (field, token) for batch in batches for row in batch
      for field, token in enumerate(row) if token)
  assert got == dict(expected)


def test_merging_a_lone_accumulator_keeps_its_table():
  """Beam's in-memory runner merges its one accumulator into an empty one at
  the end: that must not aggregate (and copy) every count again."""
  combine = preprocessing.CountTokensFn()
  accumulator = combine.create_accumulator()
  for batch in _token_batches():
    accumulator = combine.add_input(accumulator, (batch,))
  table = combine.compact(accumulator).compacted
  assert combine.extract_output(combine.merge_accumulators([accumulator])) is (
      table)


def test_field_vocabularies_files_keep_tft_order_and_placeholder(tmp_path):
  """Count then token, both decreasing; below the threshold dropped; a field
  with nothing kept gets tf.Transform's one-line placeholder."""
  analyzer = preprocessing.FieldVocabularies(["f0", "f1"], min_frequency=2)
  analyzer.base_temp_dir = str(tmp_path)
  with beam.Pipeline() as p:
    _ = (p | beam.Create([(batch,) for batch in _token_batches()])
         | analyzer)
  read = lambda f: (tmp_path / features.vocabulary_name(f)).read_bytes()
  assert read("f0") == b"2 b\n2 a\n"
  assert read("f1") == b"1 %s\n" % preprocessing._EMPTY_VOCABULARY_TOKEN  # pylint: disable=protected-access


@pytest.mark.parametrize("spec", [features.CRITEO, features.AVAZU],
                         ids=lambda s: s.name)
def test_analyzers_only_read_categorical_inputs(spec):
  """Only vocabularies and ONE min/max (all dense fields) cost analyzers."""
  fn = functools.partial(preprocessing.preprocessing_fn,
                         custom_config={"dataset": spec.name})
  type_specs = _type_specs(spec)
  analyzed = set(tft.get_analyze_input_columns(fn, type_specs))
  time = {spec.time_field} if spec.time_field else set()
  assert analyzed == set(spec.int_categorical + spec.str_categorical +
                         spec.dense) | time
  assert set(tft.get_transform_input_columns(fn, type_specs)) == set(
      spec.raw_features)


def test_preprocessing_fn_without_label_emits_no_label():
  spec = features.AVAZU
  fn = functools.partial(preprocessing.preprocessing_fn,
                         custom_config={"dataset": spec.name})
  # Tracing fails if the fn reads the label; the label is then not an input.
  used = tft.get_transform_input_columns(
      fn, _type_specs(spec, drop=(spec.label,)))
  assert set(used) == set(spec.raw_features) - {spec.label}


def test_preprocessing_fn_names_a_missing_raw_feature():
  spec = features.CRITEO
  with pytest.raises(ValueError, match=f"{spec.dense[0]!r} is not in the"):
    preprocessing.preprocessing_fn({}, {"dataset": spec.name})


def test_preprocessing_fn_rejects_fixed_shape_inputs():
  spec = features.CRITEO
  inputs = {name: tf.zeros([2, 1], tf.int64) for name in spec.int_features}
  with pytest.raises(TypeError, match=f"{spec.dense[0]!r} is a .*SparseTensor"):
    preprocessing.preprocessing_fn(inputs, {"dataset": spec.name})


# ---------------------------------------------------------------- Beam runs


@pytest.fixture(scope="module")
def criteo_run(tmp_path_factory):
  spec = features.CRITEO
  cat, other_cat = spec.str_categorical[:2]
  dense = spec.dense[0]
  # cat: a x3, b x2 kept; c x1 below the threshold. other_cat: x x2, else
  # missing. dense: zero, counts, a negative, missing, a large count.
  rows = [
      _full_row(spec, **{spec.label: 1, cat: b"a", other_cat: b"x", dense: 0}),
      _full_row(spec, **{spec.label: 0, cat: b"a", other_cat: b"x", dense: 1}),
      _full_row(spec, **{spec.label: 0, cat: b"a", other_cat: None, dense: 9}),
      _full_row(spec, **{spec.label: 1, cat: b"b", other_cat: None, dense: -2}),
      _full_row(spec, **{spec.label: 0, cat: b"b", other_cat: None,
                         dense: None}),
      _full_row(spec, **{spec.label: 0, cat: b"c", other_cat: None,
                         dense: 1000}),
  ]
  work_dir = str(tmp_path_factory.mktemp("criteo"))
  transformed = _analyze_and_transform(spec, rows, work_dir)
  output = tft.TFTransformOutput(os.path.join(work_dir, "transform_output"))
  return spec, rows, transformed, output


def _served_replicas(criteo_run, export_dir: str) -> Dict[str, np.ndarray]:
  """Exports two differently seeded DeepFMs as replicas on criteo_run's
  Transform output; their serving outputs for its rows (raw tf.Examples)."""
  spec, rows, _, output = criteo_run
  options = ModelOptions(embedding_dim=2, hidden_units=(4,))
  settings = TrainerSettings(dataset="criteo", replicas=2,
                             model_options=options)
  sizes = preprocessing.vocabulary_sizes(output, spec)
  replicas = []
  for seed in (0, 1):
    keras.utils.set_random_seed(seed)
    replicas.append(models.build_model("deepfm", sizes, spec.dense, options))
  baseline = models.build_model(
      "lr", preprocessing.vocabulary_sizes(output, spec, linear=True), (),
      options)
  serving.export_serving_model(replicas, baseline, output, settings,
                               export_dir)
  serve = tf.saved_model.load(export_dir).signatures["serving_default"]
  raw = tf.constant([_example({k: v for k, v in r.items() if k != spec.label})
                     for r in rows])
  return {k: v.numpy() for k, v in serve(examples=raw).items()}


@pytest.mark.slow
def test_study_evaluation_of_replicas_reports_their_pd(criteo_run, tmp_path):
  """The study's TFMA evaluation of a replica export (the Evaluator's
  metrics): its replica_pd column is the PD of the served replica outputs
  (contract.prediction_difference, NumPy), its AUCs are the outputs'."""
  spec, rows, _, output = criteo_run
  export_dir = str(tmp_path / "serving")
  outputs = _served_replicas(criteo_run, export_dir)
  eval_file = str(tmp_path / "eval" / "examples.tfrecord")
  os.makedirs(os.path.dirname(eval_file))
  with tf.io.TFRecordWriter(eval_file) as writer:
    for row in rows:
      writer.write(_example(row))
  config = PipelineConfig.from_fields(dataset="criteo", data="unused",
                          output=str(tmp_path), replicas=2, min_slice_size=1)
  row = study_evaluation.metrics_row(study_evaluation.tfma_metrics(
      export_dir, study_evaluation.study_eval_config(config), eval_file,
      output.raw_metadata.schema, str(tmp_path / "tfma"), []), replicas=2)
  first, second = (outputs[contract.replica_output(i)].ravel()
                   for i in (0, 1))
  assert row["replica_pd"] == pytest.approx(
      contract.prediction_difference([first, second]),
      rel=1e-5)
  labels = [r[spec.label] for r in rows]
  aucs = [float(a) for a in row["replica_aucs"].split()]
  assert aucs == pytest.approx([roc_auc_score(labels, p)
                                for p in (first, second)], abs=1e-3)
  assert row["auc"] == pytest.approx(roc_auc_score(
      labels, outputs[contract.PREDICTION_KEY].ravel()), abs=1e-3)


@pytest.mark.slow
def test_criteo_export_serves_the_mean_and_every_replica(criteo_run,
                                                         tmp_path):
  """On this Transform output, two differently seeded DeepFMs exported as
  replicas: serving_default returns each replica's probability and their
  mean, on raw tf.Examples (serving.export_serving_model)."""
  spec, rows, _, _ = criteo_run
  outputs = _served_replicas(criteo_run, str(tmp_path / "serving"))
  assert sorted(outputs) == sorted([
      contract.PREDICTION_KEY, contract.LR_OUTPUT,
      contract.replica_output(0), contract.replica_output(1)])
  first, second = (outputs[contract.replica_output(i)] for i in (0, 1))
  assert not np.allclose(first, second)  # Different seeds, different models.
  np.testing.assert_allclose(outputs[contract.PREDICTION_KEY],
                             (first + second) / 2, rtol=1e-6)


@pytest.fixture(scope="module")
def avazu_run(tmp_path_factory):
  spec = features.AVAZU
  int_cat, str_cat = spec.int_categorical[0], spec.str_categorical[0]
  # int_cat: 1005 x3, 1010 x2 kept, 1002 x1 rare. Hours: 13h x3, 00h x2 kept,
  # 05h rare; Wed (22nd) x3, Tue (21st) x2 kept, Thu (23rd) rare.
  values = [(1005, 14102100), (1005, 14102100), (1005, 14102213),
            (1002, 14102213), (1010, 14102213), (1010, 14102305)]
  rows = [
      _full_row(spec, **{spec.label: i % 2, int_cat: v, str_cat: b"s%d" % i,
                         spec.time_field: hour})
      for i, (v, hour) in enumerate(values)
  ]
  work_dir = str(tmp_path_factory.mktemp("avazu"))
  transformed = _analyze_and_transform(spec, rows, work_dir)
  output = tft.TFTransformOutput(os.path.join(work_dir, "transform_output"))
  return spec, rows, transformed, output


@pytest.mark.slow
def test_criteo_outputs_follow_the_contract(criteo_run):
  spec, rows, transformed, output = criteo_run
  expected = set(spec.linear_features + spec.dense + (spec.label,))
  assert all(set(r) == expected for r in transformed)
  specs = output.transformed_feature_spec()
  for name in spec.linear_features:
    assert specs[name] == tf.io.FixedLenFeature([], tf.int64), name
  for name in spec.dense + (spec.label,):
    assert specs[name] == tf.io.FixedLenFeature([], tf.float32), name
  assert [r[spec.label] for r in transformed] == [1.0, 0.0, 0.0, 1.0, 0.0, 0.0]


@pytest.mark.slow
def test_criteo_vocabulary_threshold_frequencies_and_oov(criteo_run):
  spec, _, transformed, output = criteo_run
  cat, other_cat = spec.str_categorical[:2]
  sizes = preprocessing.vocabulary_sizes(output, spec)
  assert set(sizes) == set(spec.categorical_features)
  assert sizes[cat] == 2 + features.NUM_OOV_BUCKETS
  assert sizes[other_cat] == 1 + features.NUM_OOV_BUCKETS
  linear_sizes = preprocessing.vocabulary_sizes(output, spec, linear=True)
  assert set(linear_sizes) == set(spec.linear_features)
  for name, size in linear_sizes.items():
    assert output.num_buckets_for_transformed_feature(name) == size, name

  vocab = _vocabulary(output, cat)
  assert sorted(vocab) == [b"a", b"b"]
  oov = 2
  assert [r[cat] for r in transformed] == [
      vocab[b"a"]] * 3 + [vocab[b"b"]] * 2 + [oov]
  frequencies = preprocessing.vocabulary_frequencies(output, cat)
  assert frequencies.tolist() == [3, 2]
  assert frequencies[vocab[b"a"]] == 3

  # Missing values share the OOV id with the rare ones.
  assert [r[other_cat] for r in transformed] == [0, 0, 1, 1, 1, 1]
  assert preprocessing.vocabulary_frequencies(output, other_cat).tolist() == [2]


@pytest.mark.slow
def test_criteo_dense_log1p_scaled_and_missing_zero(criteo_run):
  spec, _, transformed, _ = criteo_run
  got = [r[spec.dense[0]] for r in transformed]
  logs = np.array([0.0, math.log(2), math.log(10), 0.0, 0.0, math.log1p(1000)])
  np.testing.assert_allclose(got, logs / logs.max(), rtol=1e-6)
  # A field with one value everywhere: tf.Transform's min==max fallback,
  # sigmoid(log1p(1)) = 2/3, the same for every row.
  assert all(r[spec.dense[1]] == pytest.approx(2 / 3) for r in transformed)


@pytest.mark.slow
def test_criteo_count_buckets_are_ids_with_their_own_vocabulary(criteo_run):
  """dense[1] is 1 everywhere: its bucket 'v1' is the vocabulary's one
  token; dense[0]'s buckets (v0, v1, b4, v-2, missing, b47) are each seen
  once, below the threshold, so all share the OOV id."""
  spec, _, transformed, output = criteo_run
  first, second = spec.bucket_features[:2]
  assert _vocabulary(output, second) == {b"v1": 0}
  assert {r[second] for r in transformed} == {0}
  assert {r[first] for r in transformed} == {1}


@pytest.mark.slow
def test_criteo_eval_only_values_are_oov(criteo_run):
  """Values seen only in later-transformed data never enter a vocabulary."""
  spec, _, _, output = criteo_run
  cat = spec.str_categorical[0]
  eval_rows = [_full_row(spec, **{cat: b"z"}) for _ in range(3)]
  eval_rows.append(_full_row(spec, **{cat: b"a"}))
  ids = _transform(output, eval_rows)[cat].tolist()
  assert ids == [2, 2, 2, _vocabulary(output, cat)[b"a"]]


@pytest.mark.slow
def test_criteo_serving_without_label_or_a_feature(criteo_run):
  spec, rows, transformed, output = criteo_run
  cat = spec.str_categorical[0]
  served = _transform(output, rows, drop=(spec.label,))
  assert spec.label not in served
  assert set(served) == set(spec.linear_features + spec.dense)
  for name in spec.linear_features + spec.dense:
    np.testing.assert_allclose(served[name], [r[name] for r in transformed],
                               rtol=1e-6, err_msg=name)
  # A feature absent from every request is OOV, not an error.
  partial = _transform(output, [{cat: b"a"}, {}], drop=(spec.label,))
  assert partial[cat].tolist() == [_vocabulary(output, cat)[b"a"], 2]
  assert partial[spec.dense[0]].tolist() == [0.0, 0.0]


@pytest.mark.slow
def test_avazu_outputs_follow_the_contract(avazu_run):
  spec, _, transformed, output = avazu_run
  expected = set(spec.categorical_features + (spec.label,))
  assert all(set(r) == expected for r in transformed)
  assert spec.time_field not in expected
  assert [r[spec.label] for r in transformed] == [0.0, 1.0] * 3
  sizes = preprocessing.vocabulary_sizes(output, spec)
  for name in spec.categorical_features:
    assert output.transformed_feature_spec()[name].dtype == tf.int64
    assert all(0 <= r[name] < sizes[name] for r in transformed), name


@pytest.mark.slow
def test_avazu_int_categorical_vocabulary(avazu_run):
  spec, _, transformed, output = avazu_run
  int_cat, str_cat = spec.int_categorical[0], spec.str_categorical[0]
  vocab = _vocabulary(output, int_cat)
  assert vocab == {b"1005": 0, b"1010": 1}
  assert [r[int_cat] for r in transformed] == [0, 0, 0, 2, 1, 1]
  assert preprocessing.vocabulary_frequencies(output, int_cat).tolist() == [
      3, 2]
  # Every str_cat value is unique: the vocabulary is empty (tf.Transform
  # writes one dummy token) and everything is OOV, with no fake count.
  assert preprocessing.vocabulary_sizes(output, spec)[str_cat] == 2
  assert preprocessing.vocabulary_frequencies(output, str_cat).tolist() == [0]
  assert {r[str_cat] for r in transformed} == {1}


@pytest.mark.slow
def test_avazu_hour_of_day_and_weekday(avazu_run):
  spec, _, transformed, output = avazu_run
  hours = _vocabulary(output, features.HOUR_OF_DAY)
  weekdays = _vocabulary(output, features.WEEKDAY)
  assert hours == {b"13": 0, b"00": 1}
  assert weekdays == {b"Wed": 0, b"Tue": 1}
  assert [r[features.HOUR_OF_DAY] for r in transformed] == [1, 1, 0, 0, 0, 2]
  assert [r[features.WEEKDAY] for r in transformed] == [1, 1, 0, 0, 0, 2]
  assert preprocessing.vocabulary_frequencies(
      output, features.WEEKDAY).tolist() == [3, 2]

  # Eval: Tuesday 2014-10-28 13h is in both vocabularies; a bad timestamp
  # and an eval-only int id are OOV.
  served = _transform(output, [
      _full_row(spec, **{spec.time_field: 14102813}),
      _full_row(spec, **{spec.time_field: 99999999,
                         spec.int_categorical[0]: 1002}),
      _full_row(spec, **{spec.int_categorical[0]: 1002}),
  ], drop=(spec.label,))
  assert served[features.HOUR_OF_DAY].tolist() == [0, 2, 1]
  assert served[features.WEEKDAY].tolist() == [1, 2, 1]
  assert served[spec.int_categorical[0]].tolist() == [2, 2, 2]
  assert spec.label not in served
