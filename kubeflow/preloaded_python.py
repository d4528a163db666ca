"""A task's `python -m MODULE ARGS`, run in a fork of a process that has
already imported the modules it needs: `run-compiled`'s stand-in for a
fresh container.

Every task of our compiled spec runs TFX's KFP entrypoint, whose import
(all of tfx.components, so TFMA, Beam and TensorFlow) took 8.5 s of each
task, most of a small task's time (docs/tests.md). Here one server process
per run imports the given modules once (they must do nothing on import
but define, as TFX's entrypoint does) and forks a child per task; the
child runs MODULE as `__main__` with the task's arguments, its output in
the task's log, so it starts where a fresh `python -m` would be after
those imports. Nothing a task does outlives its child.

The server reads one JSON request per line on stdin ({"module", "args",
"log"}) and answers {"pid": child} when the task starts and {"exit": code}
when it ends, on the descriptor that was its stdout;
its own stdout and stderr (import warnings) go to its log. It imports no
project module: it runs as a script.
"""

import importlib
import json
import os
import runpy
import select
import signal
import subprocess
import sys
import traceback
from typing import List, Optional, Sequence


# How long an interrupted task may take to end on its own SIGINT before it
# is killed: subprocess.run's grace on KeyboardInterrupt.
INTERRUPT_GRACE_SECONDS = 0.25


class ServerDied(RuntimeError):
  """The preloading process ended before answering."""


class PreloadedPython:
  """Runs `python -m` commands in forks of one preloading process, started
  on the first command and ended by `close`."""

  def __init__(self, preload: Sequence[str], log_path: str,
               env: Optional[dict] = None):
    """`preload`: modules imported once, before the first task;
    `log_path`: the server's own output; `env`: its environment (the
    tasks'); None: this process's."""
    self._preload = list(preload)
    self._log_path = log_path
    self._env = env
    self._server: Optional[subprocess.Popen] = None

  def run(self, module: str, args: List[str], log_path: str) -> int:
    """Runs `python -m module *args` with its output in `log_path`; its exit
    code (negative: killed by that signal)."""
    if self._server is None:
      with open(self._log_path, "a", encoding="utf-8") as log:
        self._server = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), *self._preload],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
            env=self._env, text=True)
    request = json.dumps({"module": module, "args": list(args),
                          "log": os.path.abspath(log_path)})
    try:
      self._server.stdin.write(request + "\n")
      self._server.stdin.flush()
    except BrokenPipeError:
      pass  # The answer's absence says it.
    child = self._answer()["pid"]
    try:
      return self._answer()["exit"]
    except KeyboardInterrupt:
      # As subprocess.run: the task got the same Ctrl-C (its process
      # group's); a task that has not ended within the grace is killed, so
      # one Ctrl-C stops the run.
      ready, _, _ = select.select([self._server.stdout], [], [],
                                  INTERRUPT_GRACE_SECONDS)
      if not ready:
        try:
          os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
          pass
      raise

  def _answer(self) -> dict:
    """The server's next answer; ServerDied if it ended instead."""
    answer = self._server.stdout.readline()
    if not answer:
      self.close()
      raise ServerDied(f"the process that runs the tasks' python ended "
                       f"(log {self._log_path})")
    return json.loads(answer)

  def close(self) -> None:
    """Ends the server (at end of input, after any task it runs)."""
    if self._server is not None:
      server, self._server = self._server, None
      try:
        server.stdin.close()
      except BrokenPipeError:
        pass  # It has ended already: its request is moot.
      server.wait()
      server.stdout.close()


def _run_child(module: str, args: List[str], log_path: str) -> int:
  """In the forked child: `module` as __main__, output to `log_path`."""
  signal.signal(signal.SIGINT, signal.default_int_handler)
  log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
  os.dup2(log_fd, 1)
  os.dup2(log_fd, 2)
  os.close(log_fd)
  null = os.open(os.devnull, os.O_RDONLY)
  os.dup2(null, 0)
  os.close(null)
  sys.argv = [module] + args
  code = 0
  try:
    runpy.run_module(module, run_name="__main__", alter_sys=True)
  except SystemExit as done:
    if done.code is None:
      code = 0
    elif isinstance(done.code, int):
      code = done.code
    else:
      print(done.code, file=sys.stderr)
      code = 1
  except BaseException:  # pylint: disable=broad-except
    traceback.print_exc()
    code = 1
  finally:
    sys.stdout.flush()
    sys.stderr.flush()
  return code


def _serve() -> None:
  """The server: imports the modules named in its arguments, then forks,
  waits and answers for each request, until the end of its input."""
  sys.path[0] = os.getcwd()  # As `python -m` has it, not this file's room.
  answers = os.fdopen(os.dup(1), "w")
  os.dup2(2, 1)  # What the imports print goes to the server's log.
  # Ctrl-C reaches the running child (same process group); the server ends
  # when the run closes its input.
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  for module in sys.argv[1:]:
    importlib.import_module(module)
  for line in sys.stdin:
    request = json.loads(line)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
      code = 1
      try:
        code = _run_child(request["module"], request["args"], request["log"])
      finally:
        os._exit(code)  # pylint: disable=protected-access
    answers.write(json.dumps({"pid": pid}) + "\n")
    answers.flush()
    _, status = os.waitpid(pid, 0)
    answers.write(json.dumps({"exit": os.waitstatus_to_exitcode(status)})
                  + "\n")
    answers.flush()


if __name__ == "__main__":
  _serve()
