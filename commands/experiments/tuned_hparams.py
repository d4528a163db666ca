"""What a tuning job leaves for `run --hparams-from`, and its check.

Apart from the tuning job (commands.experiments.tune: TFX, KerasTuner,
matplotlib) so that the command line checks --hparams-from before it
imports them.
"""

import json
import math
import os
from typing import Any, Dict

from trainer_module import contract
from trainer_module import scaling

BEST_JSON = "best_hyperparameters.json"
BEST_DIR = "best_hyperparameters"
# The name TFX's Tuner executor gives the file in its artifact.
BEST_FILE = "best_hyperparameters.txt"


def check_best_hyperparameters(path: str) -> Dict[str, Any]:
  """The tuned values of a best_hyperparameters.txt, checked.

  Returns:
    Its "values" without KerasTuner's "tuner/*" bookkeeping.

  Raises:
    ValueError: naming the file and the key, for anything run_fn could not
      use or would silently ignore.
  """
  try:
    with open(path, encoding="utf-8") as f:
      config = json.load(f)
  except json.JSONDecodeError as error:
    raise ValueError(f"{path}, line {error.lineno}: not valid JSON: "
                     f"{error.msg}") from None
  values = config.get("values") if isinstance(config, dict) else None
  if not isinstance(values, dict):
    raise ValueError(f"{path}: expected a KerasTuner HyperParameters config "
                     '{"space": [...], "values": {...}}')
  values = {k: v for k, v in values.items() if not k.startswith("tuner/")}
  base_keys = scaling.HPARAM_KEYS
  unknown = sorted(set(values) - set(base_keys + contract.MODEL_SIZE_KEYS))
  if unknown or not values:
    raise ValueError(f"{path}: unknown hyperparameters {unknown} (known: "
                     f"{list(base_keys + contract.MODEL_SIZE_KEYS)})")
  for name, value in values.items():
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if name in base_keys and not (number and math.isfinite(value) and
                                  value >= 0):
      raise ValueError(f"{path}: {name} must be a finite number >= 0, got "
                       f"{value!r}")
    if name in contract.MODEL_SIZE_KEYS and not (
        isinstance(value, int) and not isinstance(value, bool) and value > 0):
      raise ValueError(f"{path}: {name} must be a positive integer, got "
                       f"{value!r}")
  return values


def resolve_hparams_dir(path: str, dataset: str) -> str:
  """The directory `--hparams-from PATH` means, checked.

  PATH is a Tuner's best_hyperparameters artifact (a directory holding only
  best_hyperparameters.txt, which is what the Trainer reads) or the output
  DIR of a tuning job (DIR/best_hyperparameters/). A URI is returned as is:
  it is read, and checked, where the pipeline runs.

  Raises:
    ValueError: PATH is neither, or holds values run_fn cannot use, or was
      tuned on another dataset.
  """
  if "://" in path:
    return path
  path = os.path.abspath(path)
  if not os.path.isdir(path):
    raise ValueError(f"--hparams-from {path}: not a directory (give a "
                     "Tuner's best_hyperparameters artifact directory or the "
                     "--output DIR of `python -m pipeline tune`)")
  candidates = [d for d in (path, os.path.join(path, BEST_DIR))
                if os.path.isfile(os.path.join(d, BEST_FILE))]
  if not candidates:
    raise ValueError(f"--hparams-from {path}: no {BEST_FILE} in it nor in "
                     f"{BEST_DIR}/ (give a Tuner's best_hyperparameters "
                     "artifact directory or the --output DIR of `python -m "
                     "pipeline tune`)")
  directory = candidates[0]
  others = sorted(set(os.listdir(directory)) - {BEST_FILE})
  if others:
    raise ValueError(f"--hparams-from {directory}: holds {others} besides "
                     f"{BEST_FILE}; the Trainer reads the only file of the "
                     "directory")
  check_best_hyperparameters(os.path.join(directory, BEST_FILE))
  summary = os.path.join(path, BEST_JSON)
  if directory != path and os.path.isfile(summary):
    with open(summary, encoding="utf-8") as f:
      tuned_on = json.load(f).get("dataset")
    if tuned_on != dataset:
      raise ValueError(f"--hparams-from {path}: tuned on {tuned_on!r} (see "
                       f"{summary}), but this run is {dataset!r}")
  return directory
