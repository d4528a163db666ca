"""Command line: `python -m pipeline COMMAND ...` (see --help).

The CLI only parses arguments into a PipelineConfig and picks a runner.
Exit status: 0 done (model pushed), 1 failed (bad input, anomalies, a
component error), 2 usage error, 3 finished but the model was not blessed
and so not pushed (schedulers must see the difference), 130 and 143
stopped by Ctrl-C or SIGTERM (commands.interrupts).
"""

import sys
import warnings

from trainer_module import keras_version

# google-api-core warns at each of its imports that Python 3.10 (TFX 1.16's)
# is past its support window: 14 lines before any output of ours.
warnings.filterwarnings("ignore", category=FutureWarning,
                        message="You are using a non-supported Python version")

# Keras 3, decided before anything imports TensorFlow (see keras_version).
try:
  keras_version.pin_keras3()
except RuntimeError as error:
  sys.exit(f"error: {error}")

# pylint: disable=g-import-not-at-top,wrong-import-position
import argparse
import logging
import os
import traceback
from typing import List, Optional

from commands import benchmark
from commands import console
from commands import faults
from commands import flags
from commands import generate
from commands import import_output
from commands import interrupts
from commands import kfp
from commands import report
from commands import report_reading
from commands import report_text
from commands import study
from commands import synthetic_profile
from commands import tune
from pipeline import config as config_lib
from pipeline import runner
from trainer_module import distribution


# What a user can fix: a path, a file, a flag, the data (ValueError, the
# project's convention for bad input, covers InputError, HeaderError,
# ReportError and the config checks). These end in their message alone;
# anything else is an internal error and shows its traceback.
USER_ERRORS = (ValueError, OSError)
# Settings only a Kubeflow deployment has (the Trainer pod's GPUs).
KUBEFLOW_ONLY = ("gpus", "gpu_type")


def root_cause(error: BaseException) -> BaseException:
  """The innermost exception: the one that says what went wrong."""
  *_, innermost = faults.exception_chain(error)
  return innermost


def report_failure(error: Exception, verbose: bool,
                   output: Optional[str]) -> int:
  """Says why a command failed on stderr: one line for a user error (with
  --verbose, or for an internal error, the traceback first)."""
  cause = root_cause(error)
  fault = faults.describe(error, output)
  if fault:
    if verbose:
      traceback.print_exception(type(error), error, error.__traceback__)
    else:
      _log_traceback(error, output)
    print(f"error: {fault}", file=sys.stderr)
    return runner.EXIT_FAILED
  user_error = isinstance(cause, USER_ERRORS)
  if verbose or not user_error:
    traceback.print_exception(type(error), error, error.__traceback__)
  print(f"error: {cause}" if user_error else
        f"error: internal error: {type(cause).__name__}: {cause}",
        file=sys.stderr)
  if output and os.path.isdir(output):
    print(f"(artifacts already produced are kept under {output}; re-run "
          "with the same --output to resume from the cache)", file=sys.stderr)
  log = os.path.join(output or "", console.LOG_FILE)
  if output and os.path.isfile(log) and not verbose:
    print(f"(what the libraries said, tracebacks included: {log})",
          file=sys.stderr)
  return runner.EXIT_FAILED


def _run(args: argparse.Namespace) -> int:
  run = report.run_with_report(flags.config_from_args(args), args.verbose)
  print(run.headline())
  return 0 if run.outcome.pushed else runner.EXIT_NOT_PUSHED


def _tune(args: argparse.Namespace) -> int:
  outcome = tune.run_tuning(flags.config_from_args(args), args.verbose)
  print(outcome.describe())
  return 0


def _generate(args: argparse.Namespace) -> int:
  options = {"id_profile": args.id_profile, "rare_signal": args.rare_signal,
             "top_ids": args.top_ids}
  if args.days is None:
    print(generate.write_synthetic(args.format, args.rows, args.seed,
                                   args.out, **options))
    return 0
  for day, summary in enumerate(generate.write_days(
      args.format, args.rows, args.days, args.seed, args.out,
      churn=args.churn, ctr_drift=args.ctr_drift, **options), start=1):
    print(summary or f"day {day}: kept, already written")
  return 0


def _report(args: argparse.Namespace) -> int:
  gate = flags.settings_from_args(args, config_lib.GateSettings)
  run = report_reading.read_run(args.dir, gate.min_slice_size)
  print(report_text.describe(run))
  print(f"report:    {report.write_run_page(run)}")
  if args.compare:
    runs = [run, report_reading.read_run(args.compare, gate.min_slice_size)]
    print("\n" + report_text.describe_comparison(runs))
    print(f"compare:   {report.write_comparison_page(runs)}")
  return 0


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
  run.set_defaults(handler=_run)
  tuning = commands.add_parser(
      "tune", help="tune the base hyperparameters alone (KerasTuner)",
      description="Ingestion, Transform and the Tuner only; writes the best "
      "hyperparameters (JSON), the trial table (CSV, JSON) and a plot to "
      "--output. `run --hparams-from DIR` trains with the result.")
  flags.add_input_arguments(tuning, "DIR for the pipeline root, the tuning "
                            "results and metadata.sqlite")
  flags.add_settings(tuning, skip=KUBEFLOW_ONLY + ("tune", "hparams_from"))
  tuning.set_defaults(handler=_tune, tune=True, stop_after_tuner=True)
  gen = commands.add_parser(
      "generate", help="write synthetic Criteo/Avazu-layout raw data")
  gen.add_argument("--format", required=True, choices=("criteo", "avazu"))
  gen.add_argument("--rows", type=int, required=True)
  gen.add_argument("--seed", type=int, default=0)
  gen.add_argument("--out", required=True,
                   help="output file path; with --days, the directory of "
                   "the day folders")
  gen.add_argument("--days", type=int, default=None, metavar="N",
                   help="write N days of --rows rows each, day d to "
                   "OUT/day-d/, the world drifting from day to day; train "
                   "on them with run --data 'OUT/day-{SPAN}/' "
                   "(docs/daily.md)")
  gen.add_argument("--churn", type=float, default=generate.DEFAULT_CHURN,
                   metavar="P",
                   help="with --days: the share of each large field's ids "
                   "that new ids replace each day (default "
                   f"{generate.DEFAULT_CHURN})")
  gen.add_argument("--ctr-drift", type=float,
                   default=generate.DEFAULT_CTR_DRIFT, metavar="S",
                   help="with --days: the standard deviation of the click "
                   "log-odds' daily change (default "
                   f"{generate.DEFAULT_CTR_DRIFT})")
  gen.add_argument("--top-ids", type=int, default=None, metavar="K",
                   help="keep each field's K most frequent ids, one shared "
                   "id for the rest (the CowClip paper's Table 1 data)")
  gen.add_argument("--id-profile", default="default",
                   choices=synthetic_profile.PROFILES,
                   help="id-frequency profile: default, or kaggle (fitted "
                   "to the real Criteo train.txt's distinct counts; "
                   "docs/generator.md)")
  gen.add_argument("--rare-signal", type=float, default=0.0, metavar="BETA",
                   help="an id of frequency rank k gets a hidden weight of "
                   "scale (k+1)^BETA: > 0 puts more of the click signal on "
                   "rare ids (default 0)")
  gen.set_defaults(handler=_generate, uses_devices=False)
  rep = commands.add_parser(
      "report", help="write DIR/report/index.html and print the summary")
  rep.add_argument("dir", help="the --output DIR of a pipeline run")
  rep.add_argument("--compare", metavar="OTHER_DIR", default=None,
                   help="also put the run beside OTHER_DIR's "
                   "(DIR/report/compare.html)")
  flags.add_settings(rep, only=("min_slice_size",))
  rep.set_defaults(handler=_report, uses_devices=False)
  kfp.add_compile_parser(commands)
  kfp.add_run_compiled_parser(commands)
  bench = commands.add_parser(
      "benchmark", help="time the training step per batch size")
  benchmark.add_arguments(bench)
  bench.set_defaults(handler=benchmark.main)
  scaling_study = commands.add_parser(
      "study", help="train every scaling rule x batch size on one Transform")
  study.add_arguments(scaling_study)
  scaling_study.set_defaults(handler=study.main)
  for command in commands.choices.values():
    command.add_argument("--verbose", action="store_true",
                         help="tracebacks of user errors too")
  return parser


def main(argv: Optional[List[str]] = None) -> int:
  logging.basicConfig(level=logging.INFO,
                      format="%(asctime)s %(levelname)s %(message)s")
  try:
    args = build_parser().parse_args(argv)
  except SystemExit:  # --help or a usage error: argparse has said it.
    import_output.release(sys.stderr.buffer)
    raise
  # TensorFlow's import-time lines (CUDA, oneDNN, CPU features:
  # commands.import_output): run, tune and study put them in their run's
  # log; commands that compute on no device drop them (uses_devices False:
  # the lines say nothing about them); the others, e.g. the benchmark,
  # which times devices, show them. --verbose shows them all.
  if args.verbose or (args.handler not in (_run, _tune, study.main) and
                      getattr(args, "uses_devices", True)):
    import_output.release(sys.stderr.buffer)
  output = getattr(args, "output", None)
  try:
    with interrupts.stop_on_signals():
      # Before anything initialises TensorFlow's devices.
      distribution.configure_cpu_devices(getattr(args, "cpu_devices", 1))
      return args.handler(args)
  except BaseException as error:  # pylint: disable=broad-except
    import_output.release(None)
    status = interrupts.exit_status(error)
    if status is not None:
      return report_interruption(error, status, args.verbose, output)
    if not isinstance(error, Exception):
      raise
    return report_failure(error, args.verbose, output)
  finally:
    import_output.release(None)


def _log_traceback(error: BaseException, output: Optional[str]) -> None:
  """Appends `error`'s traceback to the run log of `output`, if it has one
  and it can still be written (not on a full disk)."""
  log = os.path.join(output or "", console.LOG_FILE)
  if not (output and os.path.isfile(log)):
    return
  try:
    with open(log, "a") as f:
      traceback.print_exception(type(error), error, error.__traceback__,
                                file=f)
  except OSError:
    pass


def report_interruption(error: BaseException, status: int, verbose: bool,
                        output: Optional[str]) -> int:
  """Says in one line where a signal stopped the run and how to resume;
  the traceback goes to the run log (the console with --verbose)."""
  if verbose:
    traceback.print_exception(type(error), error, error.__traceback__)
  else:
    _log_traceback(error, output)
  print(interrupts.describe(output if output and os.path.isdir(output)
                            else None), file=sys.stderr)
  return status
