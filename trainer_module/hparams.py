"""The base hyperparameters, defined once.

The six values the CowClip paper tunes at a base batch size (1024) and the
scaling rules map to larger batches. This module is their one definition:
name, the paper's value, the tuner's default range around a dataset's value
and whether it is searched on a log scale, and the help text. The scaling
rules (scaling.HPARAM_KEYS), the dataset defaults (features.DatasetSpec
.base_hparams), the command-line flags (--dense-lr ...), the trainer's
validation (training.TrainingConfig) and the tuner's search space all read
it. No TensorFlow: the pipeline definition and the CLI import it.

A set of values is a plain {name: float} mapping (it crosses the TFX
boundary as JSON and is recorded in training.json); ``check_values`` is
the one check that it has exactly these names, each a finite number >= 0.
"""

import dataclasses
import math
import numbers
from typing import Any, Dict, Mapping, Tuple


@dataclasses.dataclass(frozen=True)
class BaseHParam:
  """One base hyperparameter.

  Attributes:
    name: its key (snake_case); the flag is --name-with-dashes.
    default: the paper's value (Criteo, batch 1024); a dataset spec
      replaces it where its published value differs.
    search_factors: the tuner's default [low, high] range as factors of
      the dataset's value.
    log: searched on a log scale (rates and strengths spanning decades).
    help: what it does, for --help.
  """
  name: str
  default: float
  search_factors: Tuple[float, float]
  log: bool
  help: str

  @property
  def flag(self) -> str:
    return self.name.replace("_", "-")


BASE_HPARAMS: Tuple[BaseHParam, ...] = (
    BaseHParam("dense_lr", 8e-4, (0.1, 10.0), True,
               "peak Adam learning rate of the dense weights"),
    BaseHParam("embed_lr", 1e-4, (0.1, 10.0), True,
               "Adam learning rate of the embedding tables"),
    BaseHParam("l2", 1e-5, (0.1, 10.0), True,
               "L2 coefficient on the embedding tables"),
    BaseHParam("r", 1.0, (0.5, 2.0), False,
               "CowClip: gradient norm allowed per id occurrence, as a "
               "ratio of the row's norm"),
    BaseHParam("zeta", 1e-5, (0.1, 10.0), True,
               "CowClip: lower bound of the per-occurrence threshold"),
    BaseHParam("warmup_epochs", 1.0, (0.0, 2.0), False,
               "epochs of linear warmup of the dense learning rate"),
)
# The keys a set of base values must have, and the only ones allowed: a
# misspelt key would otherwise silently escape scaling.
NAMES: Tuple[str, ...] = tuple(h.name for h in BASE_HPARAMS)
BY_NAME: Dict[str, BaseHParam] = {h.name: h for h in BASE_HPARAMS}


def check_value(name: str, value: Any, source: str) -> float:
  """``value`` as a float if it is a finite number >= 0, else ValueError
  naming ``source`` and ``name``."""
  if (isinstance(value, bool) or not isinstance(value, numbers.Real) or
      not math.isfinite(value) or value < 0):
    raise ValueError(f"{source}.{name} must be a finite number >= 0, got "
                     f"{value!r}")
  return float(value)


def check_values(values: Mapping[str, Any],
                 source: str = "base hyperparameters") -> Dict[str, float]:
  """A checked copy of a complete set of values (exactly NAMES)."""
  missing = [k for k in NAMES if k not in values]
  unknown = sorted(k for k in values if k not in BY_NAME)
  if missing or unknown:
    raise ValueError(f"{source} must have exactly the keys {NAMES}; missing "
                     f"{missing}, unknown {unknown}")
  return {k: check_value(k, values[k], source) for k in NAMES}


def check_overrides(values: Mapping[str, Any],
                    source: str = "hyperparameter overrides"
                   ) -> Dict[str, float]:
  """A checked copy of some of the values (a subset of NAMES)."""
  unknown = sorted(k for k in values if k not in BY_NAME)
  if unknown:
    raise ValueError(f"unknown hyperparameters {unknown}; known: "
                     f"{sorted(NAMES)}")
  return {k: check_value(k, v, source) for k, v in values.items()}


def published(**differences: float) -> Dict[str, float]:
  """A dataset's published base values: the defaults with its differences."""
  return check_values({**{h.name: h.default for h in BASE_HPARAMS},
                       **differences}, "published base hyperparameters")
