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

import argparse
import dataclasses
import os
import secrets
from typing import List, Optional

import numpy as np

from commands.cli.generate_flags import DEFAULT_CHURN
from commands.cli.generate_flags import DEFAULT_CTR_DRIFT
from commands.synthetic import profile as synthetic_profile
from commands.synthetic import world as synthetic_world
from commands.synthetic.world import IdField, Rows, World
from trainer_module import features

DEFAULT_CHUNK_ROWS = 100_000

_HEX_DIGITS = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
# The two hex digits of every byte value: one lookup formats a byte.
_HEX_PAIRS = np.stack([np.repeat(_HEX_DIGITS, 16), np.tile(_HEX_DIGITS, 16)],
                      axis=1)


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

  def __str__(self) -> str:
    """The CLI's line."""
    return (f"wrote {self.rows:,} {self.dataset} rows (seed {self.seed}, "
            f"{self.clicks:,} clicks: {self.click_rate:.1%}) to {self.path}, "
            f"{self.bytes_written / 2**20:,.1f} MiB")


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


# An odd 32-bit stride: a renewed id's generation moves its hex id.
_GENERATION_STRIDE = np.uint64(0x9E3779B1)


def _hex_ids(name: str, key: np.ndarray) -> np.ndarray:
  """The 32-bit hash id of each key: bijective on the ranks, so ranks stay
  distinct (a renewed id's generation is folded in; generation 0, all
  data but later days', leaves the rank's id as it always was)."""
  hex_salt = synthetic_world.salt(synthetic_world.WORLD_SEED, name, "hex") & (
      synthetic_world.U64_MASK32)
  folded = key + hex_salt + (key >> synthetic_world.GENERATION_SHIFT) * (
      _GENERATION_STRIDE)
  return synthetic_world.mix32(folded & synthetic_world.U64_MASK32)


def _int_ids(field: IdField, key: np.ndarray) -> np.ndarray:
  """The integer value of each rank: listed values first, then scattered."""
  rank = key.astype(np.int64) - 1
  listed = np.array(field.int_values or (0,), dtype=np.int64)
  span = synthetic_world.INT_SPAN_FACTOR * field.cardinality
  scattered = field.int_low + (np.maximum(rank - len(field.int_values), 0) *
                               synthetic_world.SCATTER_PRIME) % span
  head = rank < len(field.int_values)
  return np.where(head, listed[np.minimum(rank, len(listed) - 1)], scattered)


def _row_ids(seed: int, column: str, row_index: np.ndarray) -> np.ndarray:
  """Unique unsigned 64-bit row ids (a bijection of the row index)."""
  return synthetic_world.mix64(row_index.astype(np.uint64) +
                               synthetic_world.salt(seed, column, "row_id"))


def _hour_values(hour_index: np.ndarray) -> np.ndarray:
  """YYMMDDHH integers of Avazu's October 2014 hours."""
  day = synthetic_world.AVAZU_FIRST_DAY + hour_index // 24
  return 14_100_000 + day * 100 + hour_index % 24


def _format_rows(world: World, seed: int, sampled: Rows,
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


def write_synthetic(fmt: str, rows: int, seed: int, out: str, *,
                    chunk_rows: int = DEFAULT_CHUNK_ROWS,
                    top_ids: Optional[int] = None,
                    id_profile: str = "default", rare_signal: float = 0.0,
                    drift: Optional[synthetic_world.Drift] = None
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
    id_profile, rare_signal: the id-frequency profile and the rare ids'
      share of the click signal (synthetic_profile.world_for).
    drift: write the rows of this day of daily data (write_days): the
      world as it has moved by then, rows drawn with (seed, day).

  Returns:
    A GenerationSummary of the written file.

  Raises:
    ValueError: unknown fmt or profile, or rows/seed/chunk_rows/top_ids/out
      out of range.
  """
  spec = features.get_spec(fmt)
  world = synthetic_profile.world_for(spec.name, id_profile, rare_signal)
  synthetic_world.check_world(world)
  for arg, value, low in (("rows", rows, 1), ("seed", seed, 0),
                          ("chunk_rows", chunk_rows, 1),
                          ("top_ids", 1 if top_ids is None else top_ids, 1)):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
      raise ValueError(f"{arg} must be an integer, got {value!r}")
    if value < low:
      raise ValueError(f"{arg} must be >= {low}, got {value}")
  if not os.path.basename(out) or os.path.isdir(out):
    raise ValueError(f"out must be a file path, got {out!r}")
  if drift is not None and top_ids is not None:
    raise ValueError("top_ids keeps day 1's ids: it does not apply to "
                     "daily data")
  rows, seed, chunk_rows = int(rows), int(seed), int(chunk_rows)

  directory = os.path.dirname(os.path.abspath(out))
  os.makedirs(directory, exist_ok=True)
  bias = synthetic_world.calibrated_bias(world, rows)
  rng = np.random.default_rng(seed)
  row_seed = seed
  day = None
  if drift is not None:
    bias += synthetic_world.click_shift(drift)
    rng = np.random.default_rng([seed, drift.day])
    row_seed = int(synthetic_world.salt(seed, "day", drift.day))
    day = drift.day
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
        sampled = synthetic_world.sample_rows(world, rng, row_index, rows,
                                              day)
        if drift is not None:
          sampled = dataclasses.replace(sampled, keys=(
              synthetic_world.renew_ids(world, sampled.keys, drift)))
        logit = bias + synthetic_world.logit_without_bias(world, sampled)
        labels = rng.random(row_index.shape[0]) < synthetic_world.sigmoid(
            logit)
        clicks += int(labels.sum())
        if top_ids is not None:
          sampled = dataclasses.replace(sampled, keys=(
              synthetic_world.keep_top_ids(sampled.keys, tuple(world.ids),
                                           top_ids)))
        written += f.write(_format_rows(world, row_seed, sampled, labels,
                                        row_index))
    os.replace(temp_path, out)
  except BaseException:
    os.unlink(temp_path)
    raise
  return GenerationSummary(path=out, dataset=spec.name, rows=rows, seed=seed,
                           clicks=clicks, bytes_written=written)


# The folder of each day of daily data: TFX's span pattern {SPAN} reads the
# day as the span number (run --data 'DIR/day-{SPAN}/').
DAY_FOLDER = "day-{day}"
# Each day's file, named as the dataset's raw download names it.
DAY_FILE = {"criteo": "train.txt", "avazu": "train"}
def write_days(fmt: str, rows: int, days: int, seed: int, out_dir: str, *,
               churn: float = DEFAULT_CHURN,
               ctr_drift: float = DEFAULT_CTR_DRIFT,
               **options) -> List[GenerationSummary]:
  """Writes `days` days of `rows` rows each, day d to
  out_dir/day-d/<the dataset's file name>, the world drifting from day to
  day (synthetic_world.Drift: ids renewed at rate `churn`, the click rate
  moving by `ctr_drift` a day). A day already written is kept (a day's
  bytes are fixed by its arguments), so a stopped command resumes.
  `options`: write_synthetic's."""
  if isinstance(days, bool) or not isinstance(days, int) or days < 1:
    raise ValueError(f"days must be an integer >= 1, got {days!r}")
  if not 0.0 <= churn <= 1.0:
    raise ValueError(f"churn must be in [0, 1], got {churn}")
  if ctr_drift < 0:
    raise ValueError(f"ctr_drift must be >= 0, got {ctr_drift}")
  name = DAY_FILE[features.get_spec(fmt).name]
  summaries = []
  for day in range(1, days + 1):
    path = os.path.join(out_dir, DAY_FOLDER.format(day=day), name)
    summaries.append(write_synthetic(
        fmt, rows, seed, path, drift=synthetic_world.Drift(day, churn,
                                                           ctr_drift),
        **options) if not os.path.exists(path) else None)
  return summaries


def main(args: argparse.Namespace) -> int:
  """`generate`: writes one file, or with --days one folder a day, and
  says what each holds."""
  options = {"id_profile": args.id_profile, "rare_signal": args.rare_signal,
             "top_ids": args.top_ids}
  if args.days is None:
    print(write_synthetic(args.format, args.rows, args.seed, args.out,
                          **options))
    return 0
  for day, summary in enumerate(write_days(
      args.format, args.rows, args.days, args.seed, args.out,
      churn=args.churn, ctr_drift=args.ctr_drift, **options), start=1):
    print(summary or f"day {day}: kept, already written")
  return 0
