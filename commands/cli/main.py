"""Command line: `python -m pipeline COMMAND ...` (see --help).

Parses the arguments (commands.cli.parser: no TensorFlow), checks the
input, then imports the subcommand's handler by its dotted path and runs
it.
Exit status: 0 done (model pushed), 1 failed (bad input, anomalies, a
component error), 2 usage error, 3 finished but the model was not blessed
and so not pushed (schedulers must see the difference), 130 and 143
stopped by Ctrl-C or SIGTERM (commands.cli.interrupts).
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

# pylint: disable=wrong-import-position
import importlib
import logging
import os
import traceback
from typing import Callable, List, Optional

from commands.cli import faults
from commands.cli import import_output
from commands.cli import interrupts
from commands.cli import parser as parser_lib
from pipeline import progress


# What a user can fix: a path, a file, a flag, the data (ValueError, the
# project's convention for bad input, covers InputError, HeaderError,
# ReportError and the config checks). These end in their message alone;
# anything else is an internal error and shows its traceback.
USER_ERRORS = (ValueError, OSError)


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
    return progress.EXIT_FAILED
  user_error = isinstance(cause, USER_ERRORS)
  if verbose or not user_error:
    traceback.print_exception(type(error), error, error.__traceback__)
  print(f"error: {cause}" if user_error else
        f"error: internal error: {type(cause).__name__}: {cause}",
        file=sys.stderr)
  if output and os.path.isdir(output):
    print(f"(artifacts already produced are kept under {output}; re-run "
          "with the same --output to resume from the cache)", file=sys.stderr)
  log = os.path.join(output or "", progress.LOG_FILE)
  if output and os.path.isfile(log) and not verbose:
    print(f"(what the libraries said, tracebacks included: {log})",
          file=sys.stderr)
  return progress.EXIT_FAILED


def handler_of(dotted: str) -> Callable[..., int]:
  """The function at `module.name`, its module imported now (after
  parsing: it may import TensorFlow)."""
  module, _, name = dotted.rpartition(".")
  return getattr(importlib.import_module(module), name)


def main(argv: Optional[List[str]] = None) -> int:
  """Parses `argv`, checks the input, then imports and runs the handler;
  the exit status (module doc)."""
  # --help and usage errors end here (SystemExit): parsing imports no
  # library that prints.
  args = parser_lib.build_parser().parse_args(argv)
  # TensorFlow's import-time lines (CUDA, oneDNN, CPU features), which the
  # handler's imports print: run, tune and study put them in their run's
  # log; commands that compute on no device drop them (uses_devices False:
  # the lines say nothing about them), as does a user error found before
  # a run's log exists; the others, e.g. the benchmark, which times
  # devices, show them. --verbose shows them all.
  run_log = getattr(args, "run_log", False)
  uses_devices = getattr(args, "uses_devices", True)
  if not args.verbose and (run_log or not uses_devices):
    import_output.hold()
  output = getattr(args, "output", None)
  try:
    with interrupts.stop_on_signals():
      prepare = getattr(args, "prepare", None)
      if prepare:  # The input, checked before the handler's imports.
        args.config = prepare(args)
      handler = handler_of(args.handler)
      # After the libraries' imports, which set up their own loggers (absl's
      # warnings keep their "WARNING:absl:" lines in the run log).
      logging.basicConfig(level=logging.INFO,
                          format="%(asctime)s %(levelname)s %(message)s")
      if getattr(args, "trains", False):
        # Before anything initialises TensorFlow's devices.
        # pylint: disable-next=g-import-not-at-top
        from trainer_module import distribution
        distribution.configure_cpu_devices(getattr(args, "cpu_devices", 1))
      return handler(args)
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
  log = os.path.join(output or "", progress.LOG_FILE)
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
