"""The pipeline's Evaluator (metrics in batches) against TFX's (TFMA's
per-example evaluator): the same metrics, plots, validation and blessing,
slice by slice, on models whose outputs and slicing features the test
controls."""

import json
import os
import re

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_model_analysis as tfma
from tfx.components.evaluator import executor as tfx_evaluator
from tfx.types import artifact_utils
from tfx.types import standard_artifacts
from tfx.types import standard_component_specs as specs
from tfx.utils import io_utils
from tfx.utils import proto_utils
from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import schema_pb2

from components import baseline as baseline_lib
from components import evaluator as evaluator_lib
from components import gate_metrics
from components import sliced_metrics
from pipeline import metadata
from pipeline.config import PipelineConfig
from pipeline.pipeline import create_eval_config
from trainer_module import contract

pytestmark = pytest.mark.slow

ROWS = 3000


class _Model(tf.Module):
  """Serves sigmoid(x + shift * noise) and sigmoid(x) as the LR output; its
  id-frequency bucket is 'frequent' where x > cut."""

  def __init__(self, shift: float, cut: float):
    super().__init__()
    self.shift, self.cut = shift, cut
    self.spec = {"x": tf.io.FixedLenFeature([], tf.float32),
                 "noise": tf.io.FixedLenFeature([], tf.float32)}

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
  def serve(self, examples):
    f = tf.io.parse_example(examples, self.spec)
    return {contract.PREDICTION_KEY:
                tf.sigmoid(f["x"] + self.shift * f["noise"])[:, None],
            contract.LR_OUTPUT: tf.sigmoid(f["x"])[:, None]}

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
  def slicing_features(self, examples):
    f = tf.io.parse_example(examples, self.spec)
    return {contract.ID_FREQUENCY: tf.where(f["x"] > self.cut, "frequent",
                                            "rare")}


def _model(tmp_path, name, shift, cut):
  module = _Model(shift, cut)
  model = standard_artifacts.Model()
  model.uri = str(tmp_path / name)
  tf.saved_model.save(module, os.path.join(model.uri, "Format-Serving"),
                      signatures={"serving_default": module.serve,
                                  contract.SLICING_SIGNATURE:
                                      module.slicing_features})
  return model


def _examples(tmp_path):
  """An ExampleGen-like artifact: gzipped tf.Examples in Split-eval. C6, a
  slicing feature, is missing from some rows and has two values in some."""
  rng = np.random.default_rng(0)
  x, noise = rng.normal(size=ROWS), rng.normal(size=ROWS)
  labels = (rng.random(ROWS) < 1 / (1 + np.exp(-2 * x - noise))).astype(int)
  c6 = rng.choice([b"a", b"b", b"c"], size=(ROWS, 2))
  count = rng.choice([0, 1, 2], p=[0.2, 0.7, 0.1], size=ROWS)
  examples = standard_artifacts.Examples()
  examples.uri = str(tmp_path / "examples")
  examples.split_names = artifact_utils.encode_split_names(["eval"])
  os.makedirs(os.path.join(examples.uri, "Split-eval"))
  path = os.path.join(examples.uri, "Split-eval", "data.gz")
  with tf.io.TFRecordWriter(path, options="GZIP") as writer:
    for i in range(ROWS):
      feature = {
          "x": tf.train.Feature(float_list=tf.train.FloatList(value=[x[i]])),
          "noise": tf.train.Feature(float_list=tf.train.FloatList(
              value=[noise[i]])),
          "label": tf.train.Feature(int64_list=tf.train.Int64List(
              value=[labels[i]]))}
      if count[i]:
        feature["C6"] = tf.train.Feature(bytes_list=tf.train.BytesList(
            value=list(c6[i, :count[i]])))
      writer.write(tf.train.Example(features=tf.train.Features(
          feature=feature)).SerializeToString())
  return examples


def _schema(tmp_path):
  schema = standard_artifacts.Schema()
  schema.uri = str(tmp_path / "schema")
  os.makedirs(schema.uri)
  io_utils.write_pbtxt_file(os.path.join(schema.uri, "schema.pbtxt"),
                            text_format.Parse("""
      feature { name: "x" type: FLOAT }
      feature { name: "noise" type: FLOAT }
      feature { name: "label" type: INT }
      feature { name: "C6" type: BYTES }""", schema_pb2.Schema()))
  return schema


def _run(executor, tmp_path, name, examples, model, baseline, eval_config):
  evaluation = standard_artifacts.ModelEvaluation()
  evaluation.uri = str(tmp_path / name / "evaluation")
  blessing = standard_artifacts.ModelBlessing()
  blessing.uri = str(tmp_path / name / "blessing")
  os.makedirs(blessing.uri)
  inputs = {specs.EXAMPLES_KEY: [examples], specs.MODEL_KEY: [model],
            specs.SCHEMA_KEY: [_schema(tmp_path / name)]}
  if baseline is not None:
    inputs[specs.BASELINE_MODEL_KEY] = [baseline]
  executor(executor.Context(
      beam_pipeline_args=["--runner=DirectRunner"],
      tmp_dir=str(tmp_path / name / ".tmp"), unique_id=name)).Do(
          inputs, {specs.EVALUATION_KEY: [evaluation],
                   specs.BLESSING_KEY: [blessing]},
          {specs.EVAL_CONFIG_KEY: proto_utils.proto_to_json(eval_config),
           specs.EXAMPLE_SPLITS_KEY: json.dumps(["eval"])})
  return evaluation.uri, blessing


_GATE_METRICS = {name for stem in gate_metrics.STEMS for name in (
    stem, gate_metrics.bound_name(stem, gate_metrics.LOWER),
    gate_metrics.bound_name(stem, gate_metrics.UPPER))} - {
        gate_metrics.AUC, gate_metrics.CALIBRATION}  # TFMA's, every slice.


def _metrics(uri):
  """{(slice, model, output, metric): value} of a written evaluation."""
  values = {}
  for per_slice in tfma.load_metrics(uri):
    key = per_slice.slice_key.SerializeToString(deterministic=True)
    for item in per_slice.metric_keys_and_values:
      k = item.key
      values[(key, k.model_name, k.output_name, k.name, k.is_diff)] = (
          item.value.double_value.value if item.value.HasField(
              "double_value") else item.value.SerializeToString())
  return values


def _plots(uri):
  plots = {}
  for per_slice in tfma.load_plots(uri):
    key = per_slice.slice_key.SerializeToString(deterministic=True)
    for item in per_slice.plot_keys_and_values:
      buckets = item.value.calibration_histogram_buckets.buckets
      plots[(key, item.key.model_name, item.key.output_name)] = np.array(
          [[b.lower_threshold_inclusive, b.upper_threshold_exclusive,
            b.num_weighted_examples.value, b.total_weighted_label.value,
            b.total_weighted_refined_prediction.value] for b in buckets])
  return plots


def _failures(uri):
  result = tfma.load_validation_result(uri)
  return result.validation_ok, sorted(
      (f.metric_key.name, f.metric_key.is_diff, f.metric_key.output_name)
      for s in result.metric_validations_per_slice for f in s.failures)


def _config(tmp_path, **gate):
  return create_eval_config(PipelineConfig.from_fields(
      dataset="criteo", data=str(tmp_path), output=str(tmp_path),
      min_frequency=2, calibration_band=(0.5, 2.0), **gate))


@pytest.mark.parametrize("with_baseline", [False, True])
def test_same_evaluation_as_tfx_evaluator(tmp_path, monkeypatch,
                                          with_baseline):
  # Several batches, so that accumulators merge.
  monkeypatch.setattr(evaluator_lib, "EVAL_BATCH_SIZE", 700)
  examples = _examples(tmp_path)
  model = _model(tmp_path, "candidate", shift=1.5, cut=0.0)
  served = None
  if with_baseline:
    # A better served model (the labels' own noise weight), slicing
    # differently: the candidate fails both no-regression checks beyond the
    # noise, and examples fall in both models' buckets.
    served = _model(tmp_path, "served", shift=0.5, cut=0.5)
    served.set_int_custom_property(baseline_lib.FOUND_PROPERTY, 1)
  eval_config = _config(tmp_path, max_auc_drop=0.0)
  ours, ours_blessing = _run(evaluator_lib.EvaluatorExecutor, tmp_path,
                             "ours", examples, model, served, eval_config)
  theirs, theirs_blessing = _run(tfx_evaluator.Executor, tmp_path, "tfx",
                                 examples, model, served, eval_config)

  expected, got = _metrics(theirs), _metrics(ours)
  assert set(got) == set(expected)
  # The gate's interval metrics keep every row: ours computes them on the
  # overall slice only, the one the gate checks (components.sliced_metrics).
  overall = tfma.slicer.serialize_slice_key(()).SerializeToString(
      deterministic=True)
  elsewhere = [k for k in got if k[0] != overall and k[3] in _GATE_METRICS]
  assert elsewhere and all(np.isnan(got.pop(k)) for k in elsewhere)
  for key in elsewhere:
    del expected[key]
  slices = {key[0] for key in got}
  # Overall, C6's three values, the two buckets (C9.. are absent).
  assert len(slices) == 6
  for key, value in expected.items():
    if isinstance(value, float):
      assert got[key] == pytest.approx(value, rel=1e-6, abs=1e-9), key
    else:
      assert got[key] == value, key
  expected_plots, got_plots = _plots(theirs), _plots(ours)
  assert set(got_plots) == set(expected_plots)
  for key, value in expected_plots.items():
    np.testing.assert_allclose(got_plots[key], value, rtol=1e-6, atol=1e-9)
  assert _failures(ours) == _failures(theirs)
  ok, failures = _failures(ours)
  assert ok is (not with_baseline)
  if with_baseline:
    assert failures == [
        (gate_metrics.bound_name(gate_metrics.AUC_CHANGE, gate_metrics.UPPER),
         True, ""),
        (gate_metrics.bound_name(gate_metrics.LOG_LOSS_CHANGE,
                                 gate_metrics.LOWER), True, "")]
    auc, log_loss = metadata.failed_checks(ours)
    assert re.fullmatch(
        r"auc changed by -0\.0\d{3} \[-0\.0\d{3}, -0\.0\d{3}\] vs the "
        r"last blessed model: its 95% interval is entirely below the "
        r"allowed -0\.0000 \(Overall\)", auc), auc
    assert re.fullmatch(
        r"log loss changed by \+0\.0\d{3} \[\+0\.0\d{3}, \+0\.0\d{3}\] vs "
        r"the last blessed model: its 95% interval is entirely above the "
        r"allowed \+0\.0010 \(Overall\)", log_loss), log_loss
  for blessing in (ours_blessing, theirs_blessing):
    assert os.listdir(blessing.uri) == [
        "BLESSED" if ok else "NOT_BLESSED"]
  assert (ours_blessing.get_int_custom_property("blessed") ==
          theirs_blessing.get_int_custom_property("blessed"))


def test_a_baseline_that_was_not_found_is_dropped(tmp_path):
  """LatestPushedModel's first-run output: evaluated without a baseline."""
  examples = _examples(tmp_path)
  model = _model(tmp_path, "candidate", shift=0.5, cut=0.0)
  empty = standard_artifacts.Model()
  empty.uri = str(tmp_path / "nothing_pushed")
  empty.set_int_custom_property(baseline_lib.FOUND_PROPERTY, 0)
  uri, blessing = _run(evaluator_lib.EvaluatorExecutor, tmp_path, "ours",
                       examples, model, empty, _config(tmp_path))
  assert {key[1] for key in _metrics(uri)} == {""}
  assert os.listdir(blessing.uri) == ["BLESSED"]
  assert not blessing.has_custom_property("baseline_model_uri")


def test_only_labels_and_slicing_features_are_decoded(tmp_path):
  schema = schema_pb2.Schema()
  for name in ("label", "C6", "C9", "I1", "C1"):
    schema.feature.add(name=name)
  assert evaluator_lib.read_features(
      tfma.utils.update_eval_config_with_defaults(_config(tmp_path),
                                                  rubber_stamp=True),
      schema) == ["C6", "C9", "label"]


def test_unsupported_settings_are_refused_by_name(tmp_path):
  config = _config(tmp_path)
  config.metrics_specs[0].metrics.add(class_name="Precision")
  with pytest.raises(ValueError, match="_binary_confusion_matrices.*no batched form"):
    sliced_metrics.check_supported(config)
  config = _config(tmp_path)
  config.slicing_specs.add(feature_keys=["C6", "C9"])
  with pytest.raises(ValueError, match="one feature per slicing spec"):
    sliced_metrics.check_supported(config)
  config = _config(tmp_path)
  config.options.compute_confidence_intervals.value = True
  with pytest.raises(ValueError, match="confidence"):
    sliced_metrics.check_supported(config)
