"""The batched evaluator's parts against TFMA's per-example code: bucket
indices, cross entropy, and the slices an example falls in."""

import numpy as np
import tensorflow_model_analysis as tfma
from tensorflow_model_analysis import constants
from tensorflow_model_analysis.api import types
from tensorflow_model_analysis.metrics import metric_specs

from components import sliced_metrics


def _combiners(class_name):
  config = tfma.EvalConfig(
      model_specs=[tfma.ModelSpec(label_key="label")],
      metrics_specs=[tfma.MetricsSpec(metrics=[tfma.MetricConfig(
          class_name=class_name)])])
  return [sliced_metrics.batched_combiner(c) for c in
          metric_specs.to_computations(list(config.metrics_specs),
                                       eval_config=config)
          if hasattr(c, "combiner")]


def test_bucket_index_is_tfmas_at_the_edges():
  (histogram,) = _combiners("AUC")
  predictions = np.array([-0.5, 0.0, 1e-5, 9.99e-5, 1e-4, 0.123456789, 0.5,
                          0.99995, 0.9999999, 1.0, 1.5], np.float32)
  tfma_index = histogram.combiner._bucket_index  # pylint: disable=protected-access
  assert histogram.bucket_index(predictions).tolist() == [
      tfma_index(float(p)) for p in predictions]


def test_cross_entropy_is_tfmas_per_example():
  (cross_entropy,) = _combiners("BinaryCrossEntropy")
  labels = np.array([0, 1, 1, 0, 1])
  predictions = np.array([0.1, 0.9, 0.3, 0.7, 1e-7], np.float32)
  tfma_formula = cross_entropy.combiner._cross_entropy  # pylint: disable=protected-access
  np.testing.assert_allclose(
      sliced_metrics._binary_cross_entropy(  # pylint: disable=protected-access
          cross_entropy.combiner, labels, predictions),
      [tfma_formula(np.array([y]), np.array([p]))
       for y, p in zip(labels, predictions)], rtol=1e-12)


def test_slices_are_tfmas():
  """Transformed features first, pooled over the models; raw ones else;
  an example with no value is in no slice of that feature; one with the
  same value twice is in its slice once."""
  extracts = {
      constants.TRANSFORMED_FEATURES_KEY: {
          "candidate": {"bucket": np.array([b"rare", b"frequent", b"rare"],
                                           object)},
          "baseline": {"bucket": np.array([b"rare", b"rare", b"frequent"],
                                          object)}},
      constants.FEATURES_KEY: {
          "C6": types.VarLenTensorValue(
              values=np.array([b"a", b"a", b"b"], object),
              indices=np.array([[0, 0], [0, 1], [2, 0]]),
              dense_shape=np.array([3, 2])),
          "hour": np.array([[7], [7], [8]]),
          # A raw feature of the same name is not read.
          "bucket": np.array([[b"raw"], [b"raw"], [b"raw"]], object)}}
  specs = [tfma.SlicingSpec(), tfma.SlicingSpec(feature_keys=["bucket"]),
           tfma.SlicingSpec(feature_keys=["C6"]),
           tfma.SlicingSpec(feature_keys=["hour"]),
           tfma.SlicingSpec(feature_keys=["absent"])]
  rows = sliced_metrics.slice_rows(extracts, 3, specs,
                                   ["candidate", "baseline"])
  assert {key: value.tolist() for key, value in rows.items()} == {
      (): [0, 1, 2],
      (("bucket", "rare"),): [0, 1, 2],
      (("bucket", "frequent"),): [1, 2],
      (("C6", "a"),): [0],
      (("C6", "b"),): [2],
      (("hour", 7),): [0, 1],
      (("hour", 8),): [2]}
