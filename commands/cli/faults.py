"""Faults of the machine, not of the data or of our code, in one line.

A full disk, a read-only output directory and exhausted memory reach the
CLI as whatever the library that met them raised: TensorFlow's
ResourceExhaustedError, ML Metadata's "database or disk is full", an
OSError, a MemoryError, wrapped by Beam in a RuntimeError that names the
component. So does a Beam job that a cluster (Flink, Spark) ran and
failed: a TaskManager lost beyond the restart strategy, too few network
buffers. None of them is a bug for the user to report: each gets one
`error:` line naming the fault, the DIR and the component, and what to do;
the chained tracebacks go to the run log.
"""

import errno
import re
from typing import Optional

# Beam's wrapping of an error raised in a component's node.
_COMPONENT = re.compile(r"while running 'Run\[([^\]]+)\]'")
_NO_SPACE = ("No space left on device", "database or disk is full",
             "Disk quota exceeded")
_READ_ONLY = ("Read-only file system",)
_NO_MEMORY = ("OOM when allocating", "Out of memory", "out of memory",
              "Cannot allocate memory", "std::bad_alloc")
# Beam's portable runner's message for a job the cluster failed: the
# cluster's own reason follows.
_CLUSTER_JOB = re.compile(r"Pipeline (\S+?)(?:_[0-9a-f-]{36})? failed in state "
                          r"(\w+): ([^\n]*)")


def exception_chain(error: BaseException):
  """`error` and every exception it wraps (its cause, else its context
  unless suppressed), outermost first."""
  seen = set()
  while error is not None and id(error) not in seen:
    seen.add(id(error))
    yield error
    error = error.__cause__ or (None if error.__suppress_context__
                                else error.__context__)


def _kind(error: BaseException) -> Optional[str]:
  """'space', 'read-only' or 'memory' if `error` is such a fault."""
  number = getattr(error, "errno", None)
  text = str(error)
  if number in (errno.ENOSPC, errno.EDQUOT) or any(
      m in text for m in _NO_SPACE):
    return "space"
  if number == errno.EROFS or any(m in text for m in _READ_ONLY):
    return "read-only"
  if isinstance(error, MemoryError) or number == errno.ENOMEM or any(
      m in text for m in _NO_MEMORY):
    return "memory"
  return None


def describe(error: BaseException, output: Optional[str]) -> Optional[str]:
  """The one line (without `error: `) for a fault of the machine anywhere
  in `error`'s chain, naming the component it stopped and the DIR; None
  when `error` is something else."""
  components = [m.group(1) for e in exception_chain(error)
                for m in [_COMPONENT.search(str(e))] if m]
  where = f" in {components[0]}" if components else ""
  resume = ("; the components that finished are kept: re-run the same "
            "command to resume" if output else "")
  cluster_jobs = [m for e in exception_chain(error)
                  for m in [_CLUSTER_JOB.search(str(e))] if m]
  if cluster_jobs:
    job, state, reason = cluster_jobs[0].groups()
    reason = _COMPONENT.sub("", reason).rstrip(" .[]")
    return (f"the Beam cluster's job {job}{where} ended {state}: "
            f"{reason[:300]} (the cluster's logs say more){resume}")
  kinds = [k for k in map(_kind, exception_chain(error)) if k]
  if not kinds:
    return None
  directory = output or "the output directory"
  if kinds[0] == "space":
    return (f"no space left on the device of {directory}{where}: free "
            f"space there (or give another --output){resume}")
  if kinds[0] == "read-only":
    return (f"{directory} is on a read-only file system{where}: give a "
            f"writable --output")
  return (f"out of memory{where}: give the run a machine with more "
          f"memory, or less data or a smaller --batch-size{resume}")
