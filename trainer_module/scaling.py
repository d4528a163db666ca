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
from typing import Dict, Mapping, Sequence, Tuple

from trainer_module import hparams

RULES = ("none", "linear", "sqrt", "n2-lambda", "cowclip")
DEFAULT_RULE = "cowclip"

# The keys a base set of hyperparameters must have (hparams.NAMES).
HPARAM_KEYS = hparams.NAMES


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
    ValueError: unknown rule, missing or unknown keys in ``base``, values
      that are not finite numbers >= 0, or batch sizes that are not
      positive integers.
  """
  if rule not in RULES:
    raise ValueError(f"unknown scaling rule {rule!r}; choose one of {RULES}")
  base = hparams.check_values(base)
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


# The base hyperparameters that `auto_base_hparams` derives from the data
# size (the others, r, zeta and warmup_epochs, do not depend on it).
AUTO_KEYS = ("dense_lr", "embed_lr", "l2")
# Exponents of the data-size factor ratio = reference / train examples, and
# the factors' caps. The embedding rate's fits two tuned points at batch
# 1024: the paper's Criteo values (41M training rows: embed_lr 1e-4) and the
# study's sweep on 600k generated rows (docs/study.md: embed_lr 3e-3), i.e.
# 69x fewer rows wanted a 30x larger rate (69 ** 0.8 = 30). The L2's lies
# between that sweep (l2 1e-4 to 3e-4 at 600k rows: 69 ** 0.54 to 0.8) and a
# sweep on 18k rows (docs/defaults.md: 2e-3 to 5e-3, 2290 ** 0.69 to 0.81),
# on the strong side: small real data has many ids seen once or twice.
AUTO_EMBED_EXPONENT = 0.8
AUTO_L2_EXPONENT = 0.7
AUTO_MAX_FACTOR = 100.0
AUTO_MAX_L2_FACTOR = 500.0
# The dense weights' rate grows as sqrt(ratio), up to this value (Adam's
# usual rate; the paper's Criteo value is 8e-4), never below the published.
AUTO_MAX_DENSE_LR = 1e-3


def auto_base_hparams(published: Mapping[str, float],
                      reference_examples: int, train_examples: int,
                      keys: Sequence[str] = AUTO_KEYS) -> Dict[str, float]:
  """Base hyperparameters (at the base batch size) for a data size.

  The published values assume ``reference_examples`` training rows: tens of
  thousands of steps per epoch at the base batch, in which an Adam-trained
  embedding row, moving about embed_lr per update, travels far enough. With
  fewer rows the run makes fewer updates, so the embedding rate grows as
  ratio ** 0.8 (ratio = reference / train examples, capped at 100x), the
  per-step L2 as ratio ** 0.7 (capped at 500x): fewer steps need a stronger
  pull per step, and small data more regularisation; the dense rate grows as
  sqrt(ratio) up to AUTO_MAX_DENSE_LR. More rows than the reference keep
  the published values. The scaling rule then maps this base to the batch
  size, as it would the published one.

  Args:
    published: base hyperparameters (HPARAM_KEYS) for reference_examples.
    reference_examples: training rows the published values were tuned on.
    train_examples: training rows of this run (> 0).
    keys: the members of AUTO_KEYS to derive; the others stay published.

  Returns:
    A new dict with the keys of ``published``.
  """
  unknown = sorted(set(keys) - set(AUTO_KEYS))
  if unknown:
    raise ValueError(f"cannot derive {unknown} from the data size; "
                     f"auto keys are {AUTO_KEYS}")
  if train_examples <= 0 or reference_examples <= 0:
    raise ValueError("train and reference examples must be positive, got "
                     f"{train_examples} and {reference_examples}")
  ratio = max(1.0, reference_examples / train_examples)
  derived = {
      "embed_lr": published["embed_lr"] * min(
          ratio ** AUTO_EMBED_EXPONENT, AUTO_MAX_FACTOR),
      "l2": published["l2"] * min(ratio ** AUTO_L2_EXPONENT,
                                  AUTO_MAX_L2_FACTOR),
      "dense_lr": max(published["dense_lr"],
                      min(published["dense_lr"] * math.sqrt(ratio),
                          AUTO_MAX_DENSE_LR)),
  }
  return {**published, **{k: derived[k] for k in keys}}


# --batch-size auto (the default): the largest power of two from the base
# batch size (the paper's 1024) up to MAX_AUTO_BATCH_SIZE that still gives
# an epoch MIN_STEPS_PER_EPOCH steps. Why that floor: the paper-regime
# study held its AUC at 32768 with 269 steps an epoch (8.8M training rows,
# docs/study_paper_regime: CowClip -0.00004 against `none` at 1024), and
# the paper's 128K runs had 280-315 (Criteo's and Avazu's 36-41M training
# rows); no run with fewer steps was measured. The cap: 65536 is the
# largest batch the study runs; the paper's Table 6 shows the clip's form
# deciding the AUC at 128K.
AUTO_BATCH_SIZE = "auto"
MAX_AUTO_BATCH_SIZE = 65536
MIN_STEPS_PER_EPOCH = 256


def steps_per_epoch(train_examples: int, batch_size: int) -> int:
  """Training steps of one epoch: the last, partial batch is a step."""
  return math.ceil(train_examples / batch_size)


def auto_batch_size(train_examples: int, base_batch_size: int,
                    replicas: int = 1) -> Tuple[int, str]:
  """The batch size `--batch-size auto` trains with, and why.

  The largest power of two times `base_batch_size`, at most
  MAX_AUTO_BATCH_SIZE, whose epoch of `train_examples` rows still has
  MIN_STEPS_PER_EPOCH steps; the base batch size when none has (small data
  trains as the paper's base runs do), or, on fewer rows than that, the
  largest power of two they hold. Rounded down to a multiple of the
  replicas, which split each batch.
  """
  batch = base_batch_size
  while (batch * 2 <= MAX_AUTO_BATCH_SIZE and
         steps_per_epoch(train_examples, batch * 2) >= MIN_STEPS_PER_EPOCH):
    batch *= 2
  larger = batch * 2
  if batch > train_examples:
    batch = 2 ** int(math.log2(max(train_examples, 1)))
    why = (f"the largest power of two not above the {train_examples:,} "
           f"training rows (fewer than the base batch size {base_batch_size})")
  elif larger > MAX_AUTO_BATCH_SIZE:
    why = (f"{steps_per_epoch(train_examples, batch):,} steps an epoch on "
           f"{train_examples:,} training rows; {MAX_AUTO_BATCH_SIZE} is the "
           "largest auto batch size")
  else:
    why = (f"{steps_per_epoch(train_examples, batch):,} steps an epoch on "
           f"{train_examples:,} training rows; {larger} would give "
           f"{steps_per_epoch(train_examples, larger):,}, under "
           f"{MIN_STEPS_PER_EPOCH}")
  return max(batch - batch % replicas, replicas), f"auto: {why}"
