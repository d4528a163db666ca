"""What TensorFlow prints while it is imported, held for the run's log.

TensorFlow writes its startup lines (CUDA, oneDNN, CPU features) on fd 2
while it is imported, before the command line says where the run's log is
(commands.cli.console). Parsing imports no TensorFlow, so --help and usage
errors have no such lines; after parsing, the command line
(commands.cli.main) holds them in a temporary file while it imports the
handler: the run's console copies them into the log, or the command line
lets them through (--verbose, commands without a log) or drops them (a
user error, commands that use no device). Imports only the standard
library.
"""

import os
import shutil
import sys
import tempfile
from typing import BinaryIO, List, Optional, Tuple

# (temporary file, the real fd 2) while hold holds fd 2.
_HELD: List[Tuple[BinaryIO, int]] = []


def hold() -> None:
  """Points fd 2 at a temporary file until release."""
  sys.stderr.flush()
  held = tempfile.TemporaryFile()
  _HELD.append((held, os.dup(2)))
  os.dup2(held.fileno(), 2)


def release(to: Optional[BinaryIO]) -> None:
  """Restores fd 2; what was held is copied to `to` (None: dropped: the
  run was refused before it had a log). No-op when nothing is held."""
  if not _HELD:
    return
  held, original = _HELD.pop()
  sys.stderr.flush()
  os.dup2(original, 2)
  os.close(original)
  if to is not None:
    held.seek(0)
    shutil.copyfileobj(held, to)
    to.flush()
  held.close()
