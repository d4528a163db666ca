"""Run the pipeline locally and say what it produced.

`run_pipeline` checks the input before any component starts, runs
`create_pipeline(config)` with BeamDagRunner (Beam DirectRunner) or
LocalDagRunner, and reads the outcome back from ML Metadata: where the
pushed model, the metadata store and the evaluation are.
"""

import dataclasses
import os
from typing import Optional

from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2
from tfx import v1 as tfx
from tfx.orchestration.beam.beam_dag_runner import BeamDagRunner

from pipeline.config import PipelineConfig
from pipeline.pipeline import create_pipeline


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
  examples: Optional[str]

  def describe(self) -> str:
    lines = [f"metadata store:   {self.metadata_path}",
             f"examples:         {self.examples}",
             f"trained model:    {self.model}",
             f"evaluation:       {self.evaluation}"]
    lines.append(f"pushed model:     {self.pushed_model}" if self.pushed
                 else "pushed model:     none (the model was not blessed)")
    return "\n".join(lines)


def _latest_artifact(store: metadata_store.MetadataStore,
                     type_name: str) -> Optional[metadata_store_pb2.Artifact]:
  artifacts = store.get_artifacts_by_type(type_name)
  live = [a for a in artifacts
          if a.state == metadata_store_pb2.Artifact.LIVE]
  return max(live, key=lambda a: a.id) if live else None


def read_outcome(config: PipelineConfig) -> RunOutcome:
  """The latest artifacts of the pipeline in `config.output`."""
  connection = tfx.orchestration.metadata.sqlite_metadata_connection_config(
      config.metadata_path)
  store = metadata_store.MetadataStore(connection)

  def uri(type_name):
    artifact = _latest_artifact(store, type_name)
    return artifact.uri if artifact else None

  pushed = _latest_artifact(store, "PushedModel")
  is_pushed = bool(pushed and pushed.custom_properties["pushed"].int_value)
  return RunOutcome(
      metadata_path=config.metadata_path,
      pushed=is_pushed,
      pushed_model=(pushed.custom_properties["pushed_destination"]
                    .string_value if is_pushed else None),
      evaluation=uri("ModelEvaluation"),
      model=uri("Model"),
      examples=uri("Examples"))


def run_pipeline(config: PipelineConfig) -> RunOutcome:
  """Runs the whole pipeline for `config` and returns its outcome."""
  check_input(config.data)
  os.makedirs(config.output, exist_ok=True)
  runner = (tfx.orchestration.LocalDagRunner() if config.runner == "local"
            else BeamDagRunner())
  runner.run(create_pipeline(config))
  return read_outcome(config)
