"""Ctrl-C and SIGTERM as a user's stop, not as our failure.

A person presses Ctrl-C; Kubernetes sends SIGTERM to evict a pod. Either
stops the run where it is (a KeyboardInterrupt in the main thread, which
Beam re-raises as a RuntimeError naming it), and the CLI ends with one line
and the shell's status for the signal: 130 (SIGINT) or 143 (SIGTERM), what
schedulers read as "interrupted". A second signal ends the process at once.
Components already finished are in ML Metadata and the cache: the same
command resumes after them.
"""

import contextlib
import os
import signal
import threading
from typing import Iterator, Optional, Tuple

from commands.cli import faults
from pipeline import progress

# The shell's status of a process ended by a signal.
EXIT_BASE = 128
_NAMES = {signal.SIGINT: "Ctrl-C (SIGINT)", signal.SIGTERM: "SIGTERM"}
# The signal that stopped the run, once one did (None before), and the
# components that were running when it came.
_received: Optional[int] = None
_running: Tuple[str, ...] = ()


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
  """Within: SIGINT and SIGTERM raise KeyboardInterrupt where the main
  thread is; a second one exits at once. Outside the main thread (where
  Python cannot set handlers) it changes nothing."""
  global _received, _running
  _received, _running = None, ()
  if threading.current_thread() is not threading.main_thread():
    yield
    return

  def second(signum, frame):
    del frame
    os._exit(EXIT_BASE + signum)  # pylint: disable=protected-access

  def first(signum, frame):
    del frame
    global _received, _running
    _received, _running = signum, progress.running_components()
    for name in _NAMES:
      signal.signal(name, second)
    raise KeyboardInterrupt(_NAMES[signum])

  previous = {name: signal.signal(name, first) for name in _NAMES}
  try:
    yield
  finally:
    for name, handler in previous.items():
      signal.signal(name, handler)


def exit_status(error: BaseException) -> Optional[int]:
  """130 or 143 when `error` is (or wraps, as Beam's RuntimeError does) an
  interrupt by a signal; None otherwise."""
  for seen in faults.exception_chain(error):
    if isinstance(seen, KeyboardInterrupt) or (
        isinstance(seen, RuntimeError) and
        str(seen).startswith("KeyboardInterrupt")):
      return EXIT_BASE + (_received or signal.SIGINT)
  return None


def describe(output: Optional[str]) -> str:
  """The one line of an interrupted run: the signal, the components it
  stopped, and how to resume."""
  name = _NAMES.get(_received or signal.SIGINT)
  where = f" during {', '.join(_running)}" if _running else ""
  resume = (f"; re-run the same command to resume: the components that "
            f"finished are reused from {output}" if output else "")
  return f"interrupted by {name}{where}{resume}"
