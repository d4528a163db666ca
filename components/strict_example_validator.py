"""ExampleValidator that stops the pipeline when the data has anomalies.

TFX's ExampleValidator only records anomalies; the pipeline would go on and
train on a column full of garbage. This one fails its execution with the
anomalies spelled out, so Transform and Trainer never see such data. The
anomalies file is still written to the (failed) execution's output directory.

Before that, every split must have MIN_EACH_LABEL clicks and as many
non-clicks: a wrong label column or a split without clicks would otherwise
train a model and end in "auc 0.0000" and "calibration nan" at the gate.
The counts are RawCtrExampleGen's, of every row (its Examples'
`<split>_rows` and `<split>_clicks`), not the statistics', which are of a
sample above a million rows and could miss a rare label.
"""

import os
from typing import Any, Dict, List, Mapping, Optional, Tuple

from tensorflow_data_validation.utils import anomalies_util
from tfx import types
from tfx.components.example_validator import executor as validator_executor
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
  """The examples do not match the curated schema, or a split lacks a
  label (bad input: the CLI prints the message alone)."""


def describe_labels(split: str, rows: int, clicks: int) -> str:
  """What a split's labels are, in words."""
  if not rows:
    return f"the {split} split has no examples"
  if clicks in (0, rows):
    return (f"the {split} split has {rows:,} examples, all with label "
            f"{int(clicks == rows)}")
  return (f"the {split} split has {rows:,} examples, {clicks:,} with label 1 "
          f"and {rows - clicks:,} with label 0")


def label_problem(counts: Mapping[str, Tuple[int, int]], label: str,
                  minimum: int = MIN_EACH_LABEL) -> Optional[str]:
  """One line naming the splits with fewer than `minimum` clicks or
  non-clicks, or None when every split has enough.

  Args:
    counts: split name -> (examples, examples labelled 1).
    label: the label column's name, for the message.
    minimum: fewest examples of each label a split may have.
  """
  short = [describe_labels(split, rows, clicks)
           for split, (rows, clicks) in counts.items()
           if min(clicks, rows - clicks) < minimum]
  if not short:
    return None
  return (f"{'; '.join(short)}: each split needs at least {minimum} "
          f"examples with label 1 and {minimum} with label 0; check that "
          f"column {label!r} holds the clicks and that the input has rows of "
          "both (the pipeline stops before Transform)")


def describe_anomalies(split: str, anomalies) -> List[str]:
  """One readable line per anomaly: split, feature, what is wrong."""
  lines = [f"[{split}] feature {name!r}: " + "; ".join(
      reason.short_description for reason in info.reason) +
           f" ({info.description})"
           for name, info in sorted(anomalies.anomaly_info.items())]
  if anomalies.HasField("dataset_anomaly_info"):
    info = anomalies.dataset_anomaly_info
    lines.append(f"[{split}] dataset: {info.short_description}"
                 f" ({info.description})")
  return lines


# The execution property naming the label column (for label_problem's
# message).
LABEL_KEY = "label_feature"


class Executor(validator_executor.Executor):
  """Refuses a split without both labels, then validates like
  ExampleValidator and raises on any anomaly."""

  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]],
         exec_properties: Dict[str, Any]):
    examples = artifact_utils.get_single_instance(
        input_dict[standard_component_specs.EXAMPLES_KEY])
    labels = label_problem(
        {split: (examples.get_int_custom_property(f"{split}_rows"),
                 examples.get_int_custom_property(f"{split}_clicks"))
         for split in artifact_utils.decode_split_names(examples.split_names)},
        exec_properties[LABEL_KEY])
    if labels:
      raise DataAnomaliesError(labels)
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


class StrictExampleValidatorSpec(
    standard_component_specs.ExampleValidatorSpec):
  """ExampleValidator's spec with the Examples whose label counts are
  checked, and the label column's name."""
  PARAMETERS = {
      **standard_component_specs.ExampleValidatorSpec.PARAMETERS,
      LABEL_KEY: component_spec.ExecutionParameter(type=str),
  }
  INPUTS = {
      **standard_component_specs.ExampleValidatorSpec.INPUTS,
      standard_component_specs.EXAMPLES_KEY:
          component_spec.ChannelParameter(type=standard_artifacts.Examples),
  }


class StrictExampleValidator(base_component.BaseComponent):
  """ExampleValidator whose execution fails on anomalies, and on a split
  without a few examples of each label."""
  SPEC_CLASS = StrictExampleValidatorSpec
  EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

  def __init__(self, examples: types.BaseChannel,
               statistics: types.BaseChannel, schema: types.BaseChannel,
               label_feature: str):
    super().__init__(spec=StrictExampleValidatorSpec(
        examples=examples, statistics=statistics, schema=schema,
        anomalies=types.Channel(type=standard_artifacts.ExampleAnomalies),
        label_feature=label_feature))
