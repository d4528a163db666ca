"""TFMA metric for the gate's logistic-regression check.

Every exported model also serves the logistic-regression baseline that the
Trainer trained beside it on the same transformed features (second output
of the serving signature, trainer_module.contract.LR_OUTPUT). TFMA gives every
output its own metrics, but its thresholds compare one output with a bound
or with the same output of a baseline MODEL, never two outputs. So the check
is this metric: the model's AUC minus the logistic regression's, computed
by TFMA on the same examples and slices, with a lower bound of -margin in
the EvalConfig. TFMA's validation, and so the Evaluator's blessing, then
decide on it like on any other threshold: a model that loses to logistic
regression is not blessed and not pushed.

The AUCs are TFMA's own AUC computations (shared with the AUC metrics of
the same outputs: TFMA computes identical computations once).
"""

from typing import Any, Dict, Optional

from tensorflow_model_analysis.metrics import confusion_matrix_metrics
from tensorflow_model_analysis.metrics import metric_types
from tensorflow_model_analysis.metrics import metric_util
from tensorflow_model_analysis.proto import config_pb2

from trainer_module.contract import LR_OUTPUT

AUC_OVER_LR = "auc_over_logistic_regression"


class AUCOverLogisticRegression(metric_types.Metric):
  """AUC of the output minus AUC of the logistic-regression output."""

  def __init__(self, name: str = AUC_OVER_LR,
               baseline_output: str = LR_OUTPUT):
    super().__init__(metric_util.merge_per_key_computations(_auc_over),
                     name=name, baseline_output=baseline_output)


metric_types.register_metric(AUCOverLogisticRegression)


def _auc_key(computations: metric_types.MetricComputations
            ) -> metric_types.MetricKey:
  """The key of the AUC value among TFMA's AUC computations."""
  return computations[-1].keys[-1]


def _auc_over(name: str = AUC_OVER_LR,
              baseline_output: str = LR_OUTPUT,
              eval_config: Optional[config_pb2.EvalConfig] = None,
              model_name: str = "",
              output_name: str = "",
              example_weighted: bool = False
             ) -> metric_types.MetricComputations:
  """TFMA computations of AUC(output) - AUC(baseline_output), one model."""
  key = metric_types.MetricKey(name=name, model_name=model_name,
                               output_name=output_name,
                               example_weighted=example_weighted)
  auc = confusion_matrix_metrics.AUC()
  model_auc = auc.computations(eval_config=eval_config,
                               model_names=[model_name],
                               output_names=[output_name],
                               example_weighted=example_weighted)
  lr_auc = auc.computations(eval_config=eval_config,
                            model_names=[model_name],
                            output_names=[baseline_output],
                            example_weighted=example_weighted)
  model_key, lr_key = _auc_key(model_auc), _auc_key(lr_auc)

  def result(metrics: Dict[metric_types.MetricKey, Any]
            ) -> Dict[metric_types.MetricKey, float]:
    return {key: float(metrics[model_key]) - float(metrics[lr_key])}

  return model_auc + lr_auc + [
      metric_types.DerivedMetricComputation(keys=[key], result=result)]
