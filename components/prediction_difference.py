"""TFMA metrics of Relative Prediction Difference (PD): reproducibility.

Anil et al., "On the Factory Floor: ML Engineering for Industrial-Scale Ads
Recommendation Models" (2022), section 5: two models trained identically
but for the random seed give equal AUC yet different predictions per
example, and auctions then change after every retrain. They measure it as

  PD = 1/M * sum_i |y_i1 - y_i2| / ((y_i1 + y_i2) / 2)

over the M eval examples (weighted: sum_i w_i * term_i / sum_i w_i).

Two metrics, computed by TFMA on the Evaluator's examples and slices:
* ReplicaPredictionDifference: between the replicas one Trainer trained
  (trainer_module.contract.replica_output outputs of the same model), the
  mean over all replica pairs when there are more than two. The gate's
  optional --max-pd check bounds it on the overall slice.
* PredictionDifferenceVsBaseline: between the candidate's served prediction
  and the baseline MODEL's (the latest pushed model, which the Evaluator
  gets as its baseline): the churn between pushes. Like TFMA's flip rates
  (tensorflow_model_analysis/metrics/flip_metrics.py) it reads both models'
  predictions of each example; on a first run there is no baseline and so
  no value.
"""

import itertools
from typing import (Any, Callable, Dict, Iterable, List, Optional, Sequence,
                    Tuple)

import apache_beam as beam
import numpy as np
from tensorflow_model_analysis.metrics import metric_types
from tensorflow_model_analysis.metrics import metric_util
from tensorflow_model_analysis.proto import config_pb2
from tensorflow_model_analysis.utils import model_util

from trainer_module import contract
from trainer_module.contract import relative_differences


def _pairs(outputs: Sequence[str]) -> List[Tuple[str, str]]:
  return list(itertools.combinations(outputs, 2))


class _DifferenceCombiner(beam.CombineFn):
  """Sums w * relative difference of each pair of (model, output)
  predictions of every example, and the weights.

  The accumulator is [sum per pair..., total weight]; the output is the
  accumulator itself, _mean_over_pairs turns it into PD.
  """

  def __init__(self, key: metric_types.MetricKey,
               eval_config: Optional[config_pb2.EvalConfig],
               sources: Sequence[Tuple[str, str]], example_weighted: bool):
    self._key = key
    self._eval_config = eval_config
    self._sources = list(sources)  # (model_name, output_name)
    self._pairs = _pairs(range(len(self._sources)))
    self._example_weighted = example_weighted

  def create_accumulator(self) -> np.ndarray:
    return np.zeros(len(self._pairs) + 1)

  def _prediction(self, element, model_name: str, output_name: str):
    _, prediction, weight = next(
        metric_util.to_label_prediction_example_weight(
            inputs=element, eval_config=self._eval_config,
            model_name=model_name, output_name=output_name,
            example_weighted=self._example_weighted, flatten=True,
            allow_none=True))
    return float(np.ravel(prediction)[0]), metric_util.safe_to_scalar(weight)

  def add_input(self, accumulator: np.ndarray,
                element: metric_types.StandardMetricInputs) -> np.ndarray:
    values = [self._prediction(element, model, output)
              for model, output in self._sources]
    predictions = np.array([v for v, _ in values])
    weight = values[0][1]
    first, second = (predictions[[p[i] for p in self._pairs]]
                     for i in (0, 1))
    accumulator[:-1] += weight * relative_differences(first, second)
    accumulator[-1] += weight
    return accumulator

  def add_batch(self, accumulator: np.ndarray,
                labels_and_predictions_of: Callable[
                    [str, str], Tuple[np.ndarray, np.ndarray]]) -> None:
    """add_input over a batch's rows at once (components.sliced_metrics):
    labels_and_predictions_of(model_name, output_name) gives the rows'
    labels and predictions."""
    if self._example_weighted:
      raise ValueError(f"{self._key.name}: the batched evaluator does not "
                       "support example weights")
    predictions = [labels_and_predictions_of(model, output)[1]
                   for model, output in self._sources]
    for i, (first, second) in enumerate(self._pairs):
      accumulator[i] += np.sum(relative_differences(predictions[first],
                                                    predictions[second]))
    accumulator[-1] += len(predictions[0])

  def merge_accumulators(self, accumulators: Iterable[np.ndarray]
                        ) -> np.ndarray:
    return np.sum(list(accumulators), axis=0)

  def extract_output(self, accumulator: np.ndarray
                    ) -> Dict[metric_types.MetricKey, np.ndarray]:
    return {self._key: accumulator}


def _computations(name: str, key: metric_types.MetricKey,
                  eval_config: Optional[config_pb2.EvalConfig],
                  sources: Sequence[Tuple[str, str]],
                  example_weighted: bool) -> metric_types.MetricComputations:
  """The combiner over `sources` and the PD derived from its sums."""
  sums_key = metric_types.MetricKey(
      name=metric_util.generate_private_name_from_arguments(
          name=f"_{name}_sums", sources=list(sources)),
      model_name=key.model_name, output_name=key.output_name,
      example_weighted=example_weighted)
  combiner = metric_types.MetricComputation(
      keys=[sums_key], preprocessors=None,
      combiner=_DifferenceCombiner(sums_key, eval_config, sources,
                                   example_weighted))

  def result(metrics: Dict[metric_types.MetricKey, Any]
            ) -> Dict[metric_types.MetricKey, float]:
    sums = metrics[sums_key]
    return {key: float(np.mean(sums[:-1]) / sums[-1]) if sums[-1] > 0
            else float("nan")}

  return [combiner, metric_types.DerivedMetricComputation(keys=[key],
                                                          result=result)]


class ReplicaPredictionDifference(metric_types.Metric):
  """PD between the replica outputs of each model (mean over pairs)."""

  def __init__(self, name: str = contract.REPLICA_PD, replicas: int = 2):
    if replicas < 2:
      raise ValueError(f"PD between replicas needs at least 2, got "
                       f"{replicas}")
    super().__init__(self._replica_computations, name=name,
                     replicas=replicas)

  @staticmethod
  def _replica_computations(
      name: str, replicas: int,
      eval_config: Optional[config_pb2.EvalConfig] = None,
      model_names: Iterable[str] = ("",),
      output_names: Optional[Iterable[str]] = ("",),
      example_weighted: bool = False
  ) -> metric_types.MetricComputations:
    computations = []
    del output_names  # The replicas' outputs, by name; keyed as output "".
    for model_name in model_names or ("",):
      key = metric_types.MetricKey(name=name, model_name=model_name,
                                   example_weighted=example_weighted)
      computations += _computations(
          name, key, eval_config,
          [(model_name, contract.replica_output(i)) for i in range(replicas)],
          example_weighted)
    return computations


class PredictionDifferenceVsBaseline(metric_types.Metric):
  """PD between each candidate's prediction and the baseline model's (the
  same output): churn against the model being served. None without a
  baseline."""

  def __init__(self, name: str = contract.BASELINE_PD):
    super().__init__(self._baseline_computations, name=name)

  @staticmethod
  def _baseline_computations(
      name: str, eval_config: Optional[config_pb2.EvalConfig] = None,
      model_names: Iterable[str] = ("",),
      output_names: Optional[Iterable[str]] = ("",),
      example_weighted: bool = False
  ) -> metric_types.MetricComputations:
    baseline = (model_util.get_baseline_model_spec(eval_config)
                if eval_config else None)
    if baseline is None:
      return []
    computations = []
    for model_name in model_names or ("",):
      if model_name == baseline.name:
        continue
      for output_name in output_names or ("",):
        key = metric_types.MetricKey(name=name, model_name=model_name,
                                     output_name=output_name,
                                     example_weighted=example_weighted)
        computations += _computations(
            name, key, eval_config,
            [(model_name, output_name), (baseline.name, output_name)],
            example_weighted)
    return computations


metric_types.register_metric(ReplicaPredictionDifference)
metric_types.register_metric(PredictionDifferenceVsBaseline)
