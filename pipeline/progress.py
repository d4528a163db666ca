"""What a run tells its console and its scheduler, without TFX.

The exit statuses and the progress records of the components live here,
apart from the runners (pipeline.runner imports TFX), so that the command
line and its signal handlers import no TensorFlow before they must.
"""

import logging
import os
from typing import Tuple

# Where a run's console sends the libraries' output, under its --output
# (commands.cli.console).
LOG_FILE = os.path.join("logs", "run.log")

# Exit status of a run for schedulers (0: done, model pushed; 2: usage error,
# argparse's): the run failed (bad input, anomalies, a component error), or
# it finished but the model was not blessed and so not pushed.
EXIT_FAILED = 1
EXIT_NOT_PUSHED = 3
# The logger of each component's start and end (INFO records with `node`
# and `event` attributes): a console can show progress from them.
PROGRESS_LOGGER = "pipeline.progress"
STARTED, FINISHED = "started", "finished"

# The components running now in this process (an interrupted run names
# them).
_RUNNING = set()


def log_progress(node: str, event: str, summary: str = "") -> None:
  """One record of PROGRESS_LOGGER: `node` STARTED or FINISHED (with a
  one-line `summary` of what it did, if any)."""
  logging.getLogger(PROGRESS_LOGGER).info(
      "%s %s%s", node, event, f": {summary}" if summary else "",
      extra={"node": node, "event": event, "summary": summary})


def mark_running(node: str, running: bool) -> None:
  """Records that `node` started (True) or ended (False) in this process."""
  if running:
    _RUNNING.add(node)
  else:
    _RUNNING.discard(node)


def running_components() -> Tuple[str, ...]:
  """The components started and not finished in this process."""
  return tuple(sorted(_RUNNING))
