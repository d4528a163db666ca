"""Run the pipeline locally and say what it produced.

`run_pipeline` checks the input before any component starts, runs
`create_pipeline(config)` with BeamDagRunner (Beam DirectRunner) or
LocalDagRunner, and reads the outcome back from ML Metadata: where the
pushed model, the metadata store and the evaluation are.
"""

import dataclasses
import logging
import os
from typing import Optional, Tuple

from ml_metadata.metadata_store import metadata_store
import tensorflow_model_analysis as tfma
from ml_metadata.proto import metadata_store_pb2
from tfx import v1 as tfx
from tfx.orchestration.beam.beam_dag_runner import BeamDagRunner

from components import baseline
from components import lr_gate
from pipeline.config import PipelineConfig
from pipeline.pipeline import create_pipeline
from pipeline.pipeline import local_ir


class InputError(ValueError):
  """The raw data path is missing or empty."""


def check_input(path: str) -> None:
  """Fails before any component starts if there is nothing to read."""
  if not os.path.exists(path):
    raise InputError(f"input path {path!r} does not exist")
  files = ([os.path.join(path, f) for f in sorted(os.listdir(path))
            if not f.startswith(".")] if os.path.isdir(path) else [path])
  files = [f for f in files if os.path.isfile(f)]
  if not files:
    raise InputError(f"input directory {path!r} holds no files")
  if all(os.path.getsize(f) == 0 for f in files):
    raise InputError(f"input {path!r} is empty: "
                     f"{', '.join(os.path.basename(f) for f in files)}")


@dataclasses.dataclass(frozen=True)
class RunOutcome:
  """What a finished run produced, read from ML Metadata."""
  metadata_path: str
  pushed: bool
  pushed_model: Optional[str]
  evaluation: Optional[str]
  model: Optional[str]
  failed_checks: Tuple[str, ...] = ()
  ingestion: Optional[str] = None

  def describe(self) -> str:
    lines = [f"metadata store:   {self.metadata_path}",
             f"ingested:         {self.ingestion}",
             f"trained model:    {self.model}",
             f"evaluation:       {self.evaluation}"]
    if self.pushed:
      lines.append(f"pushed model:     {self.pushed_model}")
    else:
      lines += [f"not pushed: {check}" for check in self.failed_checks or
                ("the model was not blessed",)]
    return "\n".join(lines)


def describe_failure(failure) -> str:
  """'auc 0.6012 < min 0.7000', or 'auc -0.0123 vs baseline < -0.0010'."""
  name = failure.metric_key.name
  if not failure.HasField("metric_value"):
    return f"{name}: {failure.message}"
  value = failure.metric_value.double_value.value
  threshold = failure.metric_threshold
  if failure.metric_key.is_diff:
    change = threshold.change_threshold
    higher_is_better = (change.direction ==
                        tfma.MetricDirection.HIGHER_IS_BETTER)
    return (f"{name} changed by {value:+.4f} vs the last blessed model "
            f"({'<' if higher_is_better else '>'} allowed "
            f"{change.absolute.value:+.4f})")
  bound = threshold.value_threshold
  if name == lr_gate.AUC_OVER_LR:
    return (f"the model's AUC is {-value:.4f} below the logistic-regression "
            f"baseline's (allowed {-bound.lower_bound.value:.4f}): a model "
            "that loses to logistic regression is not pushed")
  if bound.HasField("lower_bound") and value < bound.lower_bound.value:
    return f"{name} {value:.4f} < min {bound.lower_bound.value:.4f}"
  if bound.HasField("upper_bound") and value > bound.upper_bound.value:
    return f"{name} {value:.4f} > max {bound.upper_bound.value:.4f}"
  return f"{name} {value:.4f}: {failure.message}"


def failed_checks(evaluation_uri: str) -> Tuple[str, ...]:
  """The Evaluator's failed checks, one readable line each."""
  result = tfma.load_validation_result(evaluation_uri)
  checks = []
  for failures in result.metric_validations_per_slice:
    where = tfma.slicer.stringify_slice_key(
        tfma.slicer.deserialize_slice_key(failures.slice_key))
    checks += [f"{describe_failure(failure)} ({where})"
               for failure in failures.failures]
  return tuple(checks)


def latest_artifact(store: metadata_store.MetadataStore,
                    type_name: str) -> Optional[metadata_store_pb2.Artifact]:
  """The newest live artifact of `type_name` in `store`, or None.

  The Evaluator's baseline (a copy of the served model) is not a Model
  this pipeline trained: it is left out.
  """
  artifacts = store.get_artifacts_by_type(type_name)
  live = [a for a in artifacts
          if a.state == metadata_store_pb2.Artifact.LIVE
          and not baseline.is_baseline_copy(a)]
  return max(live, key=lambda a: a.id) if live else None


def read_outcome(config: PipelineConfig) -> RunOutcome:
  """The latest artifacts of the pipeline in `config.output`."""
  return read_outcome_at(config.metadata_path)


def read_outcome_at(metadata_path: str) -> RunOutcome:
  """The latest artifacts in the metadata store at `metadata_path`.

  Needs no PipelineConfig, so a finished run can be read (pipeline.report)
  from its output directory alone.
  """
  connection = tfx.orchestration.metadata.sqlite_metadata_connection_config(
      metadata_path)
  store = metadata_store.MetadataStore(connection)

  def uri(type_name):
    artifact = latest_artifact(store, type_name)
    return artifact.uri if artifact else None

  ingested = [a for a in store.get_artifacts_by_type("Examples")
              if "rows_read" in a.custom_properties]
  ingestion = None
  if ingested:
    counts = max(ingested, key=lambda a: a.id).custom_properties
    ingestion = (f"{counts['rows_read'].int_value:,} rows, "
                 f"{counts['bad_rows'].int_value:,} bad rows dropped "
                 f"({counts['train_rows'].int_value:,} train, "
                 f"{counts['eval_rows'].int_value:,} eval)")
  pushed = latest_artifact(store, "PushedModel")
  evaluation = uri("ModelEvaluation")
  is_pushed = bool(pushed and pushed.custom_properties["pushed"].int_value)
  return RunOutcome(
      metadata_path=metadata_path,
      pushed=is_pushed,
      pushed_model=(pushed.custom_properties["pushed_destination"]
                    .string_value if is_pushed else None),
      evaluation=evaluation,
      model=uri("Model"),
      failed_checks=(failed_checks(evaluation)
                     if evaluation and not is_pushed else ()),
      ingestion=ingestion)


def run_pipeline(config: PipelineConfig) -> RunOutcome:
  """Runs the whole pipeline for `config` and returns its outcome."""
  # pylint: disable-next=g-import-not-at-top
  from pipeline import report  # report imports this module.
  check_input(config.data)
  os.makedirs(config.output, exist_ok=True)
  runner = (tfx.orchestration.LocalDagRunner() if config.runner == "local"
            else BeamDagRunner())
  try:
    runner.run_with_ir(local_ir(create_pipeline(config)))
  finally:  # A failed run gets a report too: that is when it is needed.
    try:
      logging.info("report: %s",
                   report.write_report(config.output, config.min_slice_size))
    except Exception:  # pylint: disable=broad-except
      logging.exception("could not write the run report")
  return read_outcome(config)
