"""The hidden world behind the synthetic Criteo/Avazu files: field tables,
id sampling and the hidden click model.

Every id field draws ranks from a truncated power law (a few ids very
frequent, most seen once), with per-field cardinalities, missing rates and
placeholder ids like the real data. Labels come from a hidden logistic model
with per-id weights (rare ids included), factorisation-machine style pairwise
interactions and, for Criteo, dense-count effects. Everything is hashed from
``WORLD_SEED``, so no table is stored and every file of a dataset shares its
world. ``commands.synthetic.generate`` turns sampled rows into text.
"""

import dataclasses
import math
import zlib
from typing import Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

from trainer_module import features

# Fixes the hidden world (id strings, weights, interactions) of both datasets.
WORLD_SEED = 20230207
# Size of the hidden latent vectors behind the pairwise interactions (at most
# 4: each is cut from one 64-bit hash).
_LATENT_DIM = 4
# Rows of the fixed world sample the label bias is calibrated on.
_CALIBRATION_ROWS = 32_768
# Multiplier of the bijection that scatters integer ids over their range;
# prime and larger than any range, so it is coprime with every range.
SCATTER_PRIME = 1_000_003
# Integer ids of a field without explicit values span this many times its
# cardinality, so they look scattered rather than consecutive.
INT_SPAN_FACTOR = 4
# Avazu's hour column covers 2014-10-21 00h .. 2014-10-30 23h.
AVAZU_FIRST_DAY = 21
_AVAZU_DAYS = 10
_AVAZU_FIRST_WEEKDAY = 1  # 2014-10-21 was a Tuesday (Monday = 0).

U64_MASK32 = np.uint64(0xFFFFFFFF)
# An id's key is rank + 1 plus its generation << GENERATION_SHIFT: the
# generation counts how often daily data (Drift) replaced the id at that
# rank by a new one. Ranks, one-off ids included, stay below 2^40.
GENERATION_SHIFT = np.uint64(40)
RANK_MASK = np.uint64(2**40 - 1)
# Fields with at least this many distinct ids, written as hex strings, are
# the large fields whose ids daily data renews.
LARGE_FIELD_IDS = 1000
# Ranks one-off ids are drawn from (IdField.one_off_share); a 32-bit hex id
# still names each rank once.
ONE_OFF_RANKS = 2**31


@dataclasses.dataclass(frozen=True)
class IdField:
  """How one categorical field draws its ids.

  Attributes:
    cardinality: distinct ids in the real dataset.
    exponent: power-law exponent of the rank frequencies.
    missing: share of empty values (Criteo only).
    missing_group: fields of one group go missing together (nested by rate).
    head_mass: extra probability of the top id (placeholders such as Avazu's
      anonymous device_id).
    parent: field whose id mostly determines this one (site_id ->
      site_domain); each parent id has a fixed preferred child id.
    parent_share: probability that the child takes the parent's preferred id.
    int_values: written values of the top ranks of an integer field.
    int_low: start of the range the remaining ranks are scattered over.
    one_off_share: share of draws that take a one-off id, uniform over
      ONE_OFF_RANKS ranks past the power law's support (almost never seen
      twice), as the user-like ids that make up most of the real data's
      distinct values (synthetic_profile's `kaggle` profile).
  """
  cardinality: int
  exponent: float = 1.1
  missing: float = 0.0
  missing_group: Optional[str] = None
  head_mass: float = 0.0
  parent: Optional[str] = None
  parent_share: float = 0.0
  int_values: Tuple[int, ...] = ()
  int_low: int = 0
  one_off_share: float = 0.0


@dataclasses.dataclass(frozen=True)
class DenseField:
  """A heavy-tailed count: floor((median + 1) * exp(spread * z)) - 1."""
  median: float
  spread: float
  missing: float = 0.0
  missing_group: Optional[str] = None
  # Share of small negative values (-1 mostly, down to -3), as in Criteo I2.
  negative: float = 0.0


@dataclasses.dataclass(frozen=True)
class World:
  """A dataset's field distributions and the strengths of its hidden model.

  Attributes:
    spec: the raw layout.
    ids: id distribution of every raw categorical feature.
    dense: distribution of every dense feature.
    interacting: fields whose latent vectors interact pairwise in the logit.
    click_rate: the real dataset's click rate the bias is calibrated to.
    id_scale: standard deviation of the summed per-id weights.
    pair_scale: standard deviation of the summed pairwise interactions.
    dense_scale: standard deviation of the summed dense effects.
    rare_signal: exponent beta of the per-id weight's scale, (rank + 1)^beta:
      0 gives every id the same weight scale; beta > 0 puts more of the
      click signal on rarer ids (synthetic_profile.world_for).
    weight_norms: per field, what divides (rank + 1)^beta so that the
      field's weights keep unit mean square over its full-size draws.
  """
  spec: features.DatasetSpec
  ids: Mapping[str, IdField]
  dense: Mapping[str, DenseField]
  interacting: Tuple[str, ...]
  click_rate: float
  id_scale: float
  pair_scale: float
  dense_scale: float
  rare_signal: float = 0.0
  weight_norms: Mapping[str, float] = dataclasses.field(default_factory=dict)

  @property
  def hidden_fields(self) -> Tuple[str, ...]:
    """Fields with a per-id weight: raw id fields plus the derived time ids."""
    time = ((features.HOUR_OF_DAY, features.WEEKDAY)
            if self.spec.time_field else ())
    return tuple(self.ids) + time


def _criteo_ids() -> Dict[str, IdField]:
  """Cardinalities and missing rates of the Kaggle Criteo train set."""
  # Fields missing together in the real data: the six huge id fields, and
  # the four fields that are absent on ~44% of rows.
  huge = dict(missing=0.034, missing_group="huge", exponent=1.05)
  often = dict(missing=0.44, missing_group="often")
  cardinalities = {
      "C1": (1460, {}), "C2": (583, {}), "C3": (10_131_227, huge),
      "C4": (2_202_608, huge), "C5": (305, {}),
      "C6": (24, dict(missing=0.121)), "C7": (12_517, {}), "C8": (633, {}),
      "C9": (3, dict(head_mass=0.85)), "C10": (93_145, {}),
      "C11": (5683, {}), "C12": (8_351_593, huge), "C13": (3194, {}),
      "C14": (27, {}), "C15": (14_992, {}), "C16": (5_461_306, huge),
      "C17": (10, {}), "C18": (5652, {}), "C19": (2173, often),
      "C20": (4, often), "C21": (7_046_547, huge),
      "C22": (18, dict(missing=0.763)), "C23": (15, {}),
      "C24": (286_181, huge), "C25": (105, often), "C26": (142_572, often),
  }
  return {name: IdField(cardinality=card, **extra)
          for name, (card, extra) in cardinalities.items()}


def _criteo_dense() -> Dict[str, DenseField]:
  """Medians, spreads and missing rates close to the Criteo train set."""
  return {
      "I1": DenseField(1, 1.2, missing=0.454, missing_group="I1"),
      "I2": DenseField(3, 2.0, negative=0.06),
      "I3": DenseField(6, 1.5, missing=0.215, missing_group="I3"),
      "I4": DenseField(4, 1.0, missing=0.221, missing_group="I3"),
      "I5": DenseField(2900, 2.0, missing=0.026),
      "I6": DenseField(33, 1.8, missing=0.224, missing_group="I3"),
      "I7": DenseField(3, 1.5, missing=0.043, missing_group="I7"),
      "I8": DenseField(8, 1.0, missing=0.0005),
      "I9": DenseField(40, 1.4, missing=0.043, missing_group="I7"),
      "I10": DenseField(0, 0.8, missing=0.454, missing_group="I1"),
      "I11": DenseField(1, 1.2, missing=0.043, missing_group="I7"),
      "I12": DenseField(0, 1.2, missing=0.765),
      "I13": DenseField(4, 1.2, missing=0.221, missing_group="I3"),
  }


def _avazu_ids() -> Dict[str, IdField]:
  """Cardinalities, placeholders and field hierarchy of the Avazu train set."""
  return {
      "C1": IdField(7, head_mass=0.85, int_values=(
          1005, 1002, 1010, 1012, 1007, 1001, 1008)),
      "banner_pos": IdField(7, head_mass=0.5,
                             int_values=(0, 1, 7, 2, 4, 5, 3)),
      "site_id": IdField(4737, head_mass=0.3),
      "site_domain": IdField(7745, parent="site_id", parent_share=0.95),
      "site_category": IdField(26, parent="site_id", parent_share=0.95),
      "app_id": IdField(8552, head_mass=0.6),
      "app_domain": IdField(559, parent="app_id", parent_share=0.95),
      "app_category": IdField(36, parent="app_id", parent_share=0.95),
      "device_id": IdField(2_686_408, head_mass=0.8, exponent=1.0),
      "device_ip": IdField(6_729_486, exponent=1.0),
      "device_model": IdField(8251),
      "device_type": IdField(5, head_mass=0.8, int_values=(1, 0, 4, 5, 2)),
      "device_conn_type": IdField(4, head_mass=0.75,
                                   int_values=(0, 2, 3, 5)),
      "C14": IdField(2626, int_low=375),
      "C15": IdField(8, head_mass=0.6, parent="C14", parent_share=0.98,
                      int_values=(320, 300, 216, 728, 120, 1024, 480, 768)),
      "C16": IdField(9, head_mass=0.6, parent="C15", parent_share=0.98,
                      int_values=(50, 250, 36, 480, 90, 20, 320, 1024, 768)),
      "C17": IdField(435, parent="C14", parent_share=0.98, int_low=112),
      "C18": IdField(4, head_mass=0.3, int_values=(0, 3, 2, 1)),
      "C19": IdField(68, parent="C17", parent_share=0.95, int_low=33),
      "C20": IdField(172, head_mass=0.4, int_values=(-1,), int_low=100_000),
      "C21": IdField(60, parent="C17", parent_share=0.95, int_low=1),
  }


WORLDS: Dict[str, World] = {
    "criteo": World(
        spec=features.CRITEO, ids=_criteo_ids(), dense=_criteo_dense(),
        interacting=("C2", "C5", "C6", "C9", "C14", "C17", "C20", "C22",
                     "C23", "C25"),
        click_rate=0.256, id_scale=1.1, pair_scale=1.0, dense_scale=0.6),
    "avazu": World(
        spec=features.AVAZU, ids=_avazu_ids(), dense={},
        interacting=("C1", "banner_pos", "site_category", "app_category",
                     "device_type", "device_conn_type", "C15", "C16", "C18",
                     features.HOUR_OF_DAY),
        click_rate=0.17, id_scale=1.0, pair_scale=1.0, dense_scale=0.0),
}


def check_world(world: World) -> None:
  """Fails loudly if features.py and the generator's tables drift apart."""
  spec = world.spec
  raw_ids = spec.int_categorical + spec.str_categorical
  if set(world.ids) != set(raw_ids) or set(world.dense) != set(spec.dense):
    raise ValueError(
        f"generator tables for {spec.name} do not match trainer_module."
        f"features: id fields {sorted(set(world.ids) ^ set(raw_ids))}, "
        f"dense fields {sorted(set(world.dense) ^ set(spec.dense))} differ")
  order = {name: i for i, name in enumerate(world.ids)}
  for name, field in world.ids.items():
    if field.parent is not None and order.get(field.parent, len(order)) >= (
        order[name]):
      raise ValueError(f"{spec.name} field {name}: parent {field.parent!r} "
                       "must be an earlier id field")
    if name in spec.int_categorical:
      span = INT_SPAN_FACTOR * field.cardinality
      scattered = len(field.int_values) < field.cardinality
      if scattered and span >= SCATTER_PRIME:
        raise ValueError(f"{spec.name} field {name}: cardinality too large "
                         "to scatter its integer ids")
      if scattered and any(field.int_low <= v < field.int_low + span
                           for v in field.int_values):
        raise ValueError(f"{spec.name} field {name}: listed values overlap "
                         "the scattered range, ids would collide")
    elif field.int_values:
      raise ValueError(f"{spec.name} field {name}: int_values on a string "
                       "field")
  unknown = set(world.interacting) - set(world.hidden_fields)
  if unknown:
    raise ValueError(f"{spec.name}: interacting fields {sorted(unknown)} "
                     "are not id fields")


# ---------------------------------------------------------------- hashing --


def mix64(x: np.ndarray) -> np.ndarray:
  """SplitMix64 finaliser: a bijective, well-mixing map of uint64 arrays."""
  x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
  x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
  return x ^ (x >> np.uint64(31))


def mix32(x: np.ndarray) -> np.ndarray:
  """MurmurHash3 fmix32 on uint64-held 32-bit values: bijective on 32 bits."""
  x = x ^ (x >> np.uint64(16))
  x = (x * np.uint64(0x85EBCA6B)) & U64_MASK32
  x = x ^ (x >> np.uint64(13))
  x = (x * np.uint64(0xC2B2AE35)) & U64_MASK32
  return x ^ (x >> np.uint64(16))


def salt(*parts: object) -> np.uint64:
  """A 64-bit constant named by its parts (stable across Python runs)."""
  text = "/".join(str(p) for p in parts).encode()
  seed = np.array([zlib.crc32(text) | (len(text) << 32)], dtype=np.uint64)
  return mix64(seed)[0]


def _hash_uniform(salt: np.uint64, keys: np.ndarray) -> np.ndarray:
  """A uniform in (0, 1) per key: a fixed, tableless function of the key."""
  bits = mix64(keys + salt) >> np.uint64(11)
  return (bits.astype(np.float64) + 0.5) * 2.0**-53


def _hash_normal(salt: np.uint64, keys: np.ndarray) -> np.ndarray:
  """A standard normal per key (Box-Muller on two 26-bit hash halves)."""
  bits = mix64(keys + salt)
  u1 = ((bits >> np.uint64(38)).astype(np.float64) + 0.5) * 2.0**-26
  u2 = ((bits & np.uint64(2**26 - 1)).astype(np.float64) + 0.5) * 2.0**-26
  return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)


def _hash_latent(salt: np.uint64, keys: np.ndarray) -> np.ndarray:
  """A unit-variance latent vector per key, from 16-bit slices of one hash.

  Uniform rather than normal components: one hash per key instead of one
  Box-Muller per dimension, and pairwise dot products behave the same.
  """
  bits = mix64(keys + salt)
  shifts = np.arange(0, 16 * _LATENT_DIM, 16, dtype=np.uint64)
  slices = ((bits[:, None] >> shifts) & np.uint64(0xFFFF)).astype(np.float64)
  return (slices + 0.5) * (2.0 * math.sqrt(3.0) / 65536.0) - math.sqrt(3.0)


# --------------------------------------------------------------- sampling --


@dataclasses.dataclass(frozen=True)
class Rows:
  """One chunk of sampled rows, before labels and text.

  Attributes:
    keys: per hidden field, uint64 id rank + 1 (0 = missing).
    dense: per dense field, int64 values.
    dense_missing: per dense field, bool mask of empty values.
    hour_index: hours since the first hour (datasets with a time field).
  """
  keys: Dict[str, np.ndarray]
  dense: Dict[str, np.ndarray]
  dense_missing: Dict[str, np.ndarray]
  hour_index: Optional[np.ndarray]


def _support(field: IdField, rows: int) -> int:
  """Distinct ids a field may take: never more than the file has rows."""
  return min(field.cardinality, rows)


def power_law_ranks(u: np.ndarray, support: int,
                    exponent: float) -> np.ndarray:
  """Ranks in [0, support) with P(rank k) ~ (k + 1)^-exponent.

  Closed-form inverse CDF of the continuous power law on [1, support + 1),
  floored: no probability table, however large the support.
  """
  log_end = math.log(support + 1.0)
  if abs(exponent - 1.0) < 1e-9:
    x = np.exp(u * log_end)
  else:
    a = 1.0 - exponent
    x = np.exp(np.log1p(u * math.expm1(a * log_end)) / a)
  return np.minimum(x.astype(np.int64) - 1, support - 1)


def _ranks(field: IdField, support: int, u_head: np.ndarray,
           u_tail: np.ndarray) -> np.ndarray:
  """Id ranks from two uniforms: placeholder head first, power law after."""
  ranks = power_law_ranks(u_tail, support, field.exponent)
  if field.head_mass > 0:
    ranks[u_head < field.head_mass] = 0
  return ranks


def _hour_index(row_index: np.ndarray, rows: int,
                day: Optional[int] = None) -> np.ndarray:
  """Hour of each row, in file order, with a day-night volume cycle: over
  the dataset's days, or over the 24 hours of `day` (1: the first)."""
  hours = np.arange(24 if day else _AVAZU_DAYS * 24)
  volume = 1.0 + 0.5 * np.cos(2.0 * np.pi * (hours % 24 - 14) / 24.0)
  ends = np.floor(np.cumsum(volume) / volume.sum() * rows)
  return np.searchsorted(ends, row_index, side="right") + 24 * (
      day - 1 if day else 0)


def sample_rows(world: World, rng: np.random.Generator,
                row_index: np.ndarray, rows: int,
                day: Optional[int] = None) -> Rows:
  """Draws the ids and counts of the rows at ``row_index`` of a file (of
  one `day` of daily data: its hours are that day's)."""
  n = row_index.shape[0]
  group_uniforms: Dict[str, np.ndarray] = {}

  def missing_mask(name: str, rate: float,
                   group: Optional[str]) -> np.ndarray:
    if rate <= 0:
      return np.zeros(n, dtype=bool)
    key = group or name
    if key not in group_uniforms:
      group_uniforms[key] = rng.random(n)
    return group_uniforms[key] < rate

  keys: Dict[str, np.ndarray] = {}
  for name, field in world.ids.items():
    support = _support(field, rows)
    u_head = rng.random(n) if field.head_mass > 0 else None
    ranks = _ranks(field, support, u_head, rng.random(n))
    if field.one_off_share > 0:
      u = rng.random(n)
      one_off = u < field.one_off_share
      # Given one_off, u / one_off_share is uniform in [0, 1).
      ranks[one_off] = support + (u[one_off] / field.one_off_share *
                                  ONE_OFF_RANKS).astype(np.int64)
    if field.parent is not None:
      parent = keys[field.parent]
      preferred = _ranks(field, support,
                         _hash_uniform(salt(WORLD_SEED, name, "head"), parent),
                         _hash_uniform(salt(WORLD_SEED, name, "tail"), parent))
      ranks = np.where(rng.random(n) < field.parent_share, preferred, ranks)
    key = ranks.astype(np.uint64) + np.uint64(1)
    key[missing_mask(name, field.missing, field.missing_group)] = 0
    keys[name] = key

  dense: Dict[str, np.ndarray] = {}
  dense_missing: Dict[str, np.ndarray] = {}
  for name, field in world.dense.items():
    z = rng.standard_normal(n)
    scaled = np.minimum((field.median + 1.0) * np.exp(field.spread * z), 1e12)
    values = np.maximum(np.floor(scaled).astype(np.int64) - 1, 0)
    if field.negative > 0:
      u = rng.random(n)
      depth = u / field.negative  # in [0, 1) where the value is negative
      negative = u < field.negative
      values[negative] = -1 - (depth[negative] < 0.2) - (depth[negative] < 0.05)
    dense[name] = values
    dense_missing[name] = missing_mask(name, field.missing,
                                       field.missing_group)

  hour_index = None
  if world.spec.time_field:
    hour_index = _hour_index(row_index, rows, day)
    keys[features.HOUR_OF_DAY] = (hour_index % 24).astype(np.uint64) + 1
    weekday = (hour_index // 24 + _AVAZU_FIRST_WEEKDAY) % 7
    keys[features.WEEKDAY] = weekday.astype(np.uint64) + 1
  return Rows(keys, dense, dense_missing, hour_index)


# ------------------------------------------------------------ daily data --


@dataclasses.dataclass(frozen=True)
class Drift:
  """How the world of `day` (1: the first) has moved since day 1.

  Attributes:
    day: the day, >= 1.
    churn: the share of a large field's ids that new ids replace each day
      after the first (a new id takes the rank, so the frequency profile
      stays; its weight and latent vector are its own).
    ctr_drift: the standard deviation of the click log-odds' daily change
      (a seeded random walk: click rates move slowly).
  """
  day: int
  churn: float
  ctr_drift: float


def renewed_fields(world: World) -> Tuple[str, ...]:
  """The large fields (LARGE_FIELD_IDS ids or more, hex strings): those
  whose ids daily data renews."""
  return tuple(name for name, field in world.ids.items()
               if name in world.spec.str_categorical and
               field.cardinality >= LARGE_FIELD_IDS)


def renew_ids(world: World, keys: Mapping[str, np.ndarray],
              drift: Drift) -> Dict[str, np.ndarray]:
  """The keys of `drift.day`: in each renewed field, the id at a rank was
  replaced on each day t = 2..day with probability churn (a hash of field,
  rank and t, so every row agrees), and the key carries its generation,
  the last day it was replaced minus 1. Missing values and a field's
  placeholder (head) id stay."""
  renewed = dict(keys)
  for name in renewed_fields(world):
    key = keys[name]
    fixed = key == 0
    if world.ids[name].head_mass > 0:
      fixed |= key == 1
    generation = np.zeros_like(key)
    for t in range(2, drift.day + 1):
      replaced = _hash_uniform(salt(WORLD_SEED, name, "renew", t),
                               key) < drift.churn
      generation[replaced & ~fixed] = t - 1
    renewed[name] = key + (generation << GENERATION_SHIFT)
  return renewed


def click_shift(drift: Drift) -> float:
  """The change of the click log-odds from day 1 to drift.day: the sum of
  daily steps N(0, ctr_drift^2), the same for every seed of the rows."""
  steps = [np.random.default_rng([WORLD_SEED, t]).standard_normal()
           for t in range(2, drift.day + 1)]
  return drift.ctr_drift * float(np.sum(steps))


# ----------------------------------------------------------- hidden model --


def field_strengths(world: World) -> Dict[str, float]:
  """Each hidden field's weight scale: fields differ in how much their ids
  matter (0.25x to 1.75x), and together their weights have standard
  deviation id_scale."""
  names = world.hidden_fields
  zero = np.zeros(1, np.uint64)
  strength = np.array([
      0.25 + 1.5 * _hash_uniform(salt(WORLD_SEED, name, "strength"), zero)[0]
      for name in names])
  strength *= world.id_scale / math.sqrt(np.sum(strength**2))
  return dict(zip(names, strength))


def logit_without_bias(world: World, rows: Rows) -> np.ndarray:
  """The hidden model's logit minus its bias.

  Per-id weights, latent vectors and dense coefficients are hashed from
  (WORLD_SEED, field, id), so no table is stored and every seed shares them.
  Each part is scaled to its configured standard deviation.
  """
  strengths = field_strengths(world)
  logit = np.zeros(rows.keys[world.hidden_fields[0]].shape[0])
  for name, scale in strengths.items():
    keys = rows.keys[name]
    weight = _hash_normal(salt(WORLD_SEED, name, "weight"), keys)
    if world.rare_signal and name in world.ids:
      weight *= rare_weight_scale(world, name, keys)
    logit += scale * weight

  # Factorisation-machine identity: sum over pairs of <v_f, v_g>.
  latent_sum = np.zeros((logit.shape[0], _LATENT_DIM))
  latent_sq = np.zeros(logit.shape[0])
  for name in world.interacting:
    v = _hash_latent(salt(WORLD_SEED, name, "latent"), rows.keys[name])
    latent_sum += v
    latent_sq += np.sum(v * v, axis=1)
  pairs = len(world.interacting) * (len(world.interacting) - 1) / 2
  pair_term = 0.5 * (np.sum(latent_sum**2, axis=1) - latent_sq)
  logit += world.pair_scale * pair_term / math.sqrt(pairs * _LATENT_DIM)

  if world.dense:
    # Effects of the written value (what a model can see): standardised
    # log count, its square, and being empty.
    unit = world.dense_scale / math.sqrt(3.0 * len(world.dense))
    zero = np.zeros(1, np.uint64)
    for name, field in world.dense.items():
      coef = [_hash_normal(salt(WORLD_SEED, name, part), zero)[0]
              for part in ("linear", "square", "missing")]
      z = (np.log1p(np.maximum(rows.dense[name], 0)) -
           math.log1p(field.median)) / field.spread
      missing = rows.dense_missing[name]
      effect = coef[0] * z + coef[1] * (z * z - 1.0) / math.sqrt(2.0)
      logit += unit * np.where(missing, coef[2], effect)
  return logit


def rare_weight_scale(world: World, name: str,
                      keys: np.ndarray) -> np.ndarray:
  """(rank + 1)^rare_signal over the field's norm, 1 for a missing value.

  keys are rank + 1 (0: missing). One-off ids take the scale of the power
  law's last rank, so the scale of an id never depends on the file's size.
  """
  last = float(world.ids[name].cardinality)
  ranks = (keys & RANK_MASK).astype(np.float64)  # A renewed id's rank.
  scale = (np.minimum(ranks, last)**world.rare_signal /
           world.weight_norms[name])
  return np.where(keys == 0, 1.0, scale)


def sigmoid(x: np.ndarray) -> np.ndarray:
  return 1.0 / (1.0 + np.exp(-x))


def calibrated_bias(world: World, rows: int) -> float:
  """The bias giving the real click rate, on a fixed sample of the world."""
  rng = np.random.default_rng(WORLD_SEED)
  index = np.linspace(0, rows - 1, _CALIBRATION_ROWS).astype(np.int64)
  logit = logit_without_bias(world, sample_rows(world, rng, index, rows))
  low, high = -30.0, 30.0
  for _ in range(60):
    mid = 0.5 * (low + high)
    if np.mean(sigmoid(logit + mid)) < world.click_rate:
      low = mid
    else:
      high = mid
  return 0.5 * (low + high)


def keep_top_ids(keys: Mapping[str, np.ndarray], fields: Sequence[str],
                 top_ids: int) -> Dict[str, np.ndarray]:
  """The CowClip paper's Table 1 data: each field keeps its ``top_ids`` most
  frequent ids and every other id becomes one shared id (missing stays).

  Applied after the labels are drawn from the full ids, as the paper
  applied it to the real logs: what the rare ids said about clicks is lost.
  """
  shared = np.uint64(top_ids + 1)
  return {name: (np.minimum(key, shared) if name in fields else key)
          for name, key in keys.items()}
