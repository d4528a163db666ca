"""The curated schemas match trainer_module.features and catch bad data.

The schemas under schema/ are imported by ImportSchemaGen, never
re-inferred, so this test is what keeps them in step with the feature specs.
The anomaly checks compute statistics the way StatisticsGen does (in memory,
on Arrow record batches as decoded from tf.Examples) and validate them the
way ExampleValidator does (all environments unless one is named).
"""

import os
from typing import Any, Dict, List, Optional

import pyarrow as pa
import pytest
import tensorflow as tf
import tensorflow_data_validation as tfdv
from tensorflow_data_validation.statistics import stats_impl
from tensorflow_metadata.proto.v0 import schema_pb2
from tensorflow_transform.tf_metadata import schema_utils
from tfx.utils import io_utils

from trainer_module import features

_REPO = os.path.dirname(os.path.dirname(__file__))
_SPECS = [features.CRITEO, features.AVAZU]
_HOUR = 14102100  # a YYMMDDHH


def _schema(spec: features.DatasetSpec) -> schema_pb2.Schema:
  return io_utils.SchemaReader().read(
      os.path.join(_REPO, "schema", spec.name, "schema.pbtxt"))


def _row(spec: features.DatasetSpec, index: int,
         **values: Optional[Any]) -> Dict[str, Any]:
  """A raw example; values[name]=None makes the feature absent."""
  row = {}
  for name in spec.raw_features:
    if name == spec.time_field:
      row[name] = _HOUR
    elif spec.raw_dtype(name) == "int":
      row[name] = index % 2
    else:
      row[name] = b"%08x" % index
  row.update(values)
  return row


def _record_batch(rows: List[Dict[str, Any]]) -> pa.RecordBatch:
  """The Arrow form of tf.Examples: one list column per feature, null=absent."""
  names = sorted({name for row in rows for name in row})
  columns = []
  for name in names:
    values = [row.get(name) for row in rows]
    columns.append(pa.array([
        v if v is None or isinstance(v, list) else [v] for v in values]))
  return pa.RecordBatch.from_arrays(columns, names)


def _anomalies(spec: features.DatasetSpec, rows: List[Dict[str, Any]],
               environment: Optional[str] = None) -> Dict[str, str]:
  """feature name -> anomaly description, as ExampleValidator would report."""
  schema = _schema(spec)
  stats = stats_impl.generate_statistics_in_memory(
      _record_batch(rows), tfdv.StatsOptions(schema=schema))
  anomalies = tfdv.validate_statistics(stats, schema, environment=environment)
  return {name: info.description
          for name, info in anomalies.anomaly_info.items()}


def _good_rows(spec: features.DatasetSpec) -> List[Dict[str, Any]]:
  rows = [_row(spec, i) for i in range(4)]
  if spec is features.CRITEO:  # Criteo fields are often empty.
    rows[1][spec.dense[0]] = None
    rows[2][spec.str_categorical[0]] = None
  return rows


# ------------------------------------------------------------ schema content


@pytest.mark.parametrize("spec", _SPECS, ids=lambda s: s.name)
def test_schema_lists_the_raw_features_with_their_types(spec):
  schema = _schema(spec)
  assert [f.name for f in schema.feature] == list(spec.raw_features)
  types = {"int": schema_pb2.INT, "string": schema_pb2.BYTES}
  for feature in schema.feature:
    assert feature.type == types[spec.raw_dtype(feature.name)], feature.name


@pytest.mark.parametrize("spec", _SPECS, ids=lambda s: s.name)
def test_schema_features_are_single_valued_without_shape(spec):
  for feature in _schema(spec).feature:
    assert feature.value_count.min == 1, feature.name
    assert feature.value_count.max == 1, feature.name
    assert not feature.HasField("shape"), feature.name
    assert not feature.HasField("string_domain"), feature.name
    assert not feature.HasField("domain"), feature.name


@pytest.mark.parametrize("spec", _SPECS, ids=lambda s: s.name)
def test_transform_parses_every_feature_as_var_len(spec):
  """No shape -> SparseTensor inputs, so absent values are legal anywhere."""
  feature_spec = schema_utils.schema_as_feature_spec(
      _schema(spec)).feature_spec
  assert set(feature_spec) == set(spec.raw_features)
  for name, parsed in feature_spec.items():
    assert isinstance(parsed, tf.io.VarLenFeature), name


@pytest.mark.parametrize("spec", _SPECS, ids=lambda s: s.name)
def test_label_is_binary_and_training_only(spec):
  schema = _schema(spec)
  assert list(schema.default_environment) == ["TRAINING", "SERVING"]
  for feature in schema.feature:
    if feature.name == spec.label:
      assert list(feature.not_in_environment) == ["SERVING"]
      assert (feature.int_domain.min, feature.int_domain.max) == (0, 1)
      assert feature.presence.min_fraction == 1.0
    else:
      assert not feature.not_in_environment, feature.name
      assert not feature.in_environment, feature.name


def test_criteo_features_may_be_missing():
  """Every Criteo column but the label has empty fields in the real data."""
  spec = features.CRITEO
  for feature in _schema(spec).feature:
    if feature.name != spec.label:
      assert feature.presence.min_fraction < 1.0, feature.name


def test_avazu_training_features_are_required():
  """The Avazu files have no empty field: a hole in training data is a bug."""
  for feature in _schema(features.AVAZU).feature:
    assert feature.presence.min_fraction == 1.0, feature.name


# ------------------------------------------------------- anomaly detection


@pytest.mark.parametrize("spec", _SPECS, ids=lambda s: s.name)
def test_good_examples_have_no_anomalies(spec):
  assert _anomalies(spec, _good_rows(spec)) == {}


@pytest.mark.parametrize("spec", _SPECS, ids=lambda s: s.name)
def test_serving_examples_need_no_label(spec):
  rows = [_row(spec, i, **{spec.label: None}) for i in range(3)]
  assert _anomalies(spec, rows, environment="SERVING") == {}
  assert spec.label in _anomalies(spec, rows)


@pytest.mark.parametrize("spec", _SPECS, ids=lambda s: s.name)
def test_string_in_an_int_column_is_an_anomaly(spec):
  column = spec.int_features[-1]
  rows = [_row(spec, i, **{column: b"12"}) for i in range(3)]
  assert "type" in _anomalies(spec, rows)[column]


@pytest.mark.parametrize("spec", _SPECS, ids=lambda s: s.name)
def test_float_in_a_column_is_an_anomaly(spec):
  column = spec.str_categorical[0]
  rows = [_row(spec, i, **{column: 0.5}) for i in range(3)]
  assert "type" in _anomalies(spec, rows)[column]


@pytest.mark.parametrize("spec", _SPECS, ids=lambda s: s.name)
def test_missing_column_is_an_anomaly(spec):
  column = spec.str_categorical[-1]
  rows = _good_rows(spec)
  for row in rows:
    del row[column]
  assert column in _anomalies(spec, rows)


@pytest.mark.parametrize("spec", _SPECS, ids=lambda s: s.name)
def test_label_outside_0_1_is_an_anomaly(spec):
  rows = _good_rows(spec)
  rows[0][spec.label] = 2
  assert "large value: 2" in _anomalies(spec, rows)[spec.label]


@pytest.mark.parametrize("spec", _SPECS, ids=lambda s: s.name)
def test_multi_valued_feature_is_an_anomaly(spec):
  column = spec.str_categorical[0]
  rows = _good_rows(spec)
  rows[0][column] = [b"a", b"b"]
  assert column in _anomalies(spec, rows)


def test_unexpected_column_is_an_anomaly():
  spec = features.CRITEO
  rows = _good_rows(spec)
  rows[0]["surprise"] = b"x"
  assert "surprise" in _anomalies(spec, rows)


def test_avazu_missing_value_is_an_anomaly():
  spec = features.AVAZU
  column = spec.str_categorical[0]
  rows = _good_rows(spec)
  rows[0][column] = None
  assert column in _anomalies(spec, rows)


# ------------------------------------ the pipeline's StatisticsGen options


def _example(row: Dict[str, Any]) -> bytes:
  """A raw row as a serialized tf.Example; None values are absent."""
  feature = {}
  for name, value in row.items():
    if isinstance(value, int):
      feature[name] = tf.train.Feature(
          int64_list=tf.train.Int64List(value=[value]))
    elif value is not None:
      feature[name] = tf.train.Feature(
          bytes_list=tf.train.BytesList(value=[value]))
  return tf.train.Example(features=tf.train.Features(
      feature=feature)).SerializeToString()


def _sampled_anomalies(spec: features.DatasetSpec, rows: List[Dict[str, Any]],
                       path: str) -> Dict[str, str]:
  """As _anomalies, through the pipeline's StatisticsGen executor with the
  options it gives a 10x-too-big input: about one record in ten is read."""
  # pylint: disable=g-import-not-at-top
  from tfx.types import standard_artifacts
  from components import statistics_gen
  from pipeline import pipeline as pipeline_lib
  options = pipeline_lib.create_stats_options(
      10 * pipeline_lib.STATISTICS_SAMPLE_ROWS)
  assert options.sample_rate == pytest.approx(0.1)
  examples = standard_artifacts.Examples()
  examples.uri = os.path.join(path, "examples")
  examples.split_names = '["train"]'
  os.makedirs(os.path.join(examples.uri, "Split-train"))
  with tf.io.TFRecordWriter(
      os.path.join(examples.uri, "Split-train", "data.gz"),
      tf.io.TFRecordOptions(compression_type="GZIP")) as writer:
    for row in rows:
      writer.write(_example(row))
  statistics = standard_artifacts.ExampleStatistics()
  statistics.uri = os.path.join(path, "statistics")
  statistics_gen.Executor().Do(
      {"examples": [examples]}, {"statistics": [statistics]},
      {"stats_options_json": options.to_json()})
  stats = tfdv.load_stats_binary(
      os.path.join(statistics.uri, "Split-train", "FeatureStats.pb"))
  assert 0 < stats.datasets[0].num_examples < len(rows)
  anomalies = tfdv.validate_statistics(stats, _schema(spec))
  return {name: info.description
          for name, info in anomalies.anomaly_info.items()}


def test_create_stats_options_samples_only_big_inputs():
  from pipeline import pipeline as pipeline_lib  # pylint: disable=g-import-not-at-top
  rows = pipeline_lib.STATISTICS_SAMPLE_ROWS
  assert pipeline_lib.create_stats_options(None).sample_rate is None
  assert pipeline_lib.create_stats_options(rows).sample_rate is None
  assert pipeline_lib.create_stats_options(4 * rows).sample_rate == 0.25
  assert pipeline_lib.create_stats_options(rows).use_sketch_based_topk_uniques


@pytest.mark.slow  # Two Beam pipelines.
def test_sampled_statistics_still_stop_bad_columns(tmp_path):
  """The gate on sampled, sketched statistics: clean data passes; a string
  column where an int belongs and a column gone are still caught (single
  bad rows never get this far: ExampleGen counts and drops them)."""
  spec = features.CRITEO
  good = [_row(spec, i) for i in range(3000)]
  assert _sampled_anomalies(spec, good, str(tmp_path / "good")) == {}
  int_column, gone = spec.int_features[-1], spec.str_categorical[-1]
  bad = [_row(spec, i, **{int_column: b"12", gone: None})
         for i in range(3000)]
  found = _sampled_anomalies(spec, bad, str(tmp_path / "bad"))
  assert "type" in found[int_column] and gone in found
