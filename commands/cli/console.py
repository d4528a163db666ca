"""What a pipeline run shows on the console, and where the rest goes.

TensorFlow, TFX, Beam and TFMA write hundreds of lines on a small run
(warnings, C++ logs, deprecation notices) that bury the few that matter.
During a run, file descriptors 1 and 2 point at DIR/logs/run.log instead,
so everything they write (C++ logs, Python logging and warnings, Keras
progress bars, Beam worker subprocesses, which inherit the descriptors)
is kept there; the console gets the components' progress (logged by the
runner, pipeline.progress.PROGRESS_LOGGER), the project's own warnings and
the headline.
`--verbose` leaves the descriptors alone.
"""

import contextlib
import logging
import os
import re
import sys
import threading
import time
from typing import Dict, Iterator, Optional, TextIO

from rich.console import Console
from rich.text import Text
from rich.progress import Progress
from rich.progress import ProgressColumn
from rich.progress import SpinnerColumn
from rich.progress import Task
from rich.progress import TaskID
from rich.progress import TextColumn
from rich.progress import TimeElapsedColumn

from commands.cli import import_output
from pipeline import code_fingerprint
from pipeline import progress

# How much of the end of the run log the live display reads for the
# Trainer's (and Tuner's) latest Keras epoch.
_LOG_TAIL_BYTES = 16 << 10
# Keras' epoch header and the training step's rate line (trainer_module).
_EPOCH = re.compile(r"^Epoch (\d+/\d+)$", re.MULTILINE)
_RATE = re.compile(r"^Epoch \d+: ([\d,]+ examples/s)", re.MULTILINE)
# The same line, whole, with the validation AUC it ends with when the epoch
# validated (trainer_module.callbacks.ThroughputLogger).
_FINISHED_EPOCH = re.compile(
    r"^Epoch (\d+): ([\d,]+ examples/s)[^\n]*?(?:, val_auc (\d\.\d+))?$",
    re.MULTILINE)
# Without a terminal: how often the run log is read for finished epochs, and
# how long a component runs without a line before one says it still runs.
POLL_SECONDS = 2.0
HEARTBEAT_SECONDS = 300.0


@contextlib.contextmanager
def library_output_to_log(output_dir: str) -> Iterator[TextIO]:
  """Sends fds 1 and 2 to output_dir/logs/run.log (appended); yields a
  stream to the console (the original stdout). Restored on exit."""
  path = os.path.join(output_dir, progress.LOG_FILE)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "ab") as start:
    import_output.release(start)
  sys.stdout.flush()
  sys.stderr.flush()
  saved = {fd: os.dup(fd) for fd in (1, 2)}
  log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
  console = os.fdopen(os.dup(saved[1]), "w", buffering=1)
  try:
    for fd in saved:
      os.dup2(log, fd)
    yield console
  finally:
    sys.stdout.flush()
    sys.stderr.flush()
    for fd, original in saved.items():
      os.dup2(original, fd)
      os.close(original)
    os.close(log)
    console.close()


class _FromProject(logging.Filter):
  """Records the project's own code logged (not a library's)."""

  _PREFIXES = tuple(
      os.path.join(code_fingerprint.REPO_ROOT, package) + os.sep
      for package in code_fingerprint.PROJECT_PACKAGES)

  def filter(self, record: logging.LogRecord) -> bool:
    return record.pathname.startswith(self._PREFIXES)


class _ConsoleHandler(logging.Handler):
  """Log records printed through the rich console, so they appear above
  its live progress lines, not through them."""

  def __init__(self, console: Console, level: int):
    super().__init__(level)
    self._console = console

  def emit(self, record: logging.LogRecord) -> None:
    # The message alone: a traceback the record carries (exc_info) goes to
    # the run log with the libraries' output, not to the console.
    record.message = record.getMessage()
    self._console.print(self.formatter.formatMessage(record))


class _LatestEpochColumn(ProgressColumn):
  """A running component's latest Keras epoch and examples/s, from what it
  wrote to the run log since it started (Keras prints them there)."""

  def __init__(self, log_path: Optional[str]):
    super().__init__()
    self._log_path = log_path

  def log_size(self) -> int:
    return os.path.getsize(self._log_path) if self._log_path else 0

  def render(self, task: Task) -> Text:
    if task.finished or not self._log_path:
      return Text("")
    with open(self._log_path, "rb") as log:
      size = log.seek(0, os.SEEK_END)
      log.seek(max(task.fields["log_offset"], size - _LOG_TAIL_BYTES))
      tail = log.read().decode("utf-8", "replace")
    epochs, rates = _EPOCH.findall(tail), _RATE.findall(tail)
    return Text(", ".join(([f"epoch {epochs[-1]}"] if epochs else []) +
                          rates[-1:]))


class _PlainEpochs:
  """Without a terminal (nohup, CI, a scheduler's log), one line per
  finished Trainer epoch, read from the run log, and a line when a
  component has run HEARTBEAT_SECONDS without one: a log that stays silent
  for the 20 minutes of a long run looks like a hung one."""

  def __init__(self, console: Console, log_path: str,
               running: Dict[str, float]):
    self._console = console
    self._log_path = log_path
    self._running = running  # Component -> its start (monotonic).
    # Earlier runs' epochs (the log is appended to) are not ours.
    self._offset = (os.path.getsize(log_path) if os.path.exists(log_path)
                    else 0)
    self._last_line = time.monotonic()
    self._stop = threading.Event()
    self._reading = threading.Lock()  # The watcher's and emit's calls.
    self._thread = threading.Thread(target=self._watch, daemon=True)

  def start(self) -> None:
    self._thread.start()

  def stop(self) -> None:
    self._stop.set()
    self._thread.join()
    self.print_finished_epochs()

  def said(self) -> None:
    """A line was printed: the heartbeat waits from now."""
    self._last_line = time.monotonic()

  def _watch(self) -> None:
    while not self._stop.wait(POLL_SECONDS):
      self.print_finished_epochs()
      self.print_heartbeat()

  def print_finished_epochs(self) -> None:
    """Prints the epochs finished since the last call (whole lines only),
    as the latest started component's."""
    with self._reading:
      if not os.path.exists(self._log_path):
        return
      with open(self._log_path, "rb") as log:
        log.seek(self._offset)
        text = log.read()
      text = text[:text.rfind(b"\n") + 1]
      self._offset += len(text)
      running = list(self._running)
      node = running[-1] if running else "training"
      for epoch, rate, auc in _FINISHED_EPOCH.findall(
          text.decode("utf-8", "replace")):
        self._console.print(f"{node} epoch {epoch}: {rate}"
                            + (f", validation AUC {auc}" if auc else ""))
        self.said()

  def print_heartbeat(self) -> None:
    now = time.monotonic()
    if self._running and now - self._last_line >= HEARTBEAT_SECONDS:
      for node, started in list(self._running.items()):
        self._console.print(f"{node} still running "
                            f"({(now - started) / 60:.0f} min)")
      self.said()


class ComponentProgress(logging.Handler):
  """Each component's start and end with its time, from the runner's
  progress records (pipeline.progress.PROGRESS_LOGGER): on a terminal a live
  line per component with a spinner, the elapsed time and, in training,
  the latest epoch (rich); otherwise plain lines, one per finished epoch
  too (_PlainEpochs)."""

  def __init__(self, console: Console, log_path: Optional[str]):
    super().__init__(logging.INFO)
    self._console = console
    self._started: Dict[str, float] = {}
    self._epochs = _LatestEpochColumn(log_path)
    self._progress = (Progress(SpinnerColumn(), TextColumn("{task.description}"),
                               TimeElapsedColumn(), self._epochs,
                               console=console, refresh_per_second=2,
                               # Python's own stdout and stderr (Keras'
                               # progress bars) stay in the run log.
                               redirect_stdout=False, redirect_stderr=False)
                      if console.is_terminal else None)
    self._tasks: Dict[str, TaskID] = {}
    self._plain_epochs = (_PlainEpochs(console, log_path, self._started)
                          if log_path and not console.is_terminal else None)

  def __enter__(self) -> "ComponentProgress":
    if self._progress:
      self._progress.start()
    if self._plain_epochs:
      self._plain_epochs.start()
    return self

  def __exit__(self, *_) -> None:
    if self._progress:
      self._progress.stop()
    if self._plain_epochs:
      self._plain_epochs.stop()

  def emit(self, record: logging.LogRecord) -> None:
    node = getattr(record, "node", None)
    if node is None:
      if getattr(record, "note", False):  # A line of its own (`study`).
        self._console.print(record.getMessage())
      return
    if record.event == progress.STARTED:
      self._started[node] = time.monotonic()
      if self._progress:
        self._tasks[node] = self._progress.add_task(
            node, total=None, log_offset=self._epochs.log_size())
      else:
        self._print(f"{node} ...")
      return
    if self._plain_epochs:  # Its last epochs before its end.
      self._plain_epochs.print_finished_epochs()
    line = f"{node} done in {time.monotonic() - self._started.pop(node):.1f} s"
    if getattr(record, "summary", None):
      line += f": {record.summary}"
    if self._progress:
      task = self._tasks.pop(node)
      self._progress.update(task, description=line, total=1, completed=1)
      self._progress.stop_task(task)
    else:
      self._print(line)

  def _print(self, line: str) -> None:
    """A plain line (no terminal)."""
    if self._plain_epochs:
      self._plain_epochs.said()
    self._console.print(line)


@contextlib.contextmanager
def pipeline_console(output_dir: str, verbose: bool) -> Iterator[None]:
  """The console of a pipeline run (module doc): library output to the run
  log unless `verbose`; the components' progress and, unless `verbose`,
  the project's own warnings on the console."""
  with contextlib.ExitStack() as stack:
    stream = (sys.stdout if verbose else
              stack.enter_context(library_output_to_log(output_dir)))
    console = Console(file=stream, highlight=False, markup=False,
                      soft_wrap=True)
    component_progress = ComponentProgress(
        console, None if verbose else os.path.join(output_dir, progress.LOG_FILE))
    _attach(stack, logging.getLogger(progress.PROGRESS_LOGGER),
            stack.enter_context(component_progress), logging.INFO)
    if not verbose:
      warnings = _ConsoleHandler(console, logging.WARNING)
      warnings.setFormatter(logging.Formatter("warning: %(message)s"))
      warnings.addFilter(_FromProject())
      _attach(stack, logging.getLogger(), warnings, logging.getLogger().level)
      logging.captureWarnings(True)
      stack.callback(logging.captureWarnings, False)
    yield


def _attach(stack: contextlib.ExitStack, logger: logging.Logger,
            handler: logging.Handler, level: int) -> None:
  """Adds `handler` to `logger` at `level` until `stack` closes."""
  stack.callback(logger.setLevel, logger.level)
  stack.callback(logger.removeHandler, handler)
  logger.setLevel(level)
  logger.addHandler(handler)
