"""ExampleValidator that stops the pipeline when the data has anomalies.

TFX's ExampleValidator only records anomalies; the pipeline would go on and
train on a column full of garbage. This one fails its execution with the
anomalies spelled out, so Transform and Trainer never see such data. The
anomalies file is still written to the (failed) execution's output directory.
"""

import os
from typing import Any, Dict, List

from tensorflow_data_validation.utils import anomalies_util
from tfx import types
from tfx.components.example_validator import component as example_validator
from tfx.components.example_validator import executor as validator_executor
from tfx.dsl.components.base import executor_spec
from tfx.types import artifact_utils
from tfx.types import standard_component_specs


class DataAnomaliesError(RuntimeError):
  """The examples do not match the curated schema."""


def describe_anomalies(split: str, anomalies) -> List[str]:
  """One readable line per anomaly: split, feature, what is wrong."""
  lines = [f"[{split}] feature {name!r}: {info.short_description}"
           f" ({info.description})"
           for name, info in sorted(anomalies.anomaly_info.items())]
  if anomalies.HasField("dataset_anomaly_info"):
    info = anomalies.dataset_anomaly_info
    lines.append(f"[{split}] dataset: {info.short_description}"
                 f" ({info.description})")
  return lines


class Executor(validator_executor.Executor):
  """Validates like ExampleValidator, then raises on any anomaly."""

  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]],
         exec_properties: Dict[str, Any]):
    result = super().Do(input_dict, output_dict, exec_properties)
    artifact = artifact_utils.get_single_instance(
        output_dict[standard_component_specs.ANOMALIES_KEY])
    problems = []
    for split in artifact_utils.decode_split_names(artifact.split_names):
      path = os.path.join(artifact_utils.get_split_uri([artifact], split),
                          validator_executor.DEFAULT_FILE_NAME)
      problems += describe_anomalies(
          split, anomalies_util.load_anomalies_binary(path))
    if problems:
      raise DataAnomaliesError(
          "the examples do not match the schema; the pipeline stops before "
          "Transform. Anomalies:\n  " + "\n  ".join(problems) +
          f"\nFull report: {artifact.uri}")
    return result


class StrictExampleValidator(example_validator.ExampleValidator):
  """ExampleValidator whose execution fails on anomalies."""
  EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)
