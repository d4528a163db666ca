"""Run the pipeline locally and say what it produced.

`run_pipeline` checks the input before any component starts, runs
`create_pipeline(config)` with BeamDagRunner (Beam DirectRunner) or
LocalDagRunner, and reads the outcome back from ML Metadata
(pipeline.metadata): where the pushed model, the metadata store and the
evaluation are.
"""

import contextlib
import logging
import os
import tempfile
from typing import Iterator, Tuple

from tfx import v1 as tfx
from tfx.orchestration.beam import beam_dag_runner

from components.raw_example_gen import input_files
from components.raw_example_gen import spans
from pipeline import beam_services
from pipeline import metadata
from pipeline.config import PipelineConfig
from pipeline.pipeline import create_pipeline
from pipeline.pipeline import local_ir


# Exit status of a run for schedulers (0: done, model pushed; 2: usage error,
# argparse's): the run failed (bad input, anomalies, a component error), or
# it finished but the model was not blessed and so not pushed.
EXIT_FAILED = 1
EXIT_NOT_PUSHED = 3
# The logger of each component's start and end (INFO records with `node`
# and `event` attributes): a console can show progress from them.
PROGRESS_LOGGER = "pipeline.progress"
STARTED, FINISHED = "started", "finished"


class InputError(ValueError):
  """The raw data path is missing, empty or holds foreign files, or a Beam
  service the run needs is not up."""


def check_input(config: PipelineConfig) -> None:
  """Fails before any component starts if there is nothing to read, or
  files that are not the dataset's training data, naming them (unless
  config.ingestion.skip_foreign_files: then ExampleGen skips them and says so)."""
  path = config.data
  if spans.has_span(path):
    try:
      path, files = spans.span_files(path, config.ingestion.span)
    except ValueError as error:
      raise InputError(str(error)) from None
  elif config.ingestion.span is not None:
    raise InputError(f"--span {config.ingestion.span} picks a day of daily "
                     f"data, but --data {path!r} has no {spans.SPAN} in it "
                     "(e.g. --data 'logs/day-{SPAN}/')")
  elif not os.path.exists(path):
    raise InputError(f"input path {path!r} does not exist")
  else:
    files = ([os.path.join(path, f) for f in sorted(os.listdir(path))
              if not f.startswith(".")] if os.path.isdir(path) else [path])
  files = [f for f in files if os.path.isfile(f)]
  if not files:
    raise InputError(f"input directory {path!r} holds no files")
  if all(os.path.getsize(f) == 0 for f in files):
    raise InputError(f"input {path!r} is empty: "
                     f"{', '.join(os.path.basename(f) for f in files)}")
  try:
    sorted_input = input_files.check_files(files, config.spec,
                                           config.ingestion.skip_foreign_files)
  except input_files.ForeignFilesError as error:
    raise InputError(str(error)) from None
  if not sorted_input.data:
    raise InputError(f"input {path!r} holds no {config.dataset} training "
                     "data")


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


def log_progress(node: str, event: str, summary: str = "") -> None:
  """One record of PROGRESS_LOGGER: `node` STARTED or FINISHED (with a
  one-line `summary` of what it did, if any)."""
  logging.getLogger(PROGRESS_LOGGER).info(
      "%s %s%s", node, event, f": {summary}" if summary else "",
      extra={"node": node, "event": event, "summary": summary})


# The components running now in this process (an interrupted run names
# them).
_RUNNING = set()


def running_components() -> Tuple[str, ...]:
  """The components started and not finished in this process."""
  return tuple(sorted(_RUNNING))


class _NodeWithProgressDoFn(beam_dag_runner.PipelineNodeAsDoFn):
  """TFX's launch of one node, logged to PROGRESS_LOGGER at start and end."""

  def _run_node(self) -> None:
    node = self._pipeline_node.node_info.id
    # Running before its line shows: a Ctrl-C right after the line names it.
    _RUNNING.add(node)
    log_progress(node, STARTED)
    try:
      super()._run_node()
    finally:
      _RUNNING.discard(node)
    log_progress(node, FINISHED)


class BeamDagRunnerWithProgress(beam_dag_runner.BeamDagRunner):
  """BeamDagRunner whose components log their start and end
  (PROGRESS_LOGGER)."""
  _PIPELINE_NODE_DO_FN_CLS = _NodeWithProgressDoFn


def run_pipeline(config: PipelineConfig) -> metadata.RunOutcome:
  """Runs the whole pipeline for `config` and returns its outcome."""
  check_input(config)
  down = beam_services.unreachable(config.runner.beam_args)
  if down:
    raise InputError(down)
  os.makedirs(config.output, exist_ok=True)
  runner = (tfx.orchestration.LocalDagRunner() if config.runner.dag_runner == "local"
            else BeamDagRunnerWithProgress())
  with run_temp_dir():
    runner.run_with_ir(local_ir(create_pipeline(config)))
  return read_outcome(config)
