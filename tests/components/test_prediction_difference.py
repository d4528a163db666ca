"""Prediction Difference: the formula against NumPy, and the TFMA metrics
through the pipeline's own EvalConfig on a SavedModel whose replica outputs
the test controls (300 of the LR gate test's examples, in-process Beam)."""

import itertools

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_model_analysis as tfma

from commands.experiments.study_evaluation import study_eval_config
from components import prediction_difference as pd_lib
from pipeline.config import PipelineConfig
from pipeline.pipeline import create_eval_config
from trainer_module import contract

import test_lr_gate

ROWS = 300


def _paper_pd(y1, y2):
  """Anil et al. 2022, section 5, written out for two prediction lists."""
  return sum(abs(a - b) / ((a + b) / 2) for a, b in zip(y1, y2)) / len(y1)


def test_pd_of_known_predictions():
  # |0.1-0.3|/0.2 = 1, |0.5-0.5|/0.5 = 0, |0.2-0.1|/0.15 = 2/3.
  assert contract.prediction_difference(
      [np.array([0.1, 0.5, 0.2]), np.array([0.3, 0.5, 0.1])]) == (
          pytest.approx((1 + 0 + 2 / 3) / 3))
  # Identical predictions, zeros included, differ by nothing.
  same = np.array([0.0, 0.2, 0.9])
  assert contract.prediction_difference([same, same.copy()]) == 0.0


def test_pd_matches_the_papers_formula_and_averages_pairs():
  rng = np.random.default_rng(1)
  y1, y2, y3 = (rng.uniform(0.001, 0.5, 1000) for _ in range(3))
  assert contract.prediction_difference([y1, y2]) == pytest.approx(
      _paper_pd(y1, y2), rel=1e-12)
  pairs = [_paper_pd(a, b) for a, b in itertools.combinations([y1, y2, y3],
                                                               2)]
  assert contract.prediction_difference([y1, y2, y3]) == pytest.approx(
      np.mean(pairs), rel=1e-12)
  # Symmetric, and weights make it a weighted mean of the terms.
  assert contract.prediction_difference([y2, y1]) == pytest.approx(
      contract.prediction_difference([y1, y2]), rel=1e-12)
  w = rng.uniform(0.5, 4, 1000)
  terms = np.abs(y1 - y2) / ((y1 + y2) / 2)
  assert contract.prediction_difference([y1, y2], w) == pytest.approx(
      np.sum(w * terms) / np.sum(w), rel=1e-12)
  with pytest.raises(ValueError, match="at least two"):
    contract.prediction_difference([y1])


def _pd_metrics(config):
  return [(spec, m) for spec in config.metrics_specs for m in spec.metrics
          if m.module == pd_lib.__name__]


def test_eval_config_bounds_replica_pd_only_when_asked(tmp_path):
  base = dict(dataset="criteo", data=str(tmp_path), output=str(tmp_path),
              min_frequency=2)
  plain = _pd_metrics(create_eval_config(PipelineConfig.from_fields(**base)))
  # Without replicas: churn against the baseline model only.
  assert [m.class_name for _, m in plain] == [
      pd_lib.PredictionDifferenceVsBaseline.__name__]
  replicas = create_eval_config(PipelineConfig.from_fields(**base, replicas=3))
  (_, replica_pd), = [(s, m) for s, m in _pd_metrics(replicas)
                      if m.class_name == "ReplicaPredictionDifference"]
  assert not replica_pd.per_slice_thresholds
  outputs = {o for s in replicas.metrics_specs for o in s.output_names}
  assert {contract.replica_output(i) for i in range(3)} <= outputs
  gated = create_eval_config(PipelineConfig.from_fields(**base, replicas=2, max_pd=0.1))
  (_, replica_pd), = [(s, m) for s, m in _pd_metrics(gated)
                      if m.class_name == "ReplicaPredictionDifference"]
  (threshold,) = replica_pd.per_slice_thresholds
  assert threshold.threshold.value_threshold.upper_bound.value == 0.1
  assert list(threshold.slicing_specs) == [tfma.SlicingSpec()]
  with pytest.raises(ValueError, match="needs replicas >= 2"):
    PipelineConfig.from_fields(**base, max_pd=0.1)


class _Replicas(test_lr_gate._TwoOutputs):  # pylint: disable=protected-access
  """Serves two replica outputs, sigmoid(x) and sigmoid(x + shift * noise),
  their mean as the prediction, and sigmoid(x) as the LR output (the LR
  gate test's features)."""

  def __init__(self, shift: float):
    super().__init__(model_weight=1.0)
    self.shift = shift

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
  def serve(self, examples):
    f = tf.io.parse_example(examples, self.spec)
    first = tf.sigmoid(f["x"])[:, None]
    second = tf.sigmoid(f["x"] + self.shift * f["noise"])[:, None]
    return {contract.PREDICTION_KEY: (first + second) / 2,
            contract.replica_output(0): first,
            contract.replica_output(1): second,
            contract.LR_OUTPUT: first}

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
  def slicing_features(self, examples):
    f = tf.io.parse_example(examples, self.spec)
    return {contract.ID_FREQUENCY: tf.where(f["x"] > 0, "frequent", "rare")}


def _write_examples(path, monkeypatch):
  """The LR gate test's examples (x, noise as float32, the label), ROWS of
  them."""
  monkeypatch.setattr(test_lr_gate, "ROWS", ROWS)
  x, noise, _ = test_lr_gate._examples(path)  # pylint: disable=protected-access
  return x.astype(np.float32), noise.astype(np.float32)


def _by_slice(output):
  """{slice key: {(output, metric): value}} of TFMA's written result."""
  result = tfma.load_eval_result(output)
  slices = {}
  for key, metrics in result.slicing_metrics:
    values = slices.setdefault(key, {})
    for out, by_sub_key in metrics.items():
      for name, value in by_sub_key[""].items():
        if isinstance(value, (int, float)):
          values[(out, name)] = float(value)
        elif "doubleValue" in value:
          values[(out, name)] = value["doubleValue"]
  return slices


@pytest.mark.slow
def test_tfma_replica_pd_by_slice_and_its_gate(tmp_path, monkeypatch):
  """TFMA's PD per slice equals NumPy's on the same predictions; --max-pd
  blesses a model below the bound and fails one above it."""
  module = _Replicas(shift=0.5)
  model_dir = str(tmp_path / "model")
  tf.saved_model.save(module, model_dir, signatures={
      "serving_default": module.serve,
      contract.SLICING_SIGNATURE: module.slicing_features})
  data = str(tmp_path / "eval.tfrecord")
  x, noise = _write_examples(data, monkeypatch)
  first = 1 / (1 + np.exp(-x.astype(np.float64)))
  second = 1 / (1 + np.exp(-(x + np.float32(0.5) * noise).astype(
      np.float64)))
  expected = {(): contract.prediction_difference([first, second])}
  for bucket, members in (("frequent", x > 0), ("rare", ~(x > 0))):
    expected[((contract.ID_FREQUENCY, bucket),)] = (
        contract.prediction_difference([first[members], second[members]]))
  assert 0.05 < expected[()] < 0.5

  results = {}
  for max_pd in (expected[()] * 1.1, expected[()] * 0.9):
    config = PipelineConfig.from_fields(dataset="criteo", data=data,
                            output=str(tmp_path), min_frequency=2,
                            min_auc=0.5, calibration_band=(0.01, 100.0),
                            replicas=2, max_pd=max_pd, max_auc_below_lr=None)
    eval_config = study_eval_config(config)
    output = str(tmp_path / f"eval_{max_pd}")
    tfma.run_model_analysis(
        eval_shared_model=tfma.default_eval_shared_model(
            eval_saved_model_path=model_dir, eval_config=eval_config),
        eval_config=eval_config, data_location=data,
        file_format="tfrecords", output_path=output)
    results[max_pd] = output

  blessed, refused = results.values()
  slices = _by_slice(blessed)
  for key, value in expected.items():
    assert slices[key][("", contract.REPLICA_PD)] == pytest.approx(
        value, rel=1e-5), key
  # Each replica output has its own AUC; no churn without a baseline.
  overall = slices[()]
  assert (contract.replica_output(0), "auc") in overall
  assert (contract.replica_output(1), "auc") in overall
  assert not any(name == contract.BASELINE_PD for _, name in overall)
  assert tfma.load_validation_result(blessed).validation_ok
  failed = tfma.load_validation_result(refused)
  assert not failed.validation_ok
  assert [f.metric_key.name for s in failed.metric_validations_per_slice
          for f in s.failures] == [contract.REPLICA_PD]


def _save(module, path):
  tf.saved_model.save(module, path, signatures={
      "serving_default": module.serve,
      contract.SLICING_SIGNATURE: module.slicing_features})
  return path


@pytest.mark.slow
def test_tfma_pd_against_the_baseline_model(tmp_path, monkeypatch):
  """Churn: the candidate's served prediction against the baseline model's,
  per example, as the Evaluator computes it when it has a baseline."""
  candidate = _save(_Replicas(shift=0.5), str(tmp_path / "candidate"))
  baseline = _save(_Replicas(shift=0.0), str(tmp_path / "baseline"))
  data = str(tmp_path / "eval.tfrecord")
  x, noise = _write_examples(data, monkeypatch)
  x64 = x.astype(np.float64)
  served = (1 / (1 + np.exp(-x64)) + 1 / (1 + np.exp(-(x + np.float32(
      0.5) * noise).astype(np.float64)))) / 2
  expected = contract.prediction_difference([served, 1 / (1 + np.exp(-x64))])
  config = PipelineConfig.from_fields(dataset="criteo", data=data, output=str(tmp_path),
                          min_frequency=2, min_auc=0.5,
                          calibration_band=(0.01, 100.0),
                          max_auc_below_lr=None)
  eval_config = tfma.utils.update_eval_config_with_defaults(
      study_eval_config(config), has_baseline=True)
  output = str(tmp_path / "eval")
  tfma.run_model_analysis(
      eval_shared_model=[
          tfma.default_eval_shared_model(
              eval_saved_model_path=path, eval_config=eval_config,
              model_name=name)
          for name, path in ((tfma.CANDIDATE_KEY, candidate),
                             (tfma.BASELINE_KEY, baseline))],
      eval_config=eval_config, data_location=data,
      file_format="tfrecords", output_path=output)
  result = tfma.load_eval_result(output, model_name=tfma.CANDIDATE_KEY)
  (overall,) = [m for key, m in result.slicing_metrics if key == ()]
  value = overall[""][""][contract.BASELINE_PD]
  value = value["doubleValue"] if isinstance(value, dict) else value
  assert value == pytest.approx(expected, rel=1e-4)
  assert 0.02 < expected < 0.5
