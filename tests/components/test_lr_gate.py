"""The gate's logistic-regression check, through TFMA with the pipeline's
own EvalConfig, on a SavedModel whose two outputs the test controls."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_model_analysis as tfma
from sklearn.metrics import roc_auc_score

from commands.experiments.study_evaluation import study_eval_config
from components import gate_metrics
from pipeline import metadata
from pipeline.config import PipelineConfig
from trainer_module import contract

pytestmark = pytest.mark.slow

ROWS = 2000


class _TwoOutputs(tf.Module):
  """Serves `model_weight * x + noise` and, as the LR output, `x` (the
  labels follow 2x + noise: weight 2 beats x alone, weight 0 loses)."""

  def __init__(self, model_weight: float):
    super().__init__()
    self.model_weight = model_weight
    self.spec = {"x": tf.io.FixedLenFeature([], tf.float32),
                 "noise": tf.io.FixedLenFeature([], tf.float32)}

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
  def serve(self, examples):
    f = tf.io.parse_example(examples, self.spec)
    return {contract.PREDICTION_KEY: tf.sigmoid(
                self.model_weight * f["x"] + f["noise"])[:, None],
            contract.LR_OUTPUT: tf.sigmoid(f["x"])[:, None]}

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
  def slicing_features(self, examples):
    return {contract.ID_FREQUENCY: tf.fill(tf.shape(examples), "rare")}


def _examples(path):
  rng = np.random.default_rng(0)
  x, noise = rng.normal(size=ROWS), rng.normal(size=ROWS)
  labels = (rng.random(ROWS) < 1 / (1 + np.exp(-2 * x - noise))).astype(int)
  with tf.io.TFRecordWriter(path) as writer:
    for xi, ni, yi in zip(x, noise, labels):
      writer.write(tf.train.Example(features=tf.train.Features(feature={
          "x": tf.train.Feature(float_list=tf.train.FloatList(value=[xi])),
          "noise": tf.train.Feature(float_list=tf.train.FloatList(
              value=[ni])),
          "label": tf.train.Feature(int64_list=tf.train.Int64List(
              value=[yi]))})).SerializeToString())
  return x, noise, labels


def _evaluate(tmp_path, model_weight):
  module = _TwoOutputs(model_weight)
  model_dir = str(tmp_path / f"model_{model_weight}")
  tf.saved_model.save(module, model_dir, signatures={
      "serving_default": module.serve,
      contract.SLICING_SIGNATURE: module.slicing_features})
  data = str(tmp_path / "eval.tfrecord")
  x, noise, labels = _examples(data)
  config = PipelineConfig.from_fields(dataset="criteo", data=data, output=str(tmp_path),
                          min_frequency=2, min_auc=0.5,
                          calibration_band=(0.01, 100.0))
  # The Evaluator's config without change thresholds (no baseline model).
  eval_config = study_eval_config(config)
  output = str(tmp_path / f"eval_{model_weight}")
  tfma.run_model_analysis(
      eval_shared_model=tfma.default_eval_shared_model(
          eval_saved_model_path=model_dir, eval_config=eval_config),
      eval_config=eval_config, data_location=data, file_format="tfrecords",
      output_path=output)
  model_auc = roc_auc_score(labels, model_weight * x + noise)
  return output, model_auc - roc_auc_score(labels, x)


def _overall(output):
  result = tfma.load_eval_result(output)
  (metrics,) = [m for key, m in result.slicing_metrics if key == ()]
  return {(out, name): value["doubleValue"]
          for out, by_sub_key in metrics.items()
          for name, value in by_sub_key[""].items() if "doubleValue" in value}


def _gate_values(output):
  overall = _overall(output)
  return [overall[("", name)] for name in (
      gate_metrics.AUC_OVER_LR,
      gate_metrics.bound_name(gate_metrics.AUC_OVER_LR, gate_metrics.LOWER),
      gate_metrics.bound_name(gate_metrics.AUC_OVER_LR, gate_metrics.UPPER))]


def test_a_model_worse_than_its_logistic_regression_is_not_blessed(tmp_path):
  output, difference = _evaluate(tmp_path, model_weight=0.0)
  assert difference < -0.05
  value, low, high = _gate_values(output)
  # DeLong on the rows TFMA read (float32 predictions): sklearn's AUCs.
  assert value == pytest.approx(difference, abs=1e-4)
  assert low < value < high < -0.1  # Beyond the margin and the noise.
  overall = _overall(output)
  # Both outputs get the same metrics, side by side.
  assert overall[(contract.LR_OUTPUT, "auc")] - overall[("", "auc")] == (
      pytest.approx(-difference, abs=2e-3))
  assert (contract.LR_OUTPUT, "binary_crossentropy") in overall
  result = tfma.load_validation_result(output)
  assert not result.validation_ok
  failures = [f for s in result.metric_validations_per_slice
              for f in s.failures]
  assert [f.metric_key.name for f in failures] == [
      gate_metrics.bound_name(gate_metrics.AUC_OVER_LR, gate_metrics.UPPER)]
  assert metadata.failed_checks(output) == (
      f"the model's AUC minus the logistic-regression baseline's is "
      f"{value:+.4f} [{low:+.4f}, {high:+.4f}]: its 95% interval is entirely "
      "below the allowed -0.0010: a model that loses to logistic regression "
      "is not pushed (Overall)",)


def test_a_model_below_its_logistic_regression_within_the_noise_passes(
    tmp_path):
  # Below LR by more than the 0.001 margin, but 2,000 rows cannot tell.
  output, difference = _evaluate(tmp_path, model_weight=0.85)
  assert -0.02 < difference < -0.001
  value, low, high = _gate_values(output)
  assert value == pytest.approx(difference, abs=1e-4)
  assert low < value < -0.001 < high
  assert tfma.load_validation_result(output).validation_ok


def test_a_model_that_beats_its_logistic_regression_passes(tmp_path):
  output, difference = _evaluate(tmp_path, model_weight=2.0)
  assert difference > 0
  value, low, _ = _gate_values(output)
  assert value == pytest.approx(difference, abs=1e-4)
  assert low > 0  # Better beyond the noise.
  assert tfma.load_validation_result(output).validation_ok
