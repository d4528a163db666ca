"""Run the pipeline locally and say what it produced.

`run_pipeline` runs `create_pipeline(config)` with BeamDagRunner (Beam
DirectRunner) or LocalDagRunner, and reads the outcome back from ML Metadata
(pipeline.metadata): where the pushed model, the metadata store and the
evaluation are.
"""

import contextlib
import os
import tempfile
from typing import Iterator

from tfx import v1 as tfx
from tfx.orchestration.beam import beam_dag_runner

from pipeline import metadata
from pipeline import progress
from pipeline.config import PipelineConfig
from pipeline.pipeline import create_pipeline
from pipeline.pipeline import local_ir


def read_outcome(config: PipelineConfig) -> metadata.RunOutcome:
  """The latest artifacts of the pipeline in `config.output`."""
  return metadata.read_outcome_at(config.metadata_path)


@contextlib.contextmanager
def run_temp_dir() -> Iterator[None]:
  """Python's temporary files in one directory for the length of a local
  run, removed when it ends. Every TFX Beam executor builds an ephemeral
  source package of TFX (~16 MB) in its own tempfile.mkdtemp() for remote
  Beam workers and never deletes it; the local runners never read it. One
  `make test` left 138 of them."""
  shared = tempfile.tempdir
  with tempfile.TemporaryDirectory(prefix="ctr-run-") as run_dir:
    tempfile.tempdir = run_dir
    try:
      yield
    finally:
      tempfile.tempdir = shared


class _NodeWithProgressDoFn(beam_dag_runner.PipelineNodeAsDoFn):
  """TFX's launch of one node, logged to PROGRESS_LOGGER at start and end."""

  def _run_node(self) -> None:
    node = self._pipeline_node.node_info.id
    # Running before its line shows: a Ctrl-C right after the line names it.
    progress.mark_running(node, True)
    progress.log_progress(node, progress.STARTED)
    try:
      super()._run_node()
    finally:
      progress.mark_running(node, False)
    progress.log_progress(node, progress.FINISHED)


class BeamDagRunnerWithProgress(beam_dag_runner.BeamDagRunner):
  """BeamDagRunner whose components log their start and end
  (PROGRESS_LOGGER)."""
  _PIPELINE_NODE_DO_FN_CLS = _NodeWithProgressDoFn


def run_pipeline(config: PipelineConfig) -> metadata.RunOutcome:
  """Runs the whole pipeline for `config` and returns its outcome (the
  caller has checked its input: pipeline.input_check)."""
  os.makedirs(config.output, exist_ok=True)
  runner = (tfx.orchestration.LocalDagRunner() if config.runner.dag_runner == "local"
            else BeamDagRunnerWithProgress())
  with run_temp_dir():
    runner.run_with_ir(local_ir(create_pipeline(config)))
  return read_outcome(config)
