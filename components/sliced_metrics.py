"""TFMA's metrics, slices and gate, computed a batch at a time.

TFMA 0.47 unbatches the eval split into one Python dict per example, fans
each out to every slice it falls in, and feeds each copy to every metric
combiner: ~33 combiner calls per example in this pipeline's config, ~6.5 ms
of CPU per example (docs/benchmark_eval.md), 50x short of the 20k examples/s
a daily retrain of full-size data needs. Nothing in TFMA's options batches
that part.

This evaluator replaces only that part. It takes TFMA's batched extracts
(features, transformed features, labels, predictions, from TFMA's own
extractors), groups each batch's rows by slice with NumPy, and adds each
group to the accumulator of each metric computation in one vectorised step.
What a combiner accumulates is TFMA's (the same sums, the same 10,000-bucket
calibration histogram); its output, the derived metrics (AUC, log loss,
calibration, the calibration plot, the LR gate, the diffs against the
baseline model), validation and writing are TFMA's own code, so the
evaluation artifact, its keys and the blessing are what TFMA writes.

Supported (anything else is refused when the pipeline is built, naming it):
* combiners: TFMA's example count, weighted labels/predictions/examples,
  calibration histogram (prediction-based buckets) and binary cross entropy,
  unweighted, without class weights, sub keys or aggregation; and any
  combiner with an `add_batch` method (components.prediction_difference,
  components.gate_metrics);
* slicing specs: overall, and one feature per spec (every value it takes);
* no confidence intervals, query keys, cross slices or min_slice_size.

Two deliberate differences. The gate's interval metrics
(components.gate_metrics), which keep every row, are computed on the
overall slice only (NaN on the others): per slicing spec they would hold
another copy of the eval split, and the gate checks only the overall slice.
And sums are merged by addition: TFMA 0.47's binary cross entropy merge
counts its first accumulator twice when it merges several non-empty ones,
so TFMA's own log loss can differ in the 4th digit on multi-bundle runs;
the figures here are the exact means.
"""

import collections
from typing import (Any, Dict, Iterable, List, Mapping, Optional, Sequence,
                    Tuple)

import apache_beam as beam
import numpy as np
import tensorflow as tf
from tensorflow_model_analysis import constants
from tensorflow_model_analysis.api import types
from tensorflow_model_analysis.evaluators import evaluator
# TFMA's helpers around its combine (the computations, private-metric
# removal, diffability, the metrics/plots split). Private in TFMA 0.47,
# which constraints.txt pins; test_sliced_metrics compares the whole output
# with TFMA's own evaluator.
from tensorflow_model_analysis.evaluators import (
    metrics_plots_and_validations_evaluator as tfma_evaluator)
from tensorflow_model_analysis.metrics import calibration
from tensorflow_model_analysis.metrics import calibration_histogram
from tensorflow_model_analysis.metrics import cross_entropy_metrics
from tensorflow_model_analysis.metrics import example_count
from tensorflow_model_analysis.metrics import metric_specs
from tensorflow_model_analysis.metrics import metric_types
from tensorflow_model_analysis.metrics import metric_util
from tensorflow_model_analysis.proto import config_pb2
from tensorflow_model_analysis.utils import model_util
from tensorflow_model_analysis.utils import util
from tensorflow_model_analysis.evaluators import metrics_validator

SliceKey = Tuple[Tuple[str, Any], ...]
STAGE_NAME = "EvaluateMetricsPlotsAndValidationsInBatches"


# --- The batch's labels and predictions, as TFMA resolves them per example.

class _Batch:
  """One batched extract: its rows' labels and predictions by model and
  output, resolved once with TFMA's own lookups (metric_util)."""

  def __init__(self, extracts: types.Extracts,
               eval_config: config_pb2.EvalConfig):
    self._extracts = extracts
    self._eval_config = eval_config
    self._resolved = {}
    self.size = len(extracts[constants.INPUT_KEY])

  def labels_and_predictions(self, model_name: str, output_name: str
                            ) -> Tuple[np.ndarray, np.ndarray]:
    """Flat (labels, predictions) of every row for one model output."""
    key = (model_name, output_name)
    if key not in self._resolved:
      self._resolved[key] = self._resolve(model_name, output_name)
    return self._resolved[key]

  def _resolve(self, model_name: str, output_name: str):
    spec = _model_spec(self._eval_config, model_name)
    label = self._extracts.get(constants.LABELS_KEY)
    prediction = self._extracts[constants.PREDICTIONS_KEY]
    if spec.label_key:
      label = _optional_key(label, spec.label_key)
    if model_name:
      prediction = util.get_by_keys(prediction, [model_name])
      label = _optional_key(label, model_name)
    if output_name:
      prediction = util.get_by_keys(prediction, [output_name])
      label = _optional_key(label, output_name)
    label = _one_per_row(label, self.size, model_name, output_name)
    label, prediction = metric_util.prepare_labels_and_predictions(
        label, prediction, spec.prediction_key)
    label = np.asarray(label).reshape(self.size, -1)
    prediction = np.asarray(prediction).reshape(self.size, -1)
    if label.shape[1] != 1 or prediction.shape[1] != 1:
      raise ValueError(
          f"model {model_name!r} output {output_name!r}: the batched "
          f"evaluator computes metrics of one label and one prediction per "
          f"example; got {label.shape[1]} labels and {prediction.shape[1]} "
          "predictions")
    return label[:, 0], prediction[:, 0]


def _one_per_row(label: Any, size: int, model_name: str, output_name: str):
  """A varlen label (a schema without a shape) as a dense column: each
  example must have exactly one, as TFMA's per-example metrics need."""
  if not isinstance(label, types.VarLenTensorValue):
    return label
  rows = np.asarray(label.indices)[:, 0]
  if len(rows) != size or (rows != np.arange(size)).any():
    counts = np.bincount(rows, minlength=size)
    bad = int(np.flatnonzero(counts != 1)[0])
    raise ValueError(f"model {model_name!r} output {output_name!r}: every "
                     f"example needs exactly one label; example {bad} of a "
                     f"batch has {counts[bad]}")
  return np.asarray(label.values)


def _optional_key(value, key: str):
  if isinstance(value, Mapping) and key in value:
    return value[key]
  return value


def _model_spec(eval_config: config_pb2.EvalConfig, model_name: str
               ) -> config_pb2.ModelSpec:
  """The spec TFMA's metric_util matches a metric key's model name with."""
  for spec in eval_config.model_specs:
    name = spec.name if len(eval_config.model_specs) > 1 else ""
    if name == model_name:
      return spec
  return config_pb2.ModelSpec()


# --- Each supported combiner: its accumulator for some rows, in NumPy.

class _BatchedCombiner:
  """A TFMA combiner's accumulation over row subsets of batches.

  acc() is a NumPy array; add(acc, batch, rows) adds rows in place; output
  turns the summed array into the combiner's own accumulator and calls the
  combiner's extract_output. A combiner that keeps rows rather than sums
  (components.gate_metrics) declares OVERALL_ONLY: it is fed the overall
  slice alone, the only one the gate checks."""

  overall_only = False

  def __init__(self, combiner: beam.CombineFn,
               key: Optional[metric_types.MetricKey] = None):
    self.combiner = combiner
    self._key = key
    if key is not None:
      _check_plain(combiner, key)

  def rows_of(self, batch: _Batch, rows: np.ndarray
             ) -> Tuple[np.ndarray, np.ndarray]:
    """The rows' labels and predictions of the combiner's model output."""
    label, prediction = batch.labels_and_predictions(self._key.model_name,
                                                     self._key.output_name)
    return label[rows], prediction[rows]

  def acc(self) -> np.ndarray:
    raise NotImplementedError

  def add(self, acc: np.ndarray, batch: _Batch, rows: np.ndarray) -> None:
    raise NotImplementedError

  def output(self, acc: np.ndarray) -> Dict[metric_types.MetricKey, Any]:
    raise NotImplementedError


def _check_plain(combiner, key: metric_types.MetricKey) -> None:
  """The settings under which TFMA's per-example code reduces to sums."""
  problems = [name for name, bad in (
      ("example weights", getattr(combiner, "_example_weighted", False)),
      ("class weights", getattr(combiner, "_class_weights", None)),
      ("aggregation", getattr(combiner, "_aggregation_type", None)),
      ("a sub key", key.sub_key)) if bad]
  if problems:
    raise ValueError(f"metric {key.name!r}: the batched evaluator does not "
                     f"support {', '.join(problems)}")


class _ExampleCount(_BatchedCombiner):

  def __init__(self, combiner):
    super().__init__(combiner, combiner._keys[0])  # pylint: disable=protected-access

  def acc(self):
    return np.zeros(1)

  def add(self, acc, batch, rows):
    acc[0] += len(rows)

  def output(self, acc):
    return self.combiner.extract_output(float(acc[0]))


class _LabelsPredictionsExamples(_BatchedCombiner):
  """calibration._WeightedLabelsPredictionsExamplesCombiner: the sums behind
  MeanLabel, MeanPrediction and Calibration."""

  def __init__(self, combiner):
    super().__init__(combiner, combiner._key)  # pylint: disable=protected-access

  def acc(self):
    return np.zeros(3)

  def add(self, acc, batch, rows):
    label, prediction = self.rows_of(batch, rows)
    acc += (np.sum(label, dtype=np.float64),
            np.sum(prediction, dtype=np.float64), len(rows))

  def output(self, acc):
    result = self.combiner.create_accumulator()
    (result.total_weighted_labels, result.total_weighted_predictions,
     result.total_weighted_examples) = (float(v) for v in acc)
    return self.combiner.extract_output(result)


class _CalibrationHistogram(_BatchedCombiner):
  """calibration_histogram._CalibrationHistogramCombiner: per bucket of the
  prediction, the sums of labels, predictions and examples (AUC, the
  calibration plot). Bucket i holds what TFMA's _bucket_index gives i; a
  bucket exists when an example fell in it, as in TFMA's sparse dict."""

  def __init__(self, combiner):
    super().__init__(combiner, combiner._key)  # pylint: disable=protected-access
    c = combiner
    if not c._prediction_based_bucketing:  # pylint: disable=protected-access
      raise ValueError(f"{self._key.name}: the batched evaluator buckets by "
                       "prediction only")
    self._buckets = c._num_buckets  # pylint: disable=protected-access
    self._left, self._range = c._left, c._range  # pylint: disable=protected-access
    self._fractional = c._fractional_labels  # pylint: disable=protected-access

  def acc(self):
    # Columns: labels, predictions, examples (unweighted: each counts 1).
    return np.zeros((self._buckets + 2, 3))

  def bucket_index(self, prediction: np.ndarray) -> np.ndarray:
    position = ((prediction.astype(np.float64) - self._left) / self._range *
                self._buckets) + 1
    if np.isnan(position).any():
      raise ValueError(f"model {self._key.model_name!r} output "
                       f"{self._key.output_name!r}: a prediction is NaN")
    return np.clip(position, 0, self._buckets + 1).astype(np.int64)

  def add(self, acc, batch, rows):
    label, prediction = self.rows_of(batch, rows)
    label = label.astype(np.float64)
    if self._fractional and ((label < 0) | (label > 1)).any():
      raise ValueError(f"labels must be within [0, 1] for "
                       f"{self._key.name}; got {label.min()}..{label.max()}")
    bucket = self.bucket_index(prediction)
    size = self._buckets + 2
    acc[:, 0] += np.bincount(bucket, weights=label, minlength=size)
    acc[:, 1] += np.bincount(bucket, weights=prediction.astype(np.float64),
                             minlength=size)
    acc[:, 2] += np.bincount(bucket, minlength=size)

  def output(self, acc):
    present = np.flatnonzero(acc[:, 2])
    return self.combiner.extract_output({
        int(i): calibration_histogram.Bucket(int(i), float(acc[i, 0]),
                                             float(acc[i, 1]),
                                             float(acc[i, 2]))
        for i in present})


class _BinaryCrossEntropy(_BatchedCombiner):
  """cross_entropy_metrics._BinaryCrossEntropyCombiner, its formula on the
  rows' NumPy arrays in the same dtypes."""

  def __init__(self, combiner):
    super().__init__(combiner, combiner._metric_key)  # pylint: disable=protected-access

  def acc(self):
    return np.zeros(2)

  def add(self, acc, batch, rows):
    values = _binary_cross_entropy(self.combiner, *self.rows_of(batch, rows))
    acc += (np.sum(values, dtype=np.float64), len(rows))

  def output(self, acc):
    result = self.combiner.create_accumulator()
    result.total_cross_entropy, result.total_example_weights = (
        float(acc[0]), float(acc[1]))
    return self.combiner.extract_output(result)


def _binary_cross_entropy(combiner, label: np.ndarray,
                          prediction: np.ndarray) -> np.ndarray:
  """Per example what _BinaryCrossEntropyCombiner._cross_entropy gives."""
  smoothing = combiner._label_smoothing  # pylint: disable=protected-access
  label = label * (1.0 - smoothing) + 0.5 * smoothing
  if combiner._from_logits:  # pylint: disable=protected-access
    return (np.maximum(prediction, 0) - np.multiply(prediction, label) +
            np.log(1 + np.exp(-np.abs(prediction))))
  with np.errstate(divide="ignore", invalid="ignore"):
    return (-np.multiply(label, np.log(prediction)) -
            np.multiply((1 - label), np.log(1 - prediction)))


class _AddBatch(_BatchedCombiner):
  """A combiner of ours that accumulates a batch itself (add_batch)."""

  def __init__(self, combiner):
    super().__init__(combiner)
    self.overall_only = getattr(combiner, "OVERALL_ONLY", False)

  def acc(self):
    return self.combiner.create_accumulator()

  def add(self, acc, batch, rows):
    def labels_and_predictions_of(model, output):
      label, prediction = batch.labels_and_predictions(model, output)
      return label[rows], prediction[rows]
    self.combiner.add_batch(acc, labels_and_predictions_of)

  def output(self, acc):
    return self.combiner.extract_output(acc)


_BATCHED = {
    example_count._ExampleCountCombiner: _ExampleCount,  # pylint: disable=protected-access
    calibration._WeightedLabelsPredictionsExamplesCombiner:  # pylint: disable=protected-access
        _LabelsPredictionsExamples,
    calibration_histogram._CalibrationHistogramCombiner:  # pylint: disable=protected-access
        _CalibrationHistogram,
    cross_entropy_metrics._BinaryCrossEntropyCombiner: _BinaryCrossEntropy,  # pylint: disable=protected-access
}


def batched_combiner(computation: metric_types.MetricComputation
                    ) -> _BatchedCombiner:
  """The batched form of a TFMA metric computation's combiner, or a
  ValueError naming the metric when there is none."""
  combiner = computation.combiner
  if hasattr(combiner, "add_batch"):
    return _AddBatch(combiner)
  kind = _BATCHED.get(type(combiner))
  if kind is None:
    raise ValueError(
        f"metric {computation.keys[0].name!r} ({type(combiner).__name__}) "
        "has no batched form: the Evaluator computes TFMA's example count, "
        "mean label and prediction, calibration, AUC and calibration plot, "
        "binary cross entropy and the pipeline's own metrics")
  return kind(combiner)


# --- Slices: the rows of a batch in each slice, as TFMA's slicer finds them.

def _check_slicing(spec: config_pb2.SlicingSpec) -> None:
  if spec.feature_values or spec.slice_keys_sql or len(spec.feature_keys) > 1:
    raise ValueError(
        "the batched evaluator slices overall or on one feature per slicing "
        f"spec (every value it takes); got {spec}")


def _rows_and_values(value: Any, size: int, column: str
                    ) -> Tuple[np.ndarray, np.ndarray]:
  """(row of each value, value) of a batched feature."""
  if isinstance(value, types.VarLenTensorValue):
    return np.asarray(value.indices)[:, 0], np.asarray(value.values)
  if isinstance(value, np.ndarray):
    values = value.reshape(size, -1)
    return (np.repeat(np.arange(size), values.shape[1]),
            values.reshape(-1))
  raise ValueError(f"slicing feature {column!r} is a {type(value).__name__}; "
                   "the batched evaluator slices on dense or varlen features")


def _slice_value(value: Any, column: str) -> Any:
  """The slice key's value, as TFMA's SingleSliceSpec.generate_slices
  makes it (text from bytes)."""
  if isinstance(value, bytes):
    try:
      return tf.compat.as_text(value)
    except UnicodeDecodeError as e:
      raise ValueError(f"Found non-UTF8 feature value {value} in column "
                       f'"{column}"') from e
  return value


def slice_rows(extracts: types.Extracts, batch_size: int,
               slicing_specs: Sequence[config_pb2.SlicingSpec],
               model_names: Sequence[str]) -> Dict[SliceKey, np.ndarray]:
  """Every slice key of the batch with its rows (sorted, each once).

  As TFMA's SliceKeyExtractor: a feature is looked up in each model's
  transformed features first (their values pooled), then in the raw
  features; an example falls in one slice per distinct value; an example
  without the feature is in none of its slices.
  """
  transformed = extracts.get(constants.TRANSFORMED_FEATURES_KEY) or {}
  if len(model_names) > 1:
    transformed_dicts = [transformed[m] for m in model_names
                         if m in transformed]
  else:
    transformed_dicts = [transformed] if transformed else []
  raw = extracts.get(constants.FEATURES_KEY) or {}
  result = {}
  for spec in slicing_specs:
    if not spec.feature_keys:
      result[()] = np.arange(batch_size)
      continue
    column = spec.feature_keys[0]
    found = [d[column] for d in transformed_dicts
             if d.get(column) is not None]
    if not found and raw.get(column) is not None:
      found = [raw[column]]
    groups = collections.defaultdict(list)
    for value in found:
      rows, values = _rows_and_values(value, batch_size, column)
      for row, item in zip(rows.tolist(), values.tolist()):
        groups[_slice_value(item, column)].append(row)
    for item, rows in groups.items():
      result[((column, item),)] = np.unique(rows)
  return result


# --- The Beam part.

class _SlicedMetricsCombineFn(beam.CombineFn):
  """Batches in; per slice, one accumulator per metric computation."""

  def __init__(self, eval_config: config_pb2.EvalConfig,
               computations: List[metric_types.MetricComputation]):
    self._eval_config = eval_config
    self._combiners = [batched_combiner(c) for c in computations]
    self._model_names = [s.name for s in eval_config.model_specs]

  def create_accumulator(self) -> Dict[SliceKey, List[np.ndarray]]:
    return {}

  def add_input(self, accumulator, extracts: types.Extracts):
    batch = _Batch(extracts, self._eval_config)
    for key, rows in slice_rows(extracts, batch.size,
                                self._eval_config.slicing_specs,
                                self._model_names).items():
      if key not in accumulator:
        accumulator[key] = [c.acc() for c in self._combiners]
      for combiner, acc in zip(self._combiners, accumulator[key]):
        if key == () or not combiner.overall_only:
          combiner.add(acc, batch, rows)
    return accumulator

  def merge_accumulators(self, accumulators):
    """Sums into the first accumulator (Beam lets a merge modify only it)."""
    accumulators = iter(accumulators)
    result = next(accumulators)
    for accumulator in accumulators:
      for key, accs in accumulator.items():
        if key not in result:
          result[key] = [acc.copy() for acc in accs]
        else:
          for total, acc in zip(result[key], accs):
            total += acc
    return result

  def extract_output(self, accumulator):
    # The sums themselves: _slice_metrics turns them into TFMA's outputs
    # slice by slice.
    return accumulator

  def slice_metrics(self, accumulator: Dict[SliceKey, List[np.ndarray]],
                    derived: List[metric_types.DerivedMetricComputation],
                    baseline_name: str
                   ) -> Iterable[Tuple[SliceKey, Dict[Any, Any]]]:
    """Per slice, the combiners' outputs, then what TFMA's evaluator adds
    after its combine (derived metrics, candidate-minus-baseline diffs) and
    keeps (no private metrics). In one step: the private 10,000-bucket
    histograms never leave it (Beam would encode every bucket)."""
    for key, accs in accumulator.items():
      result = {}
      for combiner, acc in zip(self._combiners, accs):
        result.update(combiner.output(acc))
      for computation in derived:
        result.update(computation.result(result))
      if baseline_name:
        result.update(_diffs(result, baseline_name))
      yield tfma_evaluator._remove_private_metrics(key, result)  # pylint: disable=protected-access


def _diffs(metrics: Dict[Any, Any], baseline_name: str) -> Dict[Any, Any]:
  """Candidate minus baseline of every diffable public metric, keyed as
  TFMA's evaluator keys them (is_diff)."""
  diffs = {}
  for k, v in metrics.items():
    if (tfma_evaluator._is_private_metrics(k) or k.is_diff or  # pylint: disable=protected-access
        k.model_name == baseline_name):
      continue
    base = k.make_baseline_key(baseline_name)
    if base in metrics and tfma_evaluator._is_metric_diffable(v):  # pylint: disable=protected-access
      diffs[k.make_diff_key()] = v - metrics[base]
  return diffs


def check_supported(eval_config: config_pb2.EvalConfig) -> None:
  """Refuses, naming it, any part of eval_config this evaluator would not
  compute as TFMA does."""
  options = eval_config.options
  if (options.compute_confidence_intervals.value or
      options.min_slice_size.value > 1 or eval_config.cross_slicing_specs or
      any(s.query_key for s in eval_config.metrics_specs)):
    raise ValueError("the batched evaluator computes no confidence "
                     "intervals, min_slice_size, cross slices or query keys")
  for spec in eval_config.slicing_specs:
    _check_slicing(spec)
  for spec in eval_config.model_specs:
    if spec.example_weight_key or spec.example_weight_keys:
      raise ValueError(f"model {spec.name!r}: the batched evaluator does not "
                       "support example weights")
  for computation in _computations(eval_config).non_derived_computations:
    batched_combiner(computation)


def _computations(eval_config: config_pb2.EvalConfig):
  return tfma_evaluator._filter_and_separate_computations(  # pylint: disable=protected-access
      metric_specs.to_computations(list(eval_config.metrics_specs),
                                   eval_config=eval_config))


@beam.ptransform_fn
def _EvaluateInBatches(  # pylint: disable=invalid-name
    extracts: beam.PCollection, eval_config: config_pb2.EvalConfig
) -> Dict[str, beam.PCollection]:
  """The Evaluation TFMA's MetricsPlotsAndValidationsEvaluator returns."""
  computations = _computations(eval_config)
  baseline = model_util.get_baseline_model_spec(eval_config)
  combine = _SlicedMetricsCombineFn(eval_config,
                                    computations.non_derived_computations)
  sliced = (
      extracts
      | "CombineSlicesInBatches" >> beam.CombineGlobally(combine)
      .without_defaults()
      | "MetricsPerSlice" >> beam.FlatMap(
          combine.slice_metrics, computations.derived_computations,
          baseline.name if baseline else ""))
  metrics = sliced | "FilterByMetrics" >> beam.Map(
      tfma_evaluator._filter_by_key_type, metric_types.MetricKey)  # pylint: disable=protected-access
  return {
      constants.METRICS_KEY: metrics,
      constants.PLOTS_KEY: sliced | "FilterByPlots" >> beam.Map(
          tfma_evaluator._filter_by_key_type, metric_types.PlotKey),  # pylint: disable=protected-access
      constants.ATTRIBUTIONS_KEY: sliced | "FilterByAttributions" >> beam.Map(
          tfma_evaluator._filter_by_key_type, metric_types.AttributionsKey),  # pylint: disable=protected-access
      constants.VALIDATIONS_KEY: metrics | "ValidateMetrics" >> beam.Map(
          metrics_validator.validate_metrics, eval_config),
  }


def BatchedMetricsEvaluator(  # pylint: disable=invalid-name
    eval_config: config_pb2.EvalConfig, run_after: str) -> evaluator.Evaluator:
  """A TFMA Evaluator of eval_config's metrics on batched extracts: put it
  after the last batched extractor (before UnbatchExtractor)."""
  check_supported(eval_config)
  return evaluator.Evaluator(
      stage_name=STAGE_NAME, run_after=run_after,
      ptransform=_EvaluateInBatches(eval_config=eval_config))  # pylint: disable=no-value-for-parameter
