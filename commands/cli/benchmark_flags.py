"""The flags of `benchmark` (the training step, or with --stage data the
whole pipeline), declared apart from what runs it
(commands.experiments.benchmark, commands.experiments.data_benchmark) so
that parsing them imports no TensorFlow.
"""

import argparse
import os

from commands.cli import flags
from trainer_module import features
from trainer_module import settings

# The training input: "pipeline", the Trainer's (input_pipeline.
# training_data); "fixed", FIXED_BATCHES of its batches held as tensors and
# repeated, the step with no input work at all.
INPUTS = ("pipeline", "fixed")
FIXED_BATCHES = 4
DEFAULT_BATCH_SIZES = (1024, 8192)
DEFAULT_ROWS = 200_000
DEFAULT_VOCAB_SCALE = 10
# --stage data (commands.experiments.data_benchmark).
DEFAULT_WORK_DIR = os.path.join("runs", "benchmark_data")
DEFAULT_DOC = os.path.join("docs", "benchmark_data.md")
DEFAULT_BATCH_SIZE = 16384


def add_arguments(parser: argparse.ArgumentParser) -> None:
  """The `benchmark` subcommand's flags."""
  parser.set_defaults(handler="commands.experiments.benchmark.main")
  parser.add_argument("--stage", default="step", choices=("step", "data"),
                      help="step: time the training step (default); data: "
                      "run the whole pipeline on --rows generated rows "
                      "(commands/experiments/data_benchmark.py)")
  _add_data_arguments(parser)
  parser.add_argument("--dataset", default="criteo",
                      choices=sorted(features.DATASETS))
  parser.add_argument("--batch-sizes", type=flags.int_list,
                      default=list(DEFAULT_BATCH_SIZES),
                      help="comma-separated, e.g. 1024,8192")
  parser.add_argument("--data", default=None,
                      help="raw file of the dataset's layout (default: "
                      "generate --rows rows)")
  parser.add_argument("--rows", type=int, default=DEFAULT_ROWS,
                      help="rows to generate when no --data is given")
  parser.add_argument("--vocab-scale", type=int, default=DEFAULT_VOCAB_SCALE,
                      help="also time tables this many times larger at the "
                      "first batch size (1: skip)")
  parser.add_argument("--warmup-steps", type=int, default=3)
  parser.add_argument("--steps", type=int, default=20,
                      help="timed steps per case")
  parser.add_argument("--precisions",
                      type=flags.choice_list(settings.PRECISIONS, "precision"),
                      default=[settings.PRECISIONS[0]],
                      help="comma-separated, some of "
                      f"{','.join(settings.PRECISIONS)} (default: auto, as the "
                      "Trainer)")
  parser.add_argument("--inputs", type=flags.choice_list(INPUTS, "input"),
                      default=["pipeline"],
                      help="comma-separated, some of "
                      f"{','.join(INPUTS)}: the Trainer's input, or "
                      f"{FIXED_BATCHES} of its batches repeated (no input "
                      "work)")
  parser.add_argument("--no-components", dest="components",
                      action="store_false",
                      help="skip timing the parts of each step")
  parser.add_argument("--work-dir", default=None,
                      help="keep the generated data, ingestion and Transform "
                      "here; a re-run on the same file reuses them (default: "
                      "a temporary directory; --stage data: "
                      f"{DEFAULT_WORK_DIR})")
  parser.add_argument("--output", default=None, help="write a CSV here")
  # The cases (above) set the batch size, precision, update and CowClip.
  flags.add_settings(parser, only=("model", "hidden_units", "min_frequency",
                                   "distribution", "cpu_devices"))


def _add_data_arguments(parser: argparse.ArgumentParser) -> None:
  """Flags of `benchmark --stage data` (--rows, --dataset and --work-dir are
  shared)."""
  parser.add_argument("--doc", default=DEFAULT_DOC,
                      help="[data] markdown file the results are appended to")
  parser.add_argument("--data-batch-size", type=int,
                      default=DEFAULT_BATCH_SIZE,
                      help="[data] the run's --batch-size")
  parser.add_argument("--run-arg", dest="run_args", action="append",
                      default=[], help="[data] extra `pipeline run` flag "
                      "(repeatable), e.g. --run-arg=--beam-arg=--"
                      "direct_num_workers=2")
  parser.add_argument("--resume", action="store_true",
                      help="[data] continue an earlier, unfinished run of "
                      "the same --rows: keep its output, so the components "
                      "that finished come from TFX's cache")
