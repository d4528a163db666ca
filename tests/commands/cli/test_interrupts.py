"""Ctrl-C and SIGTERM end a command with one line and 130 or 143."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from commands.cli import interrupts
from commands.cli import main as cli
from commands.synthetic import generate
from pipeline import progress
from trainer_module import callbacks
from trainer_module import trainer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


def _stopped_by(signum, wrap, monkeypatch):
  """A command that receives `signum` while "Trainer" runs; with `wrap`,
  the interrupt reaches the CLI as Beam re-raises it."""
  monkeypatch.setattr(progress, "running_components", lambda: ("Trainer",))

  def write(*args, **kwargs):
    try:
      os.kill(os.getpid(), signum)
      time.sleep(10)
    except KeyboardInterrupt as error:
      if wrap:
        raise RuntimeError(
            "KeyboardInterrupt [while running 'Run[Trainer]']") from error
      raise
    raise AssertionError("the signal did not stop the command")

  monkeypatch.setattr(generate, "write_synthetic", write)


@pytest.mark.parametrize("signum, wrap, status", [
    (signal.SIGINT, False, 130), (signal.SIGINT, True, 130),
    (signal.SIGTERM, True, 143)])
def test_a_signal_ends_the_command_in_one_line(signum, wrap, status,
                                               monkeypatch, tmp_path,
                                               capsys):
  _stopped_by(signum, wrap, monkeypatch)
  before = signal.getsignal(signal.SIGINT)
  assert cli.main(["generate", "--format", "criteo", "--rows", "10",
                   "--out", str(tmp_path / "x.txt")]) == status
  err = capsys.readouterr().err
  name = "Ctrl-C (SIGINT)" if signum == signal.SIGINT else "SIGTERM"
  assert err.strip() == f"interrupted by {name} during Trainer", err
  # The handlers are the caller's again.
  assert signal.getsignal(signal.SIGINT) is before


def test_the_resume_hint_names_the_output():
  assert interrupts.describe("/runs/x").endswith(
      "re-run the same command to resume: the components that finished are "
      "reused from /runs/x")


def test_other_errors_are_not_interrupts():
  assert interrupts.exit_status(ValueError("bad")) is None
  assert interrupts.exit_status(RuntimeError("a component failed")) is None


def _start(command):
  """`command` as a terminal starts it: its own process group (Ctrl-C
  goes to the group), SIGINT not ignored (a background job of a
  non-interactive shell, as CI may start the tests, inherits it ignored),
  its console unbuffered so its lines arrive as they are printed."""
  return subprocess.Popen(
      command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
      text=True, start_new_session=True,
      env={**os.environ, "PYTHONUNBUFFERED": "1"},
      preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


# A bound that tells stopping at once from finishing the stage, not a speed
# figure: idle runs stop in a few seconds, a loaded CI machine took 10.5.
STOP_BOUND = 30


def _ctrl_c_once(process, started):
  """Ctrl-C to `process`'s group once `started()` holds; asserts that it
  stops within `STOP_BOUND` s with status 130, one line on the console
  naming where it stopped and how to resume, and no traceback. Returns
  that line."""
  deadline = time.monotonic() + 600
  while not started():
    assert process.poll() is None, process.communicate()
    assert time.monotonic() < deadline
  os.killpg(process.pid, signal.SIGINT)
  stopped = time.monotonic()
  stdout, stderr = process.communicate(timeout=120)
  assert time.monotonic() - stopped < STOP_BOUND, (stdout, stderr)
  assert process.returncode == 130, (stdout, stderr)
  assert "Traceback" not in stderr and "Traceback" not in stdout
  line = stderr.strip().splitlines()[-1]
  assert line.startswith("interrupted by Ctrl-C (SIGINT) during "), stderr
  assert line.endswith("re-run the same command to resume: the components "
                       "that finished are reused from "
                       f"{_output_of(process)}"), line
  return line


def _output_of(process) -> str:
  """The --output of the command `process` runs."""
  return process.args[process.args.index("--output") + 1]


def _printed(process, text):
  """A condition: `text` began a line of `process`'s console (read as
  the lines come)."""
  def seen():
    line = process.stdout.readline()
    return line.startswith(text)
  return seen


@pytest.mark.slow
def test_ctrl_c_stops_each_stage_and_each_rerun_resumes(tmp_path):
  """What a terminal's Ctrl-C does, at each stage of one run: SIGINT to
  the run's process group during ExampleGen, then (the same command again)
  during Transform, then during the Trainer after its second epoch. Each
  ends within STOP_BOUND s, status 130, one line naming where, no
  traceback (it is in the run log), nothing pushed; each re-run goes past where the last one
  stopped, and the last resumes the Trainer from its backup after the
  epochs it had finished and completes (issue #45)."""
  data = tmp_path / "data" / "train.txt"
  generate.write_synthetic("criteo", 30000, 1, str(data))
  out = tmp_path / "out"
  command = [sys.executable, "-m", "pipeline", "run", "--dataset", "criteo",
             "--data", str(data), "--output", str(out), "--epochs", "4",
             "--batch-size", "256", "--seed", "1"]
  log = out / "logs" / "run.log"

  process = _start(command)
  assert _ctrl_c_once(process, _printed(process, "RawCtrExampleGen ...")
                     ).startswith(
                         "interrupted by Ctrl-C (SIGINT) during "
                         "RawCtrExampleGen;")
  assert "KeyboardInterrupt" in log.read_text()

  process = _start(command)
  assert _ctrl_c_once(process, _printed(process, "Transform ...")).startswith(
      "interrupted by Ctrl-C (SIGINT) during Transform;")

  backups = out / "pipeline" / "Trainer" / trainer.BACKUP_DIR

  def backed_up_epochs():
    states = list(backups.glob("*/*/" + callbacks.TrainingBackup.STATE))
    return json.loads(states[0].read_text())["epoch"] if states else 0

  def two_epochs_backed_up():
    time.sleep(0.2)
    return backed_up_epochs() >= 2

  process = _start(command)
  assert _ctrl_c_once(process, two_epochs_backed_up).startswith(
      "interrupted by Ctrl-C (SIGINT) during Trainer;")
  assert not (out / "serving").exists() or not os.listdir(out / "serving")

  done = backed_up_epochs()
  rerun = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                         check=False)
  assert rerun.returncode in (0, 3), (rerun.stdout, rerun.stderr)
  (record,) = (out / "pipeline" / "Trainer" / "model_run").glob(
      "*/training.json")
  record = json.loads(record.read_text())
  assert record["resumed_after"] == done >= 2
  assert f"after its epoch {done}" in log.read_text()
  assert not backups.exists()  # The completed Trainer deletes its backups.
