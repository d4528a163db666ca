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

