"""How an id's click signal scales with its frequency rank, in real rows
and in the generator's (issue #59: which `--rare-signal` the real data
argues for; docs/study.md, "The click signal by id frequency, measured on
real rows").

The generator gives the id of frequency rank k a hidden weight of scale
(k + 1)^beta (`--rare-signal beta`, docs/generator.md). The real data's
counterpart: how far an id's click log-odds sits from its field's, as a
function of its rank. In each raw categorical field, ids are ranked by
their count in the file. In rank buckets, the spread of the ids' click
rates beyond binomial noise: each id's (p_i - p)^2 - p_i (1 - p_i) /
(n_i - 1), unbiased for its squared deviation, weighted by n_i, pooled
over the fields that reach the last bucket, on the log-odds scale. The
slope of log spread on log rank estimates beta. The same estimator on
generated rows of the same size, for several beta and seeds, says which
beta the real rows look like; the seeds give its noise.

  PYTHONPATH=. .venv/bin/python docs/scripts/rare_signal_estimate.py \\
      REAL OUT_DIR [--dataset criteo|avazu] [--betas 0,0.05,...] [--seeds 1,...,20]

REAL: real rows in the dataset's raw layout (Criteo's train.txt: tab-
separated, no header; Avazu's train: comma-separated, its header). The
generated rows go to OUT_DIR.
"""

import argparse
import math
import os
from typing import List, Sequence, Tuple

import numpy as np

from commands.synthetic import generate
from trainer_module import features

# Rank buckets [low, high] of an id's count rank in its field (1: the most
# frequent); an id must be seen twice for its noise to be estimated.
BUCKETS = ((1, 2), (3, 8), (9, 32), (33, 128), (129, 512))
MIN_COUNT = 2
# The generator's id profile of each dataset: Criteo's fitted to the real
# file's published counts (docs/generator.md); Avazu has only the default.
PROFILE = {"criteo": "kaggle", "avazu": "default"}


def read_rows(path: str, dataset: str
             ) -> Tuple[np.ndarray, List[np.ndarray]]:
  """The labels and each raw categorical column of a file in the dataset's
  raw layout (Criteo's train.txt, Avazu's train with its header)."""
  spec = features.get_spec(dataset)
  label = spec.columns.index(spec.label)
  wanted = [spec.columns.index(name) for name in spec.categorical_features
            if name in spec.columns]
  labels, columns = [], [[] for _ in wanted]
  with open(path, encoding="utf-8") as f:
    if spec.has_header:
      next(f)
    for line in f:
      fields = line.rstrip("\n").split(spec.delimiter)
      labels.append(int(fields[label]))
      for column, index in zip(columns, wanted):
        column.append(fields[index])
  return np.asarray(labels, float), [np.asarray(c) for c in columns]


def bucket_sums(labels: np.ndarray, values: np.ndarray
               ) -> List[Tuple[float, float]]:
  """Each rank bucket's (sum of n_i times the id's unbiased squared
  deviation from the field's click rate, sum of n_i) over its ids seen
  MIN_COUNT times; (0, 0) for a bucket without such an id."""
  present = values != ""
  labels, values = labels[present], values[present]
  ids, index, counts = np.unique(values, return_inverse=True,
                                 return_counts=True)
  clicks = np.bincount(index, weights=labels)
  rate = labels.mean()
  order = np.lexsort((ids, -counts))  # Rank 1: the most frequent.
  sums = []
  for low, high in BUCKETS:
    chosen = order[low - 1:high]
    chosen = chosen[counts[chosen] >= MIN_COUNT]
    n = counts[chosen].astype(float)
    p = clicks[chosen] / n
    deviation = (p - rate)**2 - p * (1 - p) / (n - 1)
    sums.append((float(np.sum(n * deviation)), float(np.sum(n))))
  return sums


def pooled_spreads(labels: np.ndarray, columns: Sequence[np.ndarray]
                  ) -> Tuple[List[float], int]:
  """Per bucket, the between-id standard deviation of the click log-odds
  beyond noise (NaN where the pooled variance is not positive), pooled
  over the fields that reach the last bucket; and how many fields that
  is. Log-odds scale: the variance over (rate (1 - rate))^2."""
  scale = (labels.mean() * (1 - labels.mean()))**2
  fields = [sums for sums in (bucket_sums(labels, v) for v in columns)
            if sums[-1][1] > 0]
  spreads = []
  for bucket in range(len(BUCKETS)):
    deviation = sum(f[bucket][0] for f in fields)
    weight = sum(f[bucket][1] for f in fields)
    variance = deviation / weight / scale if weight else math.nan
    spreads.append(math.sqrt(variance) if variance > 0 else math.nan)
  return spreads, len(fields)


def slope(spreads: Sequence[float]) -> float:
  """The least-squares slope of log spread on log rank (each bucket at its
  ranks' geometric middle): beta, if the spread is (rank + 1)^beta."""
  middles = [math.log(math.sqrt(low * high)) for low, high in BUCKETS]
  points = [(x, math.log(y)) for x, y in zip(middles, spreads)
            if math.isfinite(y)]
  if len(points) < 2:
    return math.nan
  return float(np.polyfit(*zip(*points), 1)[0])


def generated(out_dir: str, dataset: str, rows: int, beta: float,
              seed: int) -> str:
  """A generated file of `rows` rows in the dataset's PROFILE (kept once
  written)."""
  profile = PROFILE[dataset]
  path = os.path.join(out_dir,
                      f"{dataset}_{profile}_beta{beta}_seed{seed}.txt")
  if not os.path.exists(path):
    generate.write_synthetic(dataset, rows, seed, path, id_profile=profile,
                             rare_signal=beta)
  return path


def main(argv: Sequence[str] = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("real")
  parser.add_argument("out_dir")
  parser.add_argument("--dataset", choices=sorted(PROFILE), default="criteo")
  parser.add_argument("--betas", default="0,0.05,0.1,0.15,0.2,0.3")
  parser.add_argument("--seeds", default=",".join(map(str, range(1, 21))))
  args = parser.parse_args(argv)
  labels, columns = read_rows(args.real, args.dataset)
  rows = labels.size
  seeds = [int(s) for s in args.seeds.split(",")]
  real, fields = pooled_spreads(labels, columns)
  print(f"{rows:,} rows each; the standard deviation of the click log-odds "
        "between ids, beyond noise, per rank bucket (pooled over the fields "
        "that reach the last bucket); generated: the mean over "
        f"{len(seeds)} seeds of the rows, and the slope's mean and standard "
        "deviation over them")
  print("| rows | fields | " + " | ".join(
      f"ranks {low}-{high}" for low, high in BUCKETS) + " | slope |")
  print("|---" * (len(BUCKETS) + 3) + "|")
  print(f"| real | {fields} | " + " | ".join(f"{r:.3f}" for r in real)
        + f" | {slope(real):+.3f} |")
  for beta in (float(b) for b in args.betas.split(",")):
    runs = [pooled_spreads(*read_rows(generated(
        args.out_dir, args.dataset, rows, beta, seed), args.dataset))
            for seed in seeds]
    spreads = np.nanmean([r[0] for r in runs], axis=0)
    slopes = [slope(r[0]) for r in runs]
    print(f"| generated, `--rare-signal {beta}` | {runs[0][1]} | "
          + " | ".join(f"{r:.3f}" for r in spreads)
          + f" | {np.nanmean(slopes):+.3f} ± {np.nanstd(slopes, ddof=1):.3f} |")


if __name__ == "__main__":
  main()
