"""Ctrl-C and SIGTERM end a command with one line and 130 or 143."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from commands import cli
from commands import generate
from commands import interrupts
from pipeline import runner
from trainer_module import callbacks
from trainer_module import trainer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def _stopped_by(signum, wrap, monkeypatch):
  """A command that receives `signum` while "Trainer" runs; with `wrap`,
  the interrupt reaches the CLI as Beam re-raises it."""
  monkeypatch.setattr(runner, "running_components", lambda: ("Trainer",))

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


@pytest.mark.slow
def test_ctrl_c_in_the_trainer_stops_the_run_and_the_rerun_resumes(tmp_path):
  """What a terminal's Ctrl-C does: SIGINT to the run's process group while
  the Trainer trains, after its second epoch. The run ends within seconds,
  status 130, one line naming the Trainer, no traceback (it is in the run
  log), nothing pushed. The same command again resumes the Trainer from
  its backup, after the epochs it had finished (issue #45)."""
  data = tmp_path / "data" / "train.txt"
  generate.write_synthetic("criteo", 30000, 1, str(data))
  out = tmp_path / "out"
  command = [sys.executable, "-m", "pipeline", "run", "--dataset", "criteo",
             "--data", str(data), "--output", str(out), "--epochs", "4",
             "--batch-size", "256", "--seed", "1"]
  process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
  backups = out / "pipeline" / "Trainer" / trainer.BACKUP_DIR
  deadline = time.monotonic() + 600

  def backed_up_epochs():
    states = list(backups.glob("*/*/" + callbacks.TrainingBackup.STATE))
    return json.loads(states[0].read_text())["epoch"] if states else 0

  while backed_up_epochs() < 2:
    assert process.poll() is None and time.monotonic() < deadline
    time.sleep(0.2)
  os.killpg(process.pid, signal.SIGINT)
  stopped = time.monotonic()
  stdout, stderr = process.communicate(timeout=120)
  assert time.monotonic() - stopped < 60
  assert process.returncode == 130, (stdout, stderr)
  assert "Traceback" not in stderr and "Traceback" not in stdout
  assert stderr.strip().splitlines()[-1].startswith(
      "interrupted by Ctrl-C (SIGINT) during Trainer; re-run the same "
      "command to resume"), stderr
  log = out / "logs" / "run.log"
  assert "KeyboardInterrupt" in log.read_text()
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
