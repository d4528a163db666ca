"""Synthetic Criteo- and Avazu-layout raw files with a learnable hidden model.

The files are byte-compatible with the raw Kaggle layouts described by
``trainer_module.features`` (Criteo ``train.txt``: tab-separated, no header;
Avazu ``train``: comma-separated with header), so every pipeline stage can be
run and scaled without the real data.

What makes them useful for CowClip is the id-frequency skew: every id field
draws ranks from a truncated power law (a few ids very frequent, most seen
once), with per-field cardinalities, missing rates and placeholder ids like
the real data. Labels come from a hidden logistic model with per-id weights
(rare ids included), factorisation-machine style pairwise interactions and,
for Criteo, dense-count effects.

Seeds: the hidden model (per-id weights, latent vectors, id strings) depends
only on ``WORLD_SEED``; the ``seed`` argument only drives which rows are
drawn. Two files written with different seeds are therefore two samples of
one world and share their ground truth (e.g. a train and a test file). The
bias is calibrated to the real click rate on a fixed world sample. The id
support of a field is capped at ``rows`` so small files still repeat ids;
files with different row counts thus differ only in how far the tail of each
id distribution reaches.

The same (dataset, rows, seed, chunk_rows) always gives a byte-identical
file. Rows are generated and written in chunks, so memory is bounded by
``chunk_rows`` whatever the file size.
"""

import dataclasses
import math
import os
import secrets
import zlib
from typing import Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

from trainer_module import features

# Fixes the hidden world (id strings, weights, interactions) of both datasets.
WORLD_SEED = 20230207
DEFAULT_CHUNK_ROWS = 100_000

# Size of the hidden latent vectors behind the pairwise interactions (at most
# 4: each is cut from one 64-bit hash).
_LATENT_DIM = 4
# Rows of the fixed world sample the label bias is calibrated on.
_CALIBRATION_ROWS = 32_768
# Multiplier of the bijection that scatters integer ids over their range;
# prime and larger than any range, so it is coprime with every range.
_SCATTER_PRIME = 1_000_003
# Integer ids of a field without explicit values span this many times its
# cardinality, so they look scattered rather than consecutive.
_INT_SPAN_FACTOR = 4
# Avazu's hour column covers 2014-10-21 00h .. 2014-10-30 23h.
_AVAZU_FIRST_DAY = 21
_AVAZU_DAYS = 10
_AVAZU_FIRST_WEEKDAY = 1  # 2014-10-21 was a Tuesday (Monday = 0).

_HEX_DIGITS = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
# The two hex digits of every byte value: one lookup formats a byte.
_HEX_PAIRS = np.stack([np.repeat(_HEX_DIGITS, 16), np.tile(_HEX_DIGITS, 16)],
                      axis=1)
_U64_MASK32 = np.uint64(0xFFFFFFFF)


@dataclasses.dataclass(frozen=True)
class GenerationSummary:
  """What ``write_synthetic`` wrote, for the CLI to print and tests to check."""
  path: str
  dataset: str
  rows: int
  seed: int
  clicks: int
  bytes_written: int

  @property
  def click_rate(self) -> float:
    return self.clicks / self.rows


@dataclasses.dataclass(frozen=True)
class _IdField:
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


@dataclasses.dataclass(frozen=True)
class _DenseField:
  """A heavy-tailed count: floor((median + 1) * exp(spread * z)) - 1."""
  median: float
  spread: float
  missing: float = 0.0
  missing_group: Optional[str] = None
  # Share of small negative values (-1 mostly, down to -3), as in Criteo I2.
  negative: float = 0.0


@dataclasses.dataclass(frozen=True)
class _World:
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
  """
  spec: features.DatasetSpec
  ids: Mapping[str, _IdField]
  dense: Mapping[str, _DenseField]
  interacting: Tuple[str, ...]
  click_rate: float
  id_scale: float
  pair_scale: float
  dense_scale: float

  @property
  def hidden_fields(self) -> Tuple[str, ...]:
    """Fields with a per-id weight: raw id fields plus the derived time ids."""
    time = ((features.HOUR_OF_DAY, features.WEEKDAY)
            if self.spec.time_field else ())
    return tuple(self.ids) + time


def _criteo_ids() -> Dict[str, _IdField]:
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
  return {name: _IdField(cardinality=card, **extra)
          for name, (card, extra) in cardinalities.items()}


def _criteo_dense() -> Dict[str, _DenseField]:
  """Medians, spreads and missing rates close to the Criteo train set."""
  return {
      "I1": _DenseField(1, 1.2, missing=0.454, missing_group="I1"),
      "I2": _DenseField(3, 2.0, negative=0.06),
      "I3": _DenseField(6, 1.5, missing=0.215, missing_group="I3"),
      "I4": _DenseField(4, 1.0, missing=0.221, missing_group="I3"),
      "I5": _DenseField(2900, 2.0, missing=0.026),
      "I6": _DenseField(33, 1.8, missing=0.224, missing_group="I3"),
      "I7": _DenseField(3, 1.5, missing=0.043, missing_group="I7"),
      "I8": _DenseField(8, 1.0, missing=0.0005),
      "I9": _DenseField(40, 1.4, missing=0.043, missing_group="I7"),
      "I10": _DenseField(0, 0.8, missing=0.454, missing_group="I1"),
      "I11": _DenseField(1, 1.2, missing=0.043, missing_group="I7"),
      "I12": _DenseField(0, 1.2, missing=0.765),
      "I13": _DenseField(4, 1.2, missing=0.221, missing_group="I3"),
  }


def _avazu_ids() -> Dict[str, _IdField]:
  """Cardinalities, placeholders and field hierarchy of the Avazu train set."""
  return {
      "C1": _IdField(7, head_mass=0.85, int_values=(
          1005, 1002, 1010, 1012, 1007, 1001, 1008)),
      "banner_pos": _IdField(7, head_mass=0.5,
                             int_values=(0, 1, 7, 2, 4, 5, 3)),
      "site_id": _IdField(4737, head_mass=0.3),
      "site_domain": _IdField(7745, parent="site_id", parent_share=0.95),
      "site_category": _IdField(26, parent="site_id", parent_share=0.95),
      "app_id": _IdField(8552, head_mass=0.6),
      "app_domain": _IdField(559, parent="app_id", parent_share=0.95),
      "app_category": _IdField(36, parent="app_id", parent_share=0.95),
      "device_id": _IdField(2_686_408, head_mass=0.8, exponent=1.0),
      "device_ip": _IdField(6_729_486, exponent=1.0),
      "device_model": _IdField(8251),
      "device_type": _IdField(5, head_mass=0.8, int_values=(1, 0, 4, 5, 2)),
      "device_conn_type": _IdField(4, head_mass=0.75,
                                   int_values=(0, 2, 3, 5)),
      "C14": _IdField(2626, int_low=375),
      "C15": _IdField(8, head_mass=0.6, parent="C14", parent_share=0.98,
                      int_values=(320, 300, 216, 728, 120, 1024, 480, 768)),
      "C16": _IdField(9, head_mass=0.6, parent="C15", parent_share=0.98,
                      int_values=(50, 250, 36, 480, 90, 20, 320, 1024, 768)),
      "C17": _IdField(435, parent="C14", parent_share=0.98, int_low=112),
      "C18": _IdField(4, head_mass=0.3, int_values=(0, 3, 2, 1)),
      "C19": _IdField(68, parent="C17", parent_share=0.95, int_low=33),
      "C20": _IdField(172, head_mass=0.4, int_values=(-1,), int_low=100_000),
      "C21": _IdField(60, parent="C17", parent_share=0.95, int_low=1),
  }


_WORLDS: Dict[str, _World] = {
    "criteo": _World(
        spec=features.CRITEO, ids=_criteo_ids(), dense=_criteo_dense(),
        interacting=("C2", "C5", "C6", "C9", "C14", "C17", "C20", "C22",
                     "C23", "C25"),
        click_rate=0.256, id_scale=1.1, pair_scale=1.0, dense_scale=0.6),
    "avazu": _World(
        spec=features.AVAZU, ids=_avazu_ids(), dense={},
        interacting=("C1", "banner_pos", "site_category", "app_category",
                     "device_type", "device_conn_type", "C15", "C16", "C18",
                     features.HOUR_OF_DAY),
        click_rate=0.17, id_scale=1.0, pair_scale=1.0, dense_scale=0.0),
}


def _check_world(world: _World) -> None:
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
      span = _INT_SPAN_FACTOR * field.cardinality
      scattered = len(field.int_values) < field.cardinality
      if scattered and span >= _SCATTER_PRIME:
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


def _mix64(x: np.ndarray) -> np.ndarray:
  """SplitMix64 finaliser: a bijective, well-mixing map of uint64 arrays."""
  x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
  x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
  return x ^ (x >> np.uint64(31))


def _mix32(x: np.ndarray) -> np.ndarray:
  """MurmurHash3 fmix32 on uint64-held 32-bit values: bijective on 32 bits."""
  x = x ^ (x >> np.uint64(16))
  x = (x * np.uint64(0x85EBCA6B)) & _U64_MASK32
  x = x ^ (x >> np.uint64(13))
  x = (x * np.uint64(0xC2B2AE35)) & _U64_MASK32
  return x ^ (x >> np.uint64(16))


def _salt(*parts: object) -> np.uint64:
  """A 64-bit constant named by its parts (stable across Python runs)."""
  text = "/".join(str(p) for p in parts).encode()
  seed = np.array([zlib.crc32(text) | (len(text) << 32)], dtype=np.uint64)
  return _mix64(seed)[0]


def _hash_uniform(salt: np.uint64, keys: np.ndarray) -> np.ndarray:
  """A uniform in (0, 1) per key: a fixed, tableless function of the key."""
  bits = _mix64(keys + salt) >> np.uint64(11)
  return (bits.astype(np.float64) + 0.5) * 2.0**-53


def _hash_normal(salt: np.uint64, keys: np.ndarray) -> np.ndarray:
  """A standard normal per key (Box-Muller on two 26-bit hash halves)."""
  bits = _mix64(keys + salt)
  u1 = ((bits >> np.uint64(38)).astype(np.float64) + 0.5) * 2.0**-26
  u2 = ((bits & np.uint64(2**26 - 1)).astype(np.float64) + 0.5) * 2.0**-26
  return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)


def _hash_latent(salt: np.uint64, keys: np.ndarray) -> np.ndarray:
  """A unit-variance latent vector per key, from 16-bit slices of one hash.

  Uniform rather than normal components: one hash per key instead of one
  Box-Muller per dimension, and pairwise dot products behave the same.
  """
  bits = _mix64(keys + salt)
  shifts = np.arange(0, 16 * _LATENT_DIM, 16, dtype=np.uint64)
  slices = ((bits[:, None] >> shifts) & np.uint64(0xFFFF)).astype(np.float64)
  return (slices + 0.5) * (2.0 * math.sqrt(3.0) / 65536.0) - math.sqrt(3.0)


# --------------------------------------------------------------- sampling --


@dataclasses.dataclass(frozen=True)
class _Rows:
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


def _support(field: _IdField, rows: int) -> int:
  """Distinct ids a field may take: never more than the file has rows."""
  return min(field.cardinality, rows)


def _power_law_ranks(u: np.ndarray, support: int,
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


def _ranks(field: _IdField, support: int, u_head: np.ndarray,
           u_tail: np.ndarray) -> np.ndarray:
  """Id ranks from two uniforms: placeholder head first, power law after."""
  ranks = _power_law_ranks(u_tail, support, field.exponent)
  if field.head_mass > 0:
    ranks[u_head < field.head_mass] = 0
  return ranks


def _hour_index(row_index: np.ndarray, rows: int) -> np.ndarray:
  """Hour of each row, in file order, with a day-night volume cycle."""
  hours = np.arange(_AVAZU_DAYS * 24)
  volume = 1.0 + 0.5 * np.cos(2.0 * np.pi * (hours % 24 - 14) / 24.0)
  ends = np.floor(np.cumsum(volume) / volume.sum() * rows)
  return np.searchsorted(ends, row_index, side="right")


def _sample_rows(world: _World, rng: np.random.Generator,
                 row_index: np.ndarray, rows: int) -> _Rows:
  """Draws the ids and counts of the rows at ``row_index`` of a file."""
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
    if field.parent is not None:
      parent = keys[field.parent]
      preferred = _ranks(field, support,
                         _hash_uniform(_salt(WORLD_SEED, name, "head"), parent),
                         _hash_uniform(_salt(WORLD_SEED, name, "tail"), parent))
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
    hour_index = _hour_index(row_index, rows)
    keys[features.HOUR_OF_DAY] = (hour_index % 24).astype(np.uint64) + 1
    weekday = (hour_index // 24 + _AVAZU_FIRST_WEEKDAY) % 7
    keys[features.WEEKDAY] = weekday.astype(np.uint64) + 1
  return _Rows(keys, dense, dense_missing, hour_index)


# ----------------------------------------------------------- hidden model --


def _logit_without_bias(world: _World, rows: _Rows) -> np.ndarray:
  """The hidden model's logit minus its bias.

  Per-id weights, latent vectors and dense coefficients are hashed from
  (WORLD_SEED, field, id), so no table is stored and every seed shares them.
  Each part is scaled to its configured standard deviation.
  """
  names = world.hidden_fields
  # Fields differ in how much their ids matter (0.25x to 1.75x).
  zero = np.zeros(1, np.uint64)
  strength = np.array([
      0.25 + 1.5 * _hash_uniform(_salt(WORLD_SEED, name, "strength"), zero)[0]
      for name in names])
  strength *= world.id_scale / math.sqrt(np.sum(strength**2))
  logit = np.zeros(rows.keys[names[0]].shape[0])
  for name, scale in zip(names, strength):
    logit += scale * _hash_normal(_salt(WORLD_SEED, name, "weight"),
                                  rows.keys[name])

  # Factorisation-machine identity: sum over pairs of <v_f, v_g>.
  latent_sum = np.zeros((logit.shape[0], _LATENT_DIM))
  latent_sq = np.zeros(logit.shape[0])
  for name in world.interacting:
    v = _hash_latent(_salt(WORLD_SEED, name, "latent"), rows.keys[name])
    latent_sum += v
    latent_sq += np.sum(v * v, axis=1)
  pairs = len(world.interacting) * (len(world.interacting) - 1) / 2
  pair_term = 0.5 * (np.sum(latent_sum**2, axis=1) - latent_sq)
  logit += world.pair_scale * pair_term / math.sqrt(pairs * _LATENT_DIM)

  if world.dense:
    # Effects of the written value (what a model can see): standardised
    # log count, its square, and being empty.
    unit = world.dense_scale / math.sqrt(3.0 * len(world.dense))
    for name, field in world.dense.items():
      coef = [_hash_normal(_salt(WORLD_SEED, name, part), zero)[0]
              for part in ("linear", "square", "missing")]
      z = (np.log1p(np.maximum(rows.dense[name], 0)) -
           math.log1p(field.median)) / field.spread
      missing = rows.dense_missing[name]
      effect = coef[0] * z + coef[1] * (z * z - 1.0) / math.sqrt(2.0)
      logit += unit * np.where(missing, coef[2], effect)
  return logit


def _sigmoid(x: np.ndarray) -> np.ndarray:
  return 1.0 / (1.0 + np.exp(-x))


def _calibrated_bias(world: _World, rows: int) -> float:
  """The bias giving the real click rate, on a fixed sample of the world."""
  rng = np.random.default_rng(WORLD_SEED)
  index = np.linspace(0, rows - 1, _CALIBRATION_ROWS).astype(np.int64)
  logit = _logit_without_bias(world, _sample_rows(world, rng, index, rows))
  low, high = -30.0, 30.0
  for _ in range(60):
    mid = 0.5 * (low + high)
    if np.mean(_sigmoid(logit + mid)) < world.click_rate:
      low = mid
    else:
      high = mid
  return 0.5 * (low + high)


# ------------------------------------------------------------- formatting --


def _decimal_block(magnitude: np.ndarray,
                   negative: Optional[np.ndarray] = None,
                   missing: Optional[np.ndarray] = None) -> np.ndarray:
  """Decimal text of uint64 values as a right-aligned uint8 matrix.

  Unused cells are 0 and are dropped when the line is assembled, so one
  vectorised pass formats a whole column.
  """
  n = magnitude.shape[0]
  digits = len(str(int(magnitude.max()))) if n else 1
  signed = negative is not None and bool(negative.any())
  width = digits + signed
  block = np.zeros((n, width), dtype=np.uint8)
  rest = magnitude.copy()
  length = np.ones(n, dtype=np.int64)
  for d in range(digits):
    rest, digit = np.divmod(rest, np.uint64(10))
    shown = magnitude >= np.uint64(10**d) if d else np.ones(n, dtype=bool)
    if d:
      length += shown
    block[:, width - 1 - d] = np.where(shown, digit + 48, 0)
  if signed:
    block[negative, width - 1 - length[negative]] = ord("-")
  if missing is not None:
    block[missing] = 0
  return block


def _signed_block(values: np.ndarray,
                  missing: Optional[np.ndarray] = None) -> np.ndarray:
  """Decimal text of int64 values (see _decimal_block)."""
  magnitude = np.abs(values).astype(np.uint64)
  return _decimal_block(magnitude, values < 0, missing)


def _hex_block(values: np.ndarray, missing: np.ndarray) -> np.ndarray:
  """8-lowercase-hex-digit text of 32-bit values; missing values empty."""
  big_endian_bytes = values.astype(">u4").view(np.uint8)
  block = _HEX_PAIRS[big_endian_bytes].reshape(values.shape[0], 8)
  block[missing] = 0
  return block


def _hex_ids(name: str, key: np.ndarray) -> np.ndarray:
  """The 32-bit hash id of each rank: bijective, so ranks stay distinct."""
  salt = _salt(WORLD_SEED, name, "hex") & _U64_MASK32
  return _mix32((key + salt) & _U64_MASK32)


def _int_ids(field: _IdField, key: np.ndarray) -> np.ndarray:
  """The integer value of each rank: listed values first, then scattered."""
  rank = key.astype(np.int64) - 1
  listed = np.array(field.int_values or (0,), dtype=np.int64)
  span = _INT_SPAN_FACTOR * field.cardinality
  scattered = field.int_low + (
      np.maximum(rank - len(field.int_values), 0) * _SCATTER_PRIME) % span
  head = rank < len(field.int_values)
  return np.where(head, listed[np.minimum(rank, len(listed) - 1)], scattered)


def _row_ids(seed: int, column: str, row_index: np.ndarray) -> np.ndarray:
  """Unique unsigned 64-bit row ids (a bijection of the row index)."""
  return _mix64(row_index.astype(np.uint64) + _salt(seed, column, "row_id"))


def _hour_values(hour_index: np.ndarray) -> np.ndarray:
  """YYMMDDHH integers of Avazu's October 2014 hours."""
  day = _AVAZU_FIRST_DAY + hour_index // 24
  return 14_100_000 + day * 100 + hour_index % 24


def _format_rows(world: _World, seed: int, sampled: _Rows,
                 labels: np.ndarray, row_index: np.ndarray) -> bytes:
  """The chunk's lines, one uint8 block per column, pad bytes removed."""
  spec = world.spec
  n = labels.shape[0]
  delimiter = np.full((n, 1), ord(spec.delimiter), dtype=np.uint8)
  newline = np.full((n, 1), ord("\n"), dtype=np.uint8)
  parts = []
  for column in spec.columns:
    if column == spec.label:
      block = (labels.astype(np.uint8) + 48)[:, None]
    elif column in world.dense:
      block = _signed_block(sampled.dense[column],
                            sampled.dense_missing[column])
    elif column in spec.str_categorical:
      key = sampled.keys[column]
      block = _hex_block(_hex_ids(column, key), key == 0)
    elif column in spec.int_categorical:
      block = _signed_block(_int_ids(world.ids[column],
                                     sampled.keys[column]))
    elif column == spec.time_field:
      block = _decimal_block(_hour_values(sampled.hour_index).astype(
          np.uint64))
    elif column in spec.dropped:
      block = _decimal_block(_row_ids(seed, column, row_index))
    else:
      raise ValueError(f"{spec.name} column {column!r}: the generator does "
                       "not know how to write it")
    parts.extend((block, delimiter))
  parts[-1] = newline
  lines = np.concatenate(parts, axis=1)
  return lines[lines != 0].tobytes()


# ------------------------------------------------------------- public API --


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


def write_synthetic(fmt: str, rows: int, seed: int, out: str, *,
                    chunk_rows: int = DEFAULT_CHUNK_ROWS,
                    top_ids: Optional[int] = None
                   ) -> GenerationSummary:
  """Writes ``rows`` synthetic rows of dataset ``fmt`` in its raw layout.

  The file appears under ``out`` only when complete: rows go to a temporary
  file in the same directory, renamed at the end.

  Args:
    fmt: 'criteo' or 'avazu'.
    rows: number of data rows (header excluded), > 0.
    seed: non-negative seed of the row draws (the hidden model is fixed).
    out: path of the file to write; parent directories are created.
    chunk_rows: rows generated and written at a time (bounds memory; part of
      what determines the bytes, like ``seed``).
    top_ids: if set, write only the top_ids most frequent ids of every id
      field and one shared id for the rest (keep_top_ids); same labels.

  Returns:
    A GenerationSummary of the written file.

  Raises:
    ValueError: unknown fmt, or rows/seed/chunk_rows/out out of range.
  """
  spec = features.get_spec(fmt)
  world = _WORLDS[spec.name]
  _check_world(world)
  for arg, value, low in (("rows", rows, 1), ("seed", seed, 0),
                          ("chunk_rows", chunk_rows, 1),
                          ("top_ids", 1 if top_ids is None else top_ids, 1)):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
      raise ValueError(f"{arg} must be an integer, got {value!r}")
    if value < low:
      raise ValueError(f"{arg} must be >= {low}, got {value}")
  if not os.path.basename(out) or os.path.isdir(out):
    raise ValueError(f"out must be a file path, got {out!r}")
  rows, seed, chunk_rows = int(rows), int(seed), int(chunk_rows)

  directory = os.path.dirname(os.path.abspath(out))
  os.makedirs(directory, exist_ok=True)
  bias = _calibrated_bias(world, rows)
  rng = np.random.default_rng(seed)
  clicks = 0
  written = 0
  temp_path = os.path.join(directory, f".{os.path.basename(out)}."
                           f"{secrets.token_hex(4)}.tmp")
  # os.open rather than mkstemp: the file gets the usual umask permissions.
  handle = os.open(temp_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
  try:
    with os.fdopen(handle, "wb") as f:
      if spec.has_header:
        written += f.write((spec.delimiter.join(spec.columns) + "\n").encode())
      for start in range(0, rows, chunk_rows):
        row_index = np.arange(start, min(start + chunk_rows, rows))
        sampled = _sample_rows(world, rng, row_index, rows)
        logit = bias + _logit_without_bias(world, sampled)
        labels = rng.random(row_index.shape[0]) < _sigmoid(logit)
        clicks += int(labels.sum())
        if top_ids is not None:
          sampled = dataclasses.replace(sampled, keys=keep_top_ids(
              sampled.keys, tuple(world.ids), top_ids))
        written += f.write(_format_rows(world, seed, sampled, labels,
                                        row_index))
    os.replace(temp_path, out)
  except BaseException:
    os.unlink(temp_path)
    raise
  return GenerationSummary(path=out, dataset=spec.name, rows=rows, seed=seed,
                           clicks=clicks, bytes_written=written)
