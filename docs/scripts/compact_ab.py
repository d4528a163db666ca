"""Memory of one vocabulary-count compaction (preprocessing.TokenCounts).

A synthetic table of N distinct (field, token, count) rows over 26 fields of
skewed size, plus half of them seen again, summed by (field, token) with one
Arrow hash aggregation ('one', as TokenCounts.compact does) or one field at
a time ('per-field', tried and not adopted). Prints the table's size and the
process's RSS before and at its highest during the sum (sampled every 5 ms):

  PYTHONPATH=. .venv/bin/python docs/scripts/compact_ab.py 10000000 one
  PYTHONPATH=. .venv/bin/python docs/scripts/compact_ab.py 10000000 per-field
"""

import sys
import threading
import time

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.compute as pc


def one_aggregation(counts: pa.Table) -> pa.Table:
  return counts.group_by(["field", "token"]).aggregate([("count", "sum")])


def per_field(counts: pa.Table) -> pa.Table:
  parts = []
  for field in pc.unique(counts["field"]).to_pylist():
    summed = counts.filter(pc.equal(counts["field"], field)).group_by(
        "token").aggregate([("count", "sum")])
    parts.append(pa.table({
        "field": pa.array(np.full(summed.num_rows, field, np.int32)),
        "token": summed["token"], "count": summed["count_sum"]}))
  return pa.concat_tables(parts)


def main(rows: str, mode: str) -> None:
  n = int(rows)
  rng = np.random.default_rng(0)
  share = rng.pareto(1.0, 26) + 0.05
  share /= share.sum()
  # Object arrays, as the pipeline's tokens arrive: pyarrow 10 groups a
  # binary array built from a NumPy fixed-width bytes array wrongly above
  # ~2M values (docs/benchmark_data.md).
  tokens = np.char.mod("%08x", rng.integers(0, 2**32, n, dtype=np.uint64))
  table = pa.table({
      "field": rng.choice(26, n, p=share).astype(np.int32),
      "token": pa.array(tokens.astype(object), pa.binary()),
      "count": rng.integers(1, 50, n)})
  del tokens
  process = psutil.Process()
  before = process.memory_info().rss
  samples = [before]
  done = threading.Event()

  def sample():
    while not done.is_set():
      samples.append(process.memory_info().rss)
      time.sleep(0.005)

  thread = threading.Thread(target=sample)
  thread.start()
  start = time.time()
  summed = {"one": one_aggregation, "per-field": per_field}[mode](
      pa.concat_tables([table, table.slice(0, n // 2)]))
  seconds = time.time() - start
  done.set()
  thread.join()
  gib = 2**30
  print(f"{mode}: {n:,} pairs, table {table.nbytes / gib:.2f} GiB, "
        f"{summed.num_rows:,} summed, RSS before {before / gib:.2f} GiB, "
        f"highest {max(samples) / gib:.2f} GiB (+"
        f"{(max(samples) - before) / gib:.2f}), {seconds:.1f} s")


if __name__ == "__main__":
  main(*sys.argv[1:])
