"""The command line's parser: every subcommand's flags, and its handler by
dotted path.

Building and running the parser imports no TensorFlow, TFX, Beam, Keras or
matplotlib: --help and usage errors answer at once. A handler's module is
imported only after parsing (commands.cli.main), and `run` and `tune` check
their input first (checked_config), so that a wrong path or span is said
before the seconds TensorFlow takes to import.
"""

import argparse

from commands.cli import beam_flags
from commands.cli import benchmark_flags
from commands.cli import flags
from commands.cli import generate_flags
from commands.cli import kubeflow_flags
from commands.cli import study_flags
from pipeline import input_check
from pipeline.config import PipelineConfig

# Settings only a Kubeflow deployment has (the Trainer pod's GPUs).
KUBEFLOW_ONLY = ("gpus", "gpu_type")


def checked_config(args: argparse.Namespace) -> PipelineConfig:
  """The PipelineConfig of `run`'s or `tune`'s flags, its input checked
  (pipeline.input_check) before the handler imports TensorFlow."""
  config = beam_flags.config_from_args(args)
  input_check.check_input(config)
  return config


def build_parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
      prog="python -m pipeline",
      description="CowClip CTR training pipeline (TFX).")
  commands = parser.add_subparsers(dest="command", required=True)
  run = commands.add_parser("run", help="run the whole pipeline locally")
  flags.add_input_arguments(run, "DIR for the pipeline root, metadata.sqlite "
                            "and serving/<version>/ (re-use it to reuse "
                            "cached results)")
  flags.add_settings(run, skip=KUBEFLOW_ONLY)
  beam_flags.add_beam_arguments(run, "OUTPUT", "--environment-config")
  run.set_defaults(handler="commands.runs.run.main", prepare=checked_config,
                   trains=True, run_log=True)
  tuning = commands.add_parser(
      "tune", help="tune the base hyperparameters alone (KerasTuner)",
      description="Ingestion, Transform and the Tuner only; writes the best "
      "hyperparameters (JSON), the trial table (CSV, JSON) and a plot to "
      "--output. `run --hparams-from DIR` trains with the result.")
  flags.add_input_arguments(tuning, "DIR for the pipeline root, the tuning "
                            "results and metadata.sqlite")
  flags.add_settings(tuning, skip=KUBEFLOW_ONLY + ("tune", "hparams_from"))
  beam_flags.add_beam_arguments(tuning, "OUTPUT", "--environment-config")
  tuning.set_defaults(handler="commands.experiments.tune.main",
                      prepare=checked_config, trains=True, run_log=True,
                      tune=True, stop_after_tuner=True)
  generate_flags.add_arguments(commands.add_parser(
      "generate", help="write synthetic Criteo/Avazu-layout raw data"))
  rep = commands.add_parser(
      "report", help="write DIR/report/index.html and print the summary")
  rep.add_argument("dir", help="the --output DIR of a pipeline run")
  rep.add_argument("--compare", metavar="OTHER_DIR", default=None,
                   help="also put the run beside OTHER_DIR's "
                   "(DIR/report/compare.html)")
  flags.add_settings(rep, only=("min_slice_size",))
  rep.set_defaults(handler="commands.report.pages.main", uses_devices=False)
  kubeflow_flags.add_compile_parser(commands)
  kubeflow_flags.add_run_compiled_parser(commands)
  bench = commands.add_parser(
      "benchmark", help="time the training step per batch size")
  benchmark_flags.add_arguments(bench)
  bench.set_defaults(trains=True)
  scaling_study = commands.add_parser(
      "study", help="train every scaling rule x batch size on one Transform")
  study_flags.add_arguments(scaling_study)
  scaling_study.set_defaults(trains=True, run_log=True)
  for command in commands.choices.values():
    command.add_argument("--verbose", action="store_true",
                         help="tracebacks of user errors too")
  return parser
