"""run-compiled's `python -m` tasks, in forks of one preloading process: a
task sees its own arguments, writes its own log and exit code, finds its
module's imports done once, and leaves nothing behind for the next."""

import os
import signal
import threading
import time

import pytest

from kubeflow import preloaded_python

TASK = '''
import os
import sys
import time

import task_dependency

print("args", sys.argv[1:], "pid", os.getpid(), "parent", os.getppid())
print("on stderr", file=sys.stderr)
print("state", task_dependency.STATE)
task_dependency.STATE.append(len(sys.argv))
if sys.argv[1] == "raise":
  raise ValueError("the task failed")
if sys.argv[1] == "kill":
  os.kill(os.getpid(), signal.SIGKILL)
if sys.argv[1] == "ignore-ctrl-c":
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  print("ready", flush=True)
  time.sleep(60)
sys.exit(int(sys.argv[1]))
'''.replace("import os\n", "import os\nimport signal\n", 1)

DEPENDENCY = '''
import os
with open(os.environ["IMPORTS_FILE"], "a") as imports:
  imports.write(f"{os.getpid()}\\n")
STATE = []
'''


@pytest.fixture(name="python")
def _python(tmp_path):
  modules = tmp_path / "modules"
  modules.mkdir()
  (modules / "a_task.py").write_text(TASK)
  (modules / "task_dependency.py").write_text(DEPENDENCY)
  env = dict(os.environ, IMPORTS_FILE=str(tmp_path / "imports.txt"),
             PYTHONPATH=f"{modules}:{os.environ.get('PYTHONPATH', '')}")
  python = preloaded_python.PreloadedPython(
      ["task_dependency"], str(tmp_path / "server.log"), env)
  yield python
  python.close()


def run(python, tmp_path, *args):
  """(exit code, the task's log)."""
  log = tmp_path / f"task-{len(list(tmp_path.glob('task-*')))}.log"
  code = python.run("a_task", list(args), str(log))
  return code, log.read_text()


def test_a_task_gets_its_args_log_and_exit_code(python, tmp_path):
  code, log = run(python, tmp_path, "0", "--flag=x")
  assert code == 0
  assert "args ['0', '--flag=x']" in log
  assert "on stderr" in log
  assert run(python, tmp_path, "3")[0] == 3
  code, log = run(python, tmp_path, "raise")
  assert code == 1
  assert "ValueError: the task failed" in log
  assert run(python, tmp_path, "kill")[0] == -signal.SIGKILL


def test_imports_are_done_once_and_no_state_reaches_the_next_task(
    python, tmp_path):
  logs = [run(python, tmp_path, "0")[1] for _ in range(3)]
  pids = {line.split()[-3] for log in logs for line in log.splitlines()
          if line.startswith("args")}
  assert len(pids) == 3  # A process each.
  imported_in = (tmp_path / "imports.txt").read_text().split()
  # Once, by the server (every task's parent), not by the tasks.
  parents = {log.split("parent ")[1].split()[0] for log in logs}
  assert imported_in == list(parents)
  # Each task found the module as imported, not as the last task left it.
  assert all("state []" in log for log in logs)


def test_a_module_that_fails_to_preload_is_named(tmp_path):
  python = preloaded_python.PreloadedPython(
      ["no_such_module"], str(tmp_path / "server.log"))
  with pytest.raises(preloaded_python.ServerDied, match="server.log"):
    python.run("a_task", [], str(tmp_path / "task.log"))
  assert "No module named 'no_such_module'" in (
      tmp_path / "server.log").read_text()


def _ended(pid):
  """Whether process `pid` has ended (a zombie, its pipes closed)."""
  with open(f"/proc/{pid}/stat") as stat:
    return stat.read().rsplit(")", 1)[1].split()[0] == "Z"


def test_a_server_that_died_is_named(python, tmp_path):
  log = run(python, tmp_path, "0")[1]
  server = int(log.split("parent ")[1].split()[0])
  os.kill(server, signal.SIGKILL)
  while not _ended(server):  # The request then meets a closed pipe.
    time.sleep(0.05)
  with pytest.raises(preloaded_python.ServerDied, match="server.log"):
    run(python, tmp_path, "0")


def test_ctrl_c_kills_a_task_that_does_not_end_on_its_own(python, tmp_path):
  """One Ctrl-C stops the run: the task gets the grace subprocess.run
  gives, then is killed, and the server then ends at once."""
  log = tmp_path / "task.log"
  main = threading.get_ident()

  def ctrl_c_once_ready():
    while "ready" not in (log.read_text() if log.exists() else ""):
      time.sleep(0.05)
    signal.pthread_kill(main, signal.SIGINT)

  before = signal.signal(signal.SIGINT, signal.default_int_handler)
  try:
    threading.Thread(target=ctrl_c_once_ready, daemon=True).start()
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
      python.run("a_task", ["ignore-ctrl-c"], str(log))
    python.close()
  finally:
    signal.signal(signal.SIGINT, before)
  task = int(log.read_text().split("pid ")[1].split()[0])
  assert time.monotonic() - start < 30
  assert not os.path.exists(f"/proc/{task}")
