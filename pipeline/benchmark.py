"""Training-speed benchmark: seconds per step and examples/s of the real step.

`python -m pipeline benchmark` times the training step the Trainer runs
(models.build_model + training.compile_model + model.fit) on in-memory
transformed features, for every batch size with CowClip on and off and with
the 'dense' and 'sparse' embedding updates, and again with every vocabulary
10x larger at the first batch size (the dense update's cost grows with the
table size, the sparse update's should not).

Inputs: a raw file in the dataset's layout (generated with pipeline.generate
when none is given) is turned into what Transform would write, in memory:
each categorical field's ids are its tokens ranked by training count, tokens
seen fewer than ``min_frequency`` times share the OOV id, and dense counts go
through preprocessing.log1p_counts and are scaled to [0, 1]. The ids thus
have the generator's (or the real data's) power-law frequencies and the
vocabularies the sizes Transform would give them. Transform itself is not
timed: it runs once per dataset.

Timing: one fit of ``warmup_steps + steps`` steps; the clock starts at the
end of the last warm-up step, so tracing and graph building (the first step)
are excluded, and stops at the end of the last step.
"""

import argparse
import csv
import dataclasses
import os
import tempfile
import time
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import keras
import numpy as np
import pandas as pd
import tensorflow as tf

from pipeline import data_benchmark
from pipeline import generate
from trainer_module import features
from trainer_module import models
from trainer_module import preprocessing
from trainer_module import scaling
from trainer_module import training

COLUMNS = ("model", "batch_size", "embedding_update", "cowclip",
           "vocab_scale", "vocab_rows", "steps", "seconds_per_step",
           "examples_per_second")
DEFAULT_BATCH_SIZES = (1024, 8192)
DEFAULT_ROWS = 200_000
DEFAULT_VOCAB_SCALE = 10


@dataclasses.dataclass(frozen=True)
class TransformedData:
  """Transformed features held in memory, as Transform would write them."""
  features: Dict[str, np.ndarray]
  labels: np.ndarray
  vocab_sizes: Dict[str, int]
  dense_features: Tuple[str, ...]

  @property
  def rows(self) -> int:
    return int(self.labels.shape[0])


@dataclasses.dataclass(frozen=True)
class BenchmarkCase:
  """One timed configuration of the training step."""
  batch_size: int
  embedding_update: str
  cowclip: bool
  vocab_scale: int = 1


def _frequency_ids(tokens: pd.Series,
                   min_frequency: int) -> Tuple[np.ndarray, int]:
  """(ids, vocabulary size): tokens ranked by count, rare/missing -> OOV.

  Ids follow tf.Transform's vocabulary order (decreasing count); the empty
  token (a missing value) is never in the vocabulary.
  """
  counts = tokens[tokens != ""].value_counts()
  vocabulary = counts[counts >= min_frequency].index
  ids = pd.Index(vocabulary).get_indexer(tokens)
  size = len(vocabulary)
  ids = np.where(ids < 0, size, ids).astype(np.int64)
  return ids, size + features.NUM_OOV_BUCKETS


def load_transformed(spec: features.DatasetSpec, path: str,
                     min_frequency: int) -> TransformedData:
  """Reads a raw file of ``spec``'s layout into transformed features.

  Raises:
    ValueError: if the file does not have the layout's column count.
  """
  frame = pd.read_csv(path, sep=spec.delimiter, header=None,
                      skiprows=1 if spec.has_header else 0, dtype=str,
                      keep_default_na=False, quoting=3)
  if frame.shape[1] != len(spec.columns):
    raise ValueError(f"{path}: expected {len(spec.columns)} "
                     f"{spec.delimiter!r}-separated {spec.name} columns, "
                     f"got {frame.shape[1]}")
  frame.columns = list(spec.columns)
  tokens = {name: frame[name] for name in
            spec.int_categorical + spec.str_categorical}
  if spec.time_field:
    times = pd.to_numeric(frame[spec.time_field], errors="coerce")
    hour, weekday = preprocessing.time_tokens(
        tf.constant(times.fillna(-1).astype(np.int64).to_numpy()))
    tokens[features.HOUR_OF_DAY] = pd.Series(hour.numpy().astype(str))
    tokens[features.WEEKDAY] = pd.Series(weekday.numpy().astype(str))
  columns, vocab_sizes = {}, {}
  for name in spec.categorical_features:
    columns[name], vocab_sizes[name] = _frequency_ids(tokens[name],
                                                      min_frequency)
  for name in spec.dense:
    counts = pd.to_numeric(frame[name], errors="coerce").fillna(0)
    logs = preprocessing.log1p_counts(
        tf.constant(counts.to_numpy(np.float64))).numpy()
    span = logs.max() - logs.min()
    columns[name] = (logs - logs.min()) / (span if span > 0 else 1.0)
  labels = pd.to_numeric(frame[spec.label], errors="raise").to_numpy(
      np.float32)
  return TransformedData(columns, labels, vocab_sizes, spec.dense)


def benchmark_cases(batch_sizes: Sequence[int],
                    vocab_scale: int = DEFAULT_VOCAB_SCALE
                   ) -> List[BenchmarkCase]:
  """Every batch x update x CowClip, then the larger vocabulary at the first
  batch size (vocab_scale 1 skips those)."""
  cases = [BenchmarkCase(b, update, clip) for b in batch_sizes
           for update in training.EMBEDDING_UPDATES for clip in (True, False)]
  if vocab_scale > 1:
    cases += [BenchmarkCase(batch_sizes[0], update, clip, vocab_scale)
              for update in training.EMBEDDING_UPDATES
              for clip in (True, False)]
  return cases


class _StepClock(keras.callbacks.Callback):
  """End time of every training step of one fit."""

  def __init__(self):
    super().__init__()
    self.ends = []

  def on_train_batch_end(self, batch, logs=None):
    self.ends.append(time.perf_counter())


def time_training_step(model_name: str, spec: features.DatasetSpec,
                       data: TransformedData, case: BenchmarkCase,
                       options: models.ModelOptions, warmup_steps: int,
                       steps: int) -> Dict[str, object]:
  """Times ``steps`` training steps of one case after ``warmup_steps``.

  The hyperparameters are the dataset's base ones scaled to the batch with
  the CowClip rule (they do not change the cost of a step).
  """
  if warmup_steps < 1 or steps < 1:
    raise ValueError(f"warmup_steps and steps must be >= 1, got "
                     f"{warmup_steps} and {steps}")
  if case.batch_size > data.rows:
    raise ValueError(f"batch size {case.batch_size} is larger than the "
                     f"{data.rows} benchmark rows; use more --rows")
  vocab_sizes = {f: v * case.vocab_scale for f, v in data.vocab_sizes.items()}
  keras.utils.set_random_seed(0)
  model = models.build_model(model_name, vocab_sizes, data.dense_features,
                             options)
  hparams = scaling.scale_hparams("cowclip", spec.base_hparams,
                                  spec.base_batch_size, case.batch_size)
  training.compile_model(model, training.TrainingConfig(
      **hparams, steps_per_epoch=max(1, data.rows // case.batch_size),
      cowclip=case.cowclip, embedding_update=case.embedding_update))
  dataset = tf.data.Dataset.from_tensor_slices(
      (data.features, data.labels)).repeat().batch(
          case.batch_size, drop_remainder=True).prefetch(2)
  clock = _StepClock()
  model.fit(dataset, epochs=1, steps_per_epoch=warmup_steps + steps,
            callbacks=[clock], verbose=0)
  seconds = clock.ends[-1] - clock.ends[warmup_steps - 1]
  return {"model": model_name, "batch_size": case.batch_size,
          "embedding_update": case.embedding_update,
          "cowclip": case.cowclip, "vocab_scale": case.vocab_scale,
          "vocab_rows": sum(vocab_sizes.values()), "steps": steps,
          "seconds_per_step": seconds / steps,
          "examples_per_second": steps * case.batch_size / seconds}


def run_benchmark(dataset: str, model_name: str, batch_sizes: Sequence[int],
                  data_path: Optional[str] = None, rows: int = DEFAULT_ROWS,
                  min_frequency: Optional[int] = None,
                  vocab_scale: int = DEFAULT_VOCAB_SCALE,
                  options: models.ModelOptions = models.ModelOptions(),
                  warmup_steps: int = 3, steps: int = 20,
                  seed: int = 1) -> List[Dict[str, object]]:
  """Times every case of benchmark_cases; one result dict per case.

  Args:
    dataset: 'criteo' or 'avazu'.
    model_name: one of models.MODELS.
    batch_sizes: batch sizes to time.
    data_path: raw file of the dataset's layout; None: generate ``rows``
      rows with ``seed`` into a temporary directory.
    rows: rows to generate when no data_path is given.
    min_frequency: vocabulary threshold (None: the dataset's default).
    vocab_scale: factor of the larger-vocabulary cases (1: none).
    options: model architecture.
    warmup_steps: untimed steps first (>= 1: the first step traces).
    steps: timed steps per case.
    seed: seed of the generated rows.
  """
  spec = features.get_spec(dataset)
  if not batch_sizes or any(b <= 0 for b in batch_sizes):
    raise ValueError(f"batch sizes must be positive, got {batch_sizes}")
  if vocab_scale < 1:
    raise ValueError(f"vocab_scale must be >= 1, got {vocab_scale}")
  threshold = spec.min_frequency if min_frequency is None else min_frequency
  if data_path is None:
    with tempfile.TemporaryDirectory() as tmp:
      path = os.path.join(tmp, f"{spec.name}.txt")
      generate.write_synthetic(spec.name, rows, seed, path)
      data = load_transformed(spec, path, threshold)
  else:
    data = load_transformed(spec, data_path, threshold)
  return [time_training_step(model_name, spec, data, case, options,
                             warmup_steps, steps)
          for case in benchmark_cases(batch_sizes, vocab_scale)]


def format_table(results: Sequence[Mapping[str, object]]) -> str:
  """A fixed-width text table of benchmark results."""
  header = ("model", "batch", "update", "cowclip", "vocab", "vocab rows",
            "s/step", "examples/s")
  lines = ["{:<7} {:>6} {:<7} {:<7} {:>5} {:>10} {:>8} {:>11}".format(
      *header)]
  for r in results:
    lines.append("{:<7} {:>6} {:<7} {:<7} {:>5} {:>10,} {:>8.4f} {:>11,.0f}"
                 .format(r["model"], r["batch_size"], r["embedding_update"],
                         "on" if r["cowclip"] else "off",
                         f"x{r['vocab_scale']}", r["vocab_rows"],
                         r["seconds_per_step"], r["examples_per_second"]))
  return "\n".join(lines)


def write_csv(results: Sequence[Mapping[str, object]], path: str) -> None:
  """Writes the results with the COLUMNS header."""
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  with open(path, "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=COLUMNS)
    writer.writeheader()
    writer.writerows(results)


def parse_int_list(text: str) -> List[int]:
  """'1024,8192' -> [1024, 8192] (argparse type), positive ints only."""
  try:
    values = [int(v) for v in text.split(",") if v.strip()]
  except ValueError:
    raise argparse.ArgumentTypeError(
        f"expected comma-separated integers, got {text!r}") from None
  if not values or any(v <= 0 for v in values):
    raise argparse.ArgumentTypeError(
        f"expected positive integers, got {text!r}")
  return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
  """The `benchmark` subcommand's flags."""
  parser.add_argument("--stage", default="step", choices=("step", "data"),
                      help="step: time the training step (default); data: "
                      "run the whole pipeline on --rows generated rows "
                      "(pipeline/data_benchmark.py)")
  data_benchmark.add_arguments(parser)
  parser.add_argument("--dataset", default="criteo",
                      choices=sorted(features.DATASETS))
  parser.add_argument("--model", default="deepfm", choices=models.MODELS)
  parser.add_argument("--batch-sizes", type=parse_int_list,
                      default=list(DEFAULT_BATCH_SIZES),
                      help="comma-separated, e.g. 1024,8192")
  parser.add_argument("--data", default=None,
                      help="raw file of the dataset's layout (default: "
                      "generate --rows rows)")
  parser.add_argument("--rows", type=int, default=DEFAULT_ROWS,
                      help="rows to generate when no --data is given")
  parser.add_argument("--min-frequency", type=int, default=None,
                      help="vocabulary threshold (default: per dataset)")
  parser.add_argument("--vocab-scale", type=int, default=DEFAULT_VOCAB_SCALE,
                      help="also time tables this many times larger at the "
                      "first batch size (1: skip)")
  parser.add_argument("--hidden-units", type=parse_int_list, default=None,
                      help="DNN layer sizes (default: the model's)")
  parser.add_argument("--warmup-steps", type=int, default=3)
  parser.add_argument("--steps", type=int, default=20,
                      help="timed steps per case")
  parser.add_argument("--output", default=None, help="write a CSV here")


def main(args: argparse.Namespace) -> int:
  """Runs the benchmark from parsed flags, prints the table, writes the CSV."""
  if args.stage == "data":
    return data_benchmark.main(args)
  options = (models.ModelOptions(hidden_units=tuple(args.hidden_units))
             if args.hidden_units else models.ModelOptions())
  results = run_benchmark(
      args.dataset, args.model, args.batch_sizes, data_path=args.data,
      rows=args.rows, min_frequency=args.min_frequency,
      vocab_scale=args.vocab_scale, options=options,
      warmup_steps=args.warmup_steps, steps=args.steps)
  print(format_table(results))
  if args.output:
    write_csv(results, args.output)
    print(f"wrote {args.output}")
  return 0
