"""The run's console: library output to the run log, progress lines."""

import io
import logging
import os

from rich.console import Console

from commands.cli import console
from pipeline import progress


def test_library_output_goes_to_the_log_and_ours_to_the_console(tmp_path):
  with console.library_output_to_log(str(tmp_path)) as stream:
    os.write(2, b"I tensorflow/core C++ line\n")
    os.write(1, b"Epoch 1/2\n")
    stream.write("ours\n")
  log = (tmp_path / progress.LOG_FILE).read_text()
  assert "C++ line" in log and "Epoch 1/2" in log
  assert "ours" not in log


def test_components_start_and_end_in_plain_lines_off_a_terminal(tmp_path):
  output = io.StringIO()
  component_progress = console.ComponentProgress(Console(file=output), None)
  logger = logging.getLogger(progress.PROGRESS_LOGGER)
  logger.setLevel(logging.INFO)
  logger.addHandler(component_progress)
  try:
    with component_progress:
      for event in (progress.STARTED, progress.FINISHED):
        logger.info("Trainer %s", event,
                    extra={"node": "Trainer", "event": event})
  finally:
    logger.removeHandler(component_progress)
  first, second = output.getvalue().splitlines()
  assert first == "Trainer ..."
  assert second.startswith("Trainer done in 0.") and second.endswith(" s")


def test_off_a_terminal_each_finished_epoch_is_a_line(tmp_path):
  """The Trainer's epochs, read from the run log (its rate line, with the
  validation AUC), the last ones before the component's end."""
  log = tmp_path / progress.LOG_FILE
  log.parent.mkdir()
  log.write_text("Epoch 1: 9 examples/s (an earlier run's)\n")
  output = io.StringIO()
  component_progress = console.ComponentProgress(Console(file=output),
                                                 str(log))
  with component_progress:
    component_progress.emit(logging.makeLogRecord(
        {"node": "Trainer", "event": progress.STARTED}))
    with open(log, "a") as f:
      f.write("Epoch 1/2\nEpoch 1: 12,345 examples/s (9 steps of batch 64 "
              "in 0.05 s), val_auc 0.7012\n16/16 - auc: 0.69 - val_auc: "
              "0.7012\nEpoch 2: 23,456 examples/s (9 steps of batch 64 in "
              "0.02 s)\nEpoch 3: 1")  # Not a whole line yet.
    component_progress.emit(logging.makeLogRecord(
        {"node": "Trainer", "event": progress.FINISHED}))
  lines = output.getvalue().splitlines()
  assert lines[:3] == ["Trainer ...",
                       "Trainer epoch 1: 12,345 examples/s, validation AUC "
                       "0.7012",
                       "Trainer epoch 2: 23,456 examples/s"]
  assert lines[3].startswith("Trainer done in ") and len(lines) == 4


def test_a_long_silent_component_says_it_still_runs(tmp_path, monkeypatch):
  log = tmp_path / "run.log"
  log.write_text("")
  output = io.StringIO()
  plain = console.ComponentProgress(Console(file=output), str(log))
  plain.emit(logging.makeLogRecord(
      {"node": "Transform", "event": progress.STARTED}))
  monkeypatch.setattr(console, "HEARTBEAT_SECONDS", 0.0)
  plain._plain_epochs.print_heartbeat()  # pylint: disable=protected-access
  assert output.getvalue().splitlines() == ["Transform ...",
                                            "Transform still running (0 min)"]
