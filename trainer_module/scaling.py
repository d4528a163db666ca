"""Hyperparameter scaling rules for growing the batch size.

Given hyperparameters tuned at a base batch size, each rule says how to set
them at ``batch_size = s * base_batch_size`` (Zheng et al., "CowClip",
AAAI 2023):

  rule        dense_lr     embed_lr    l2
  none        x 1          x 1         x 1
  linear      x s          x s         x 1     (Goyal et al.)
  sqrt        x sqrt(s)    x sqrt(s)   x sqrt(s)
  n2-lambda   x sqrt(s)    x 1         x s^2   (paper's Scaling Rule 4)
  cowclip     x sqrt(s)    x 1         x s     (paper's Scaling Rule 3)

r, zeta and warmup_epochs never change.

Why: a batch s times larger means s times fewer steps per epoch. Dense
weights see every example at every step, so they need a larger step (sqrt(s)
is what works with Adam). A rare id shows up in at most one example of the
batches that contain it, so it gets the same number of updates per epoch at
any batch size: its learning rate stays fixed, and scaling it would only blow
up rare rows. Frequent ids do lose updates; CowClip's count-proportional
threshold keeps their larger steps stable. L2 acts once per step, so with the
embedding learning rate fixed it is scaled by s to keep its per-epoch pull.
"""

import math
import numbers
from typing import Dict, Mapping

RULES = ("none", "linear", "sqrt", "n2-lambda", "cowclip")
DEFAULT_RULE = "cowclip"

# The keys a base set of hyperparameters must have, and the only ones allowed:
# a misspelt key would otherwise silently escape scaling.
HPARAM_KEYS = ("dense_lr", "embed_lr", "l2", "r", "zeta", "warmup_epochs")


def scale_hparams(rule: str, base: Mapping[str, float], base_batch_size: int,
                  batch_size: int) -> Dict[str, float]:
  """The hyperparameters for ``batch_size`` under a scaling rule.

  Args:
    rule: one of RULES.
    base: hyperparameters tuned at ``base_batch_size``, with exactly the keys
      HPARAM_KEYS. Not modified.
    base_batch_size: the batch size ``base`` was tuned for (> 0).
    batch_size: the target batch size (> 0).

  Returns:
    A new dict with the keys of HPARAM_KEYS.

  Raises:
    ValueError: unknown rule, missing or unknown keys in ``base``, or batch
      sizes that are not positive integers.
  """
  if rule not in RULES:
    raise ValueError(f"unknown scaling rule {rule!r}; choose one of {RULES}")
  missing = [k for k in HPARAM_KEYS if k not in base]
  unknown = sorted(k for k in base if k not in HPARAM_KEYS)
  if missing or unknown:
    raise ValueError(f"base hyperparameters must have exactly the keys "
                     f"{HPARAM_KEYS}; missing {missing}, unknown {unknown}")
  for name, size in (("base_batch_size", base_batch_size),
                     ("batch_size", batch_size)):
    if (isinstance(size, bool) or not isinstance(size, numbers.Integral) or
        size <= 0):
      raise ValueError(f"{name} must be a positive integer, got {size!r}")

  s = batch_size / base_batch_size
  dense_factor, embed_factor, l2_factor = {
      "none": (1.0, 1.0, 1.0),
      "linear": (s, s, 1.0),
      "sqrt": (math.sqrt(s), math.sqrt(s), math.sqrt(s)),
      "n2-lambda": (math.sqrt(s), 1.0, s * s),
      "cowclip": (math.sqrt(s), 1.0, s),
  }[rule]
  scaled = dict(base)
  scaled["dense_lr"] = base["dense_lr"] * dense_factor
  scaled["embed_lr"] = base["embed_lr"] * embed_factor
  scaled["l2"] = base["l2"] * l2_factor
  return scaled
