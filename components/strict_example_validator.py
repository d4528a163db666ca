"""ExampleValidator that stops the pipeline when the data has anomalies.

TFX's ExampleValidator only records anomalies; the pipeline would go on and
train on a column full of garbage. This one fails its execution with the
anomalies spelled out, so Transform and Trainer never see such data. The
anomalies file is still written to the (failed) execution's output directory.

Beside the schema (which keeps the label to 0 and 1), every split must have
a few examples of each label (label_validation, a TFDV custom validation on
the statistics, of the feature the component is given). A wrong label column or a split without clicks would otherwise train
a model and end in "auc 0.0000" and "calibration nan" at the gate.
"""

import os
from typing import Any, Dict, List

from tensorflow_data_validation.anomalies.proto import custom_validation_config_pb2
from tensorflow_data_validation.utils import anomalies_util
from tensorflow_data_validation.utils import stats_util
from tensorflow_metadata.proto.v0 import anomalies_pb2
from tfx import types
from tfx.components.example_validator import executor as validator_executor
from tfx.components.statistics_gen import executor as stats_executor
from tfx.dsl.components.base import base_component
from tfx.dsl.components.base import executor_spec
from tfx.types import artifact_utils
from tfx.types import component_spec
from tfx.types import standard_artifacts
from tfx.types import standard_component_specs


# Fewest clicks, and fewest non-clicks, a split may have: AUC needs both
# classes, and a handful is the least a model or a gate can learn from.
MIN_EACH_LABEL = 5


class DataAnomaliesError(ValueError):
  """The examples do not match the curated schema (bad input: the CLI
  prints the message alone)."""


def label_validation(label: str, minimum: int = MIN_EACH_LABEL
                    ) -> custom_validation_config_pb2.CustomValidationConfig:
  """A TFDV custom validation (SQL on each split's statistics): at least
  `minimum` clicks and `minimum` non-clicks (the schema's int_domain
  already keeps the label to 0 and 1)."""
  config = custom_validation_config_pb2.CustomValidationConfig()
  check = config.feature_validations.add()
  check.feature_path.step.append(label)
  stats = "feature.num_stats"
  count = f"{stats}.common_stats.num_non_missing"
  validation = check.validations.add()
  validation.sql_expression = (
      f"{count} * {stats}.mean >= {minimum} AND "
      f"{count} * (1 - {stats}.mean) >= {minimum}")
  validation.severity = anomalies_pb2.AnomalyInfo.ERROR
  validation.description = (f"fewer than {minimum} clicks or {minimum} "
                            "non-clicks")
  return config


def _label_counts(statistics, name: str) -> str:
  """What a label feature's values are, from its numeric statistics."""
  for feature in statistics.datasets[0].features:
    if feature.path.step == [name] or feature.name == name:
      stats = feature.num_stats
      count = stats.common_stats.num_non_missing
      clicks = round(count * stats.mean)
      return (f"{count:,} examples in the statistics: {clicks:,} labelled 1, "
              f"{count - clicks:,} labelled 0, values {stats.min:g} to "
              f"{stats.max:g}; is the label column the dataset's?")
  return "no statistics of it"


def describe_anomalies(split: str, anomalies, statistics=None) -> List[str]:
  """One readable line per anomaly: split, feature, what is wrong; a
  label check also says what the split's labels are (from `statistics`)."""
  lines = []
  for name, info in sorted(anomalies.anomaly_info.items()):
    line = f"[{split}] feature {name!r}: " + "; ".join(
        reason.short_description for reason in info.reason)
    custom = any(r.type == anomalies_pb2.AnomalyInfo.CUSTOM_VALIDATION
                 for r in info.reason)
    if custom and statistics is not None:
      line += f" ({_label_counts(statistics, name)})"
    else:
      line += f" ({info.description})"
    lines.append(line)
  if anomalies.HasField("dataset_anomaly_info"):
    info = anomalies.dataset_anomaly_info
    lines.append(f"[{split}] dataset: {info.short_description}"
                 f" ({info.description})")
  return lines


# The execution property naming the label feature label_validation checks.
LABEL_KEY = "label_feature"


class Executor(validator_executor.Executor):
  """Validates like ExampleValidator, with label_validation of the
  LABEL_KEY feature, then raises on any anomaly."""

  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]],
         exec_properties: Dict[str, Any]):
    exec_properties = {
        **exec_properties,
        standard_component_specs.CUSTOM_VALIDATION_CONFIG_KEY:
            label_validation(exec_properties[LABEL_KEY])}
    result = super().Do(input_dict, output_dict, exec_properties)
    artifact = artifact_utils.get_single_instance(
        output_dict[standard_component_specs.ANOMALIES_KEY])
    problems = []
    statistics = input_dict[standard_component_specs.STATISTICS_KEY]
    for split in artifact_utils.decode_split_names(artifact.split_names):
      path = os.path.join(artifact_utils.get_split_uri([artifact], split),
                          validator_executor.DEFAULT_FILE_NAME)
      problems += describe_anomalies(
          split, anomalies_util.load_anomalies_binary(path),
          stats_util.load_stats_binary(os.path.join(
              artifact_utils.get_split_uri(statistics, split),
              stats_executor.DEFAULT_FILE_NAME)))
    if problems:
      raise DataAnomaliesError(
          "the examples do not match the schema; the pipeline stops before "
          "Transform. Anomalies:\n  " + "\n  ".join(problems) +
          f"\nFull report: {artifact.uri}")
    return result


class StrictExampleValidatorSpec(
    standard_component_specs.ExampleValidatorSpec):
  """ExampleValidator's spec with the label feature's name.

  A name rather than TFX's custom_validation_config: a proto execution
  property does not compile for Kubeflow V2 in TFX 1.16 (the compiler
  refuses its placeholder).
  """
  PARAMETERS = {
      **standard_component_specs.ExampleValidatorSpec.PARAMETERS,
      LABEL_KEY: component_spec.ExecutionParameter(type=str),
  }


class StrictExampleValidator(base_component.BaseComponent):
  """ExampleValidator whose execution fails on anomalies, and on a split
  without a few examples of each label."""
  SPEC_CLASS = StrictExampleValidatorSpec
  EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

  def __init__(self, statistics: types.BaseChannel,
               schema: types.BaseChannel, label_feature: str):
    super().__init__(spec=StrictExampleValidatorSpec(
        statistics=statistics, schema=schema,
        anomalies=types.Channel(type=standard_artifacts.ExampleAnomalies),
        label_feature=label_feature))
