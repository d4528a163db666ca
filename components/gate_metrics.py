"""TFMA metrics of the gate: every check with its confidence interval.

The gate's margins (0.001 AUC, a +-10% calibration band) are below the
noise of a few thousand eval rows and above all of it at millions, so a
check on the point estimate refuses good models on small data. TFMA's
thresholds compare one metric with a bound; each check therefore reads the
confidence bound (trainer_module.paired_statistics.CONFIDENCE) on the side
of the pass: it fails only when the whole interval lies beyond the bound,
i.e. the difference is beyond the margin and beyond the noise.

A metric is named by the bound its threshold reads (TFMA keys a threshold
by the metric's name) and also gives the other bound, and the estimate where
TFMA's own metrics have none, so the report shows each interval:
* AUCInterval: auc_lower, auc_upper of each model (DeLong). The floor:
  auc_upper >= min_auc.
* CalibrationInterval: calibration_lower, calibration_upper (delta method).
  The band: calibration_upper >= low and calibration_lower <= high.
* AUCOverLogisticRegression: the model's AUC minus that of the
  logistic-regression output of the same SavedModel
  (trainer_module.contract.LR_OUTPUT), paired on the same rows by DeLong:
  auc_over_logistic_regression, _lower, _upper. The check:
  auc_over_logistic_regression_upper >= -max_auc_below_lr. (TFMA compares
  an output with a bound or with the same output of a baseline MODEL, never
  two outputs: hence a metric.)
* AUCChange, LogLossChange: the candidate minus the baseline model (the
  served one, components.baseline), paired on the same rows:
  auc_change(_lower, _upper), log_loss_change(_lower, _upper). Keyed as TFMA
  keys candidate-minus-baseline diffs, so they take TFMA's change thresholds
  (auc_change_upper >= -max_auc_drop, log_loss_change_lower <=
  max_logloss_increase), which TFMA drops on a first run, without a baseline
  (these metrics then have no value either).

The statistics are exact on the rows: one combiner per set of scores keeps
every row's label and scores (float32). components.sliced_metrics feeds it
the overall slice only (OVERALL_ONLY: the gate checks only that slice), so
the memory is 4 bytes per row and column, once; the other slices get NaN.
"""

from typing import (Any, Callable, Dict, Iterable, List, Mapping, Optional,
                    Sequence)
from typing import Tuple

import apache_beam as beam
import numpy as np
from tensorflow_model_analysis.metrics import metric_types
from tensorflow_model_analysis.metrics import metric_util
from tensorflow_model_analysis.proto import config_pb2
from tensorflow_model_analysis.utils import model_util

from trainer_module import paired_statistics
from trainer_module.contract import LR_OUTPUT

LOWER, UPPER = "lower", "upper"
AUC = "auc"
CALIBRATION = "calibration"
AUC_OVER_LR = "auc_over_logistic_regression"
AUC_CHANGE = "auc_change"
LOG_LOSS_CHANGE = "log_loss_change"
STEMS = (AUC, CALIBRATION, AUC_OVER_LR, AUC_CHANGE, LOG_LOSS_CHANGE)

Source = Tuple[str, str]  # (model_name, output_name)
Statistic = Callable[..., paired_statistics.Estimate]


def bound_name(stem: str, bound: str) -> str:
  """The name of a statistic's LOWER or UPPER confidence bound."""
  return f"{stem}_{bound}"


class _Rows(beam.CombineFn):
  """Every row's label and the scores of `sources`, as an (n, 1 + scores)
  float32 array: the statistics need the rows, not sums."""

  OVERALL_ONLY = True

  def __init__(self, key: metric_types.MetricKey,
               eval_config: Optional[config_pb2.EvalConfig],
               sources: Sequence[Source], example_weighted: bool):
    if example_weighted:
      raise ValueError(f"{key.name}: the gate's intervals are of "
                       "unweighted examples")
    self._key = key
    self._eval_config = eval_config
    self._sources = list(sources)

  def create_accumulator(self) -> List[np.ndarray]:
    return []

  def add_input(self, accumulator: List[np.ndarray],
                element: metric_types.StandardMetricInputs
               ) -> List[np.ndarray]:
    row = []
    for model_name, output_name in self._sources:
      label, prediction, _ = next(
          metric_util.to_label_prediction_example_weight(
              inputs=element, eval_config=self._eval_config,
              model_name=model_name, output_name=output_name, flatten=True))
      if not row:
        row.append(float(np.ravel(label)[0]))
      row.append(float(np.ravel(prediction)[0]))
    accumulator.append(np.array([row], np.float32))
    return accumulator

  def add_batch(self, accumulator: List[np.ndarray],
                labels_and_predictions_of: Callable[
                    [str, str], Tuple[np.ndarray, np.ndarray]]) -> None:
    """add_input over a batch's rows at once (components.sliced_metrics)."""
    pairs = [labels_and_predictions_of(*s) for s in self._sources]
    accumulator.append(np.column_stack(
        [pairs[0][0]] + [p for _, p in pairs]).astype(np.float32))

  def merge_accumulators(self, accumulators: Iterable[List[np.ndarray]]
                        ) -> List[np.ndarray]:
    return [chunk for accumulator in accumulators for chunk in accumulator]

  def extract_output(self, accumulator: List[np.ndarray]
                    ) -> Dict[metric_types.MetricKey, np.ndarray]:
    return {self._key: np.concatenate(accumulator) if accumulator else
            np.zeros((0, 1 + len(self._sources)), np.float32)}


def _interval(stem: str, statistic: Statistic, sources: Sequence[Source],
              eval_config: Optional[config_pb2.EvalConfig],
              example_weighted: bool, with_estimate: bool = False,
              is_diff: bool = False) -> metric_types.MetricComputations:
  """The rows of `sources` and statistic(labels, *scores)'s bounds (and
  estimate), keyed by the first source's model and output."""
  model_name, output_name = sources[0]
  rows_key = metric_types.MetricKey(
      name=metric_util.generate_private_name_from_arguments(
          name="_gate_rows", sources=list(sources)),
      model_name=model_name, output_name=output_name,
      example_weighted=example_weighted)

  def key(name: str) -> metric_types.MetricKey:
    return metric_types.MetricKey(
        name=name, model_name=model_name, output_name=output_name,
        example_weighted=example_weighted, is_diff=is_diff)

  keys = {bound: key(bound_name(stem, bound)) for bound in (LOWER, UPPER)}
  if with_estimate:
    keys[stem] = key(stem)

  def result(metrics: Dict[metric_types.MetricKey, Any]
            ) -> Dict[metric_types.MetricKey, float]:
    rows = metrics[rows_key]
    if not len(rows):
      # A slice the gate does not check (OVERALL_ONLY): NaN, as TFMA's
      # validation takes a threshold of a metric without a value for a
      # failure, even on a slice the threshold is not for.
      return {k: float("nan") for k in keys.values()}
    estimate = statistic(rows[:, 0], *rows[:, 1:].T)
    low, high = estimate.interval()
    values = {keys[LOWER]: low, keys[UPPER]: high}
    if with_estimate:
      values[keys[stem]] = estimate.value
    return values

  return [metric_types.MetricComputation(
              keys=[rows_key], preprocessors=None,
              combiner=_Rows(rows_key, eval_config, sources,
                             example_weighted)),
          metric_types.DerivedMetricComputation(keys=list(keys.values()),
                                                result=result)]


class _IntervalMetric(metric_types.Metric):
  """A gate statistic, named by the bound a threshold reads."""

  STEM = ""

  def __init__(self, bound: str = UPPER, name: Optional[str] = None):
    if bound not in (LOWER, UPPER):
      raise ValueError(f"bound must be {LOWER!r} or {UPPER!r}, got {bound!r}")
    super().__init__(self._computations,
                     name=name or bound_name(self.STEM, bound))

  def _computations(self, name: str,
                    eval_config: Optional[config_pb2.EvalConfig] = None,
                    model_names: Iterable[str] = ("",),
                    output_names: Optional[Iterable[str]] = ("",),
                    example_weighted: bool = False
                   ) -> metric_types.MetricComputations:
    del name  # The keys are the stem's bounds.
    computations = []
    for model_name in model_names or ("",):
      for output_name in output_names or ("",):
        computations += self.interval(eval_config, model_name, output_name,
                                      example_weighted)
    return computations

  def interval(self, eval_config, model_name: str, output_name: str,
               example_weighted: bool) -> metric_types.MetricComputations:
    raise NotImplementedError


class AUCInterval(_IntervalMetric):
  """auc_lower, auc_upper: the output's AUC interval (DeLong)."""

  STEM = AUC

  def interval(self, eval_config, model_name, output_name, example_weighted):
    return _interval(AUC, paired_statistics.auc, [(model_name, output_name)],
                     eval_config, example_weighted)


class CalibrationInterval(_IntervalMetric):
  """calibration_lower, calibration_upper: mean prediction / mean label."""

  STEM = CALIBRATION

  def interval(self, eval_config, model_name, output_name, example_weighted):
    return _interval(CALIBRATION, paired_statistics.calibration,
                     [(model_name, output_name)], eval_config,
                     example_weighted)


class AUCOverLogisticRegression(_IntervalMetric):
  """The output's AUC minus the logistic-regression output's, paired."""

  STEM = AUC_OVER_LR

  def interval(self, eval_config, model_name, output_name, example_weighted):
    return _interval(AUC_OVER_LR, paired_statistics.auc_difference,
                     [(model_name, output_name), (model_name, LR_OUTPUT)],
                     eval_config, example_weighted, with_estimate=True)


class _ChangeVsBaseline(_IntervalMetric):
  """Candidate minus baseline model, paired; none without a baseline."""

  STATISTIC: Statistic = None

  def interval(self, eval_config, model_name, output_name, example_weighted):
    baseline = (model_util.get_baseline_model_spec(eval_config)
                if eval_config else None)
    if baseline is None or model_name == baseline.name:
      return []
    return _interval(self.STEM, type(self).STATISTIC,
                     [(model_name, output_name), (baseline.name, output_name)],
                     eval_config, example_weighted, with_estimate=True,
                     is_diff=True)


class AUCChange(_ChangeVsBaseline):
  """The candidate's AUC minus the baseline model's (DeLong)."""

  STEM = AUC_CHANGE
  STATISTIC = staticmethod(paired_statistics.auc_difference)


class LogLossChange(_ChangeVsBaseline):
  """The candidate's log loss minus the baseline model's."""

  STEM = LOG_LOSS_CHANGE
  STATISTIC = staticmethod(paired_statistics.log_loss_difference)


for _metric in (AUCInterval, CalibrationInterval, AUCOverLogisticRegression,
                AUCChange, LogLossChange):
  metric_types.register_metric(_metric)


def interval_text(metrics: Mapping[str, float], stem: str, suffix: str = "",
                  signed: bool = False) -> Optional[str]:
  """'0.7310 [0.7281, 0.7339]': a statistic and its interval from a run's
  metrics by TFMA's names (suffix '_diff' for a change), None if absent."""
  names = [stem] + [bound_name(stem, b) for b in (LOWER, UPPER)]
  values = [metrics.get(name + suffix) for name in names]
  if any(v is None for v in values):
    return None
  value, low, high = (f"{v:+.4f}" if signed else f"{v:.4f}" for v in values)
  return f"{value} [{low}, {high}]"
