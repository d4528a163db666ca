"""The held train split kept on local disk between processes
(input_pipeline.hold_split's `keep_in`).

The study's runs are each a command of their own, and a Trainer or a Tuner
resumed after a kill is a new process: each would read and parse the train
split again (5.7 min at 8.8M Criteo rows). Kept, it is read back in about
a minute. The parts are in_memory's blocks as .npy files, and `held.json`
says what they were read from (`inputs`): a change to any of it reads the
files again.
"""

import hashlib
import json
import os
import shutil
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from absl import logging
import tensorflow as tf

from trainer_module import in_memory as in_memory_lib

# The folder kept under a study's DIR, a Trainer's backups and a Tuner's
# search directory.
HELD_SPLIT_DIR = "held_split"
_HELD_FILE = "held.json"
# input_pipeline.HeldSplit's fields kept in held.json.
COUNTS = ("train_examples", "validation_examples", "click_rate",
          "validation_buckets")
# Each part kept: its folder, and HeldSplit's fields of its rows and of its
# rows held in memory.
PARTS = {"validation": ("validation_examples", "validation_in_memory"),
         "train": ("train_examples", "in_memory")}


def split_inputs(train_files: List[str], transform_dir: str, label: str,
                 negative_sampling_rate: float,
                 modules: Sequence[str]) -> Dict[str, Any]:
  """What a held split depends on: the files (path, size, modified), the
  Transform output, the label, the sampling rate and the code (`modules`:
  the source files that carve, sample and lay out the parts)."""
  files = sorted(f for p in train_files for f in tf.io.gfile.glob(p))
  code = hashlib.sha256()
  for module in (*modules, __file__):
    with open(module, "rb") as f:
      code.update(f.read())
  stats = [tf.io.gfile.stat(f) for f in files]
  return {"files": [[f, stat.length, stat.mtime_nsec]
                    for f, stat in zip(files, stats)],
          "transform": transform_dir,
          "label": label, "negative_sampling_rate": negative_sampling_rate,
          "code": code.hexdigest()}


def read_kept(keep_in: str, inputs: Mapping[str, Any],
              fits: Callable[[int], bool],
              element_spec: Callable[[str, int], Any]
              ) -> Optional[Dict[str, Any]]:
  """HeldSplit's fields as keep_split kept them in `keep_in`, or None when
  none is kept for these `inputs`, or this machine would hold other parts
  (`fits`: rows -> whether they are held; `element_spec`: (part, buckets)
  -> the element_spec of the dataset a part was loaded from)."""
  try:
    with open(os.path.join(keep_in, _HELD_FILE)) as f:
      kept = json.load(f)
  except FileNotFoundError:
    return None
  except (OSError, ValueError) as error:
    logging.warning("ignoring the held split kept in %s: %s", keep_in, error)
    return None
  if kept.get("inputs") != inputs:
    return None
  counts = {name: kept[name] for name in COUNTS}
  rows = {part: counts[examples] for part, (examples, _) in PARTS.items()}
  if any(fits(rows[part]) != (part in kept["parts"]) for part in rows):
    return None
  try:
    parts = {PARTS[part][1]: in_memory_lib.read_part(
        os.path.join(keep_in, part),
        element_spec(part, counts["validation_buckets"]), rows[part])
             for part in kept["parts"]}
  except (OSError, ValueError) as error:
    logging.warning("ignoring the held split kept in %s: %s", keep_in, error)
    return None
  logging.info("the train split as held before, from %s", keep_in)
  return {**counts, **parts}


def keep_split(fields: Mapping[str, Any], keep_in: str,
               inputs: Mapping[str, Any]) -> None:
  """Writes HeldSplit's `fields` to `keep_in` for read_kept, whole or not
  at all (a directory beside it, renamed; one writer at a time); a failed
  write (a full disk) is a warning: the next process reads the files
  again."""
  partial = keep_in.rstrip("/") + ".partial"
  shutil.rmtree(partial, ignore_errors=True)
  parts = {part: fields[held] for part, (_, held) in PARTS.items()
           if fields[held] is not None}
  try:
    os.makedirs(partial)
    for part, held in parts.items():
      in_memory_lib.save_part(held, os.path.join(partial, part))
    with open(os.path.join(partial, _HELD_FILE), "w") as f:
      json.dump({"inputs": inputs, **{name: fields[name] for name in COUNTS},
                 "parts": list(parts)}, f)
    shutil.rmtree(keep_in, ignore_errors=True)
    os.rename(partial, keep_in)
  except OSError as error:
    shutil.rmtree(partial, ignore_errors=True)
    logging.warning("could not keep the held split in %s (%s): the next "
                    "run reads the files again", keep_in, error)
