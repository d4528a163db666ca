"""Id-frequency profiles of the synthetic data, and what they imply.

The CowClip paper's argument rests on ids of very different frequencies
needing different learning-rate scaling. Two knobs set that property:

* the frequency profile (`--id-profile`): `default` draws each field's ids
  from a power law over as many ranks as the real data has distinct values;
  `kaggle` is fitted to what is published about the real Kaggle Criteo
  `train.txt` (per-field distinct values, about a million ids seen at least
  10 times): a steeper power law for the eight large fields plus a share of
  one-off ids (IdField.one_off_share);
* the share of the click signal carried by rare ids (`--rare-signal beta`):
  an id of rank k gets a weight of scale (k + 1)^beta, normalised per field.

The expected counts are computed in closed form from the same distributions
the generator samples (Poisson counts), so a profile can be checked at the
full 45.8M rows without writing them.
"""

import dataclasses
import math
from typing import Callable, Dict, Mapping, Tuple

import numpy as np
from scipy import stats

from commands.cli.generate_flags import PROFILES
from commands.synthetic import world as synthetic_world
from commands.synthetic.world import IdField, World


# The Kaggle Criteo train.txt: rows and distinct values of C1..C26.
KAGGLE_CRITEO_ROWS = 45_840_617
KAGGLE_CRITEO_DISTINCT = dict(zip(
    [f"C{i}" for i in range(1, 27)],
    (1460, 583, 10_131_227, 2_202_608, 305, 24, 12_517, 633, 3, 93_145,
     5683, 8_351_593, 3194, 27, 14_992, 5_461_306, 10, 5652, 2173, 4,
     7_046_547, 18, 15, 286_181, 105, 142_572)))
# Ids of the real train.txt seen at least 10 times: about a million.
KAGGLE_CRITEO_KEPT_AT_10 = 1_000_000
# Rows of the published datasets, the size weight_norms are taken at.
FULL_ROWS = {"criteo": KAGGLE_CRITEO_ROWS, "avazu": 40_428_967}

# The `kaggle` profile of Criteo's large fields: exponent and one-off share
# fitted (fit_one_off_share) so that the expected distinct values of the
# full train.txt equal the published ones and about a million ids are seen
# 10 times in its 90% training split.
_KAGGLE_EXPONENT = 1.13
_KAGGLE_ONE_OFF = {"C3": 0.1754, "C4": 0.0165, "C12": 0.1363, "C16": 0.0756,
                   "C21": 0.1084, "C24": 0.0, "C10": 0.0, "C26": 0.0}

# Ranks summed one by one; beyond, the smooth tail is integrated.
_EXACT_RANKS = 1 << 20
_TAIL_POINTS = 4097


def rank_probabilities(field: IdField, support: int,
                       ranks: np.ndarray) -> np.ndarray:
  """P(rank) of the field's power-law draws (with its head mass), as
  synthetic_world.power_law_ranks samples them; ranks may be fractional
  (the tail integral)."""
  x = np.asarray(ranks, dtype=np.float64)
  a = field.exponent
  if abs(a - 1.0) < 1e-9:
    cdf = lambda y: np.log(y) / math.log(support + 1.0)
  else:
    span = math.expm1((1.0 - a) * math.log(support + 1.0))
    cdf = lambda y: np.expm1((1.0 - a) * np.log(y)) / span
  p = (cdf(x + 2.0) - cdf(x + 1.0)) * (1.0 - field.head_mass)
  return np.where(x == 0, p + field.head_mass, p)


def expected_sum(field: IdField, support: int,
                 term: Callable[[np.ndarray, np.ndarray], np.ndarray]
                ) -> float:
  """Sum over the power law's ranks of term(probability, rank): exact for
  the first 2^20 ranks, the trapezoid integral of the smooth tail beyond."""
  ranks = np.arange(min(support, _EXACT_RANKS), dtype=np.float64)
  total = float(np.sum(term(rank_probabilities(field, support, ranks),
                            ranks)))
  if support > _EXACT_RANKS:
    x = np.geomspace(_EXACT_RANKS, support, _TAIL_POINTS)
    rank = x - 0.5
    total += float(np.trapz(term(rank_probabilities(field, support, rank),
                                 rank), x))
  return total


def expected_ids(field: IdField, rows: int, threshold: int,
                 train_rows: int) -> Tuple[float, float]:
  """Expected distinct ids of the field in `rows` rows, and ids seen at
  least `threshold` times in `train_rows` rows (the vocabulary).

  One-off ids are uniform over ONE_OFF_RANKS ranks: they add distinct
  values and (at any real size) nothing to the vocabulary.
  """
  support = min(field.cardinality, rows)
  present = (1.0 - field.missing) * (1.0 - field.one_off_share)
  draws, train_draws = rows * present, train_rows * present
  distinct = expected_sum(field, support, lambda p, _: -np.expm1(-draws * p))
  kept = expected_sum(field, support, lambda p, _: stats.poisson.sf(
      threshold - 1, train_draws * p))
  one_off = rows * (1.0 - field.missing) * field.one_off_share
  r = float(synthetic_world.ONE_OFF_RANKS)
  distinct += r * -math.expm1(-one_off / r)
  return distinct, kept


def fit_one_off_share(field: IdField, rows: int, distinct: int) -> float:
  """The one-off share giving `distinct` expected values in `rows` rows
  (0 when the power law alone reaches it)."""
  low, high = 0.0, 1.0
  if expected_ids(field, rows, 1, rows)[0] >= distinct:
    return 0.0
  for _ in range(40):
    share = (low + high) / 2
    trial = dataclasses.replace(field, one_off_share=share)
    if expected_ids(trial, rows, 1, rows)[0] < distinct:
      low = share
    else:
      high = share
  return (low + high) / 2


def _weight_norm(field: IdField, rows: int, beta: float) -> float:
  """sqrt(E[min(rank + 1, cardinality)^(2 beta)]) over the field's draws."""
  support = min(field.cardinality, rows)
  power = expected_sum(field, support, lambda p, k: p * (k + 1.0)**(2 * beta))
  one_off = field.one_off_share
  power = (1 - one_off) * power + one_off * float(
      field.cardinality)**(2 * beta)
  return math.sqrt(power)


def world_for(dataset: str, profile: str = "default",
              rare_signal: float = 0.0) -> World:
  """The dataset's hidden world with a frequency profile and rare signal.

  Raises:
    ValueError: an unknown profile, or `kaggle` for a dataset without one.
  """
  world = synthetic_world.WORLDS[dataset]
  if profile not in PROFILES:
    raise ValueError(f"unknown id profile {profile!r}; choose from "
                     f"{', '.join(PROFILES)}")
  if profile == "kaggle":
    if dataset != "criteo":
      raise ValueError("the kaggle id profile is fitted to Criteo's "
                       "published counts; use the default profile for "
                       f"{dataset}")
    ids = dict(world.ids)
    for name, share in _KAGGLE_ONE_OFF.items():
      ids[name] = dataclasses.replace(ids[name], exponent=_KAGGLE_EXPONENT,
                                      one_off_share=share)
    world = dataclasses.replace(world, ids=ids)
  if rare_signal:
    rows = FULL_ROWS[dataset]
    world = dataclasses.replace(world, rare_signal=rare_signal, weight_norms={
        name: _weight_norm(field, rows, rare_signal)
        for name, field in world.ids.items()})
  return world


def signal_shares(world: World, train_rows: int,
                  bounds: Tuple[int, int] = (10, 1000)
                 ) -> Mapping[str, float]:
  """Shares of the hidden logit's variance: per-id weights of ids with an
  expected training count below bounds[0] (out of the vocabulary), up to
  bounds[1] (rare), above (frequent); pairwise interactions; dense
  counts. In expectation over the hashed weights.
  """
  strengths = synthetic_world.field_strengths(world)
  buckets = {"ids_unseen": 0.0, "ids_rare": 0.0, "ids_frequent": 0.0}
  low, high = bounds
  for name, field in world.ids.items():
    support = min(field.cardinality, train_rows)
    present = (1.0 - field.missing) * (1.0 - field.one_off_share)
    beta = world.rare_signal
    norm = world.weight_norms.get(name, 1.0)

    def part(lo: float, hi: float):
      return lambda p, k: np.where(
          (train_rows * present * p >= lo) & (train_rows * present * p < hi),
          p * (np.minimum(k + 1.0, field.cardinality)**beta / norm)**2, 0.0)

    scale = strengths[name]**2 * (1.0 - field.missing)
    for bucket, (lo, hi) in (("ids_unseen", (0, low)),
                             ("ids_rare", (low, high)),
                             ("ids_frequent", (high, math.inf))):
      buckets[bucket] += scale * (1 - field.one_off_share) * expected_sum(
          field, support, part(lo, hi))
    buckets["ids_unseen"] += scale * field.one_off_share * (
        float(field.cardinality)**beta / norm)**2
  for name in set(strengths) - set(world.ids):  # Derived time ids.
    buckets["ids_frequent"] += strengths[name]**2
  parts = {**buckets, "pairs": world.pair_scale**2,
           "dense": world.dense_scale**2}
  total = sum(parts.values())
  return {k: v / total for k, v in parts.items()}
