"""The input check of a run: fails before anything starts, naming the fault.

Imports no TFX until the data needs it: a missing path or a span choice
without {SPAN} is refused at once; a span is resolved (TFX's input
processor) and the files are read (their header, their layout) only when
the cheap checks pass.
"""

import os

from components.raw_example_gen import spans
from pipeline import beam_services
from pipeline.config import PipelineConfig


class InputError(ValueError):
  """The raw data path is missing, empty or holds foreign files, or a Beam
  service the run needs (a cluster's job server, its worker pool) is not
  up."""


def check_input(config: PipelineConfig) -> None:
  """Fails before any component starts if there is nothing to read, or
  files that are not the dataset's training data, naming them (unless
  config.ingestion.skip_foreign_files: then ExampleGen skips them and says
  so)."""
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
  down = beam_services.unreachable(config.runner.beam_args)
  if down:
    raise InputError(down)
  # Reads the files with TFX's filesystem and Beam's row parser.
  from components.raw_example_gen import input_files  # pylint: disable=g-import-not-at-top
  try:
    sorted_input = input_files.check_files(files, config.spec,
                                           config.ingestion.skip_foreign_files)
  except input_files.ForeignFilesError as error:
    raise InputError(str(error)) from None
  if not sorted_input.data:
    raise InputError(f"input {path!r} holds no {config.dataset} training "
                     "data")
