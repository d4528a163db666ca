"""Serving latency of exported models, per batch of serialized tf.Examples.

Each NAME=SERVING_DIR is one exported SavedModel (an export serves one
model, a distilled student, or an in-graph ensemble of replicas); its
`serving_default` is called on the same batch of eval-split examples,
round by round, the names alternating so that load changes hit them alike.

Usage (from the repository root):
  python docs/scripts/serving_latency.py "OUTPUT/pipeline/RawCtrExampleGen/examples/*/Split-eval/*.gz" \
      single=DIR student=DIR ensemble=DIR [--examples 1000] [--rounds 15]
"""

import argparse
import glob
import time

import numpy as np
import tensorflow as tf


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("examples", help="glob of gzipped TFRecord files")
  parser.add_argument("models", nargs="+", metavar="NAME=SERVING_DIR")
  parser.add_argument("--examples", dest="batch", type=int, default=1000)
  parser.add_argument("--rounds", type=int, default=15)
  args = parser.parse_args()
  files = sorted(glob.glob(args.examples))
  if not files:
    raise SystemExit(f"no files match {args.examples}")
  records = tf.data.TFRecordDataset(files, compression_type="GZIP").take(
      args.batch)
  examples = tf.constant([r.numpy() for r in records])
  if examples.shape[0] != args.batch:
    raise SystemExit(f"{args.examples}: {examples.shape[0]} examples, "
                     f"fewer than {args.batch}")
  models = {}
  for spec in args.models:
    name, directory = spec.split("=", 1)
    models[name] = tf.saved_model.load(directory).signatures[
        "serving_default"]
  for serve in models.values():  # Warm-up: tracing and first allocations.
    for _ in range(3):
      serve(examples=examples)
  times = {name: [] for name in models}
  for _ in range(args.rounds):
    for name, serve in models.items():
      start = time.perf_counter()
      outputs = serve(examples=examples)
      _ = [v.numpy() for v in outputs.values()]
      times[name].append(1e3 * (time.perf_counter() - start))
  for name, values in times.items():
    print(f"{name:12s} median {np.median(values):7.1f} ms  "
          f"min {np.min(values):7.1f} ms  per {args.batch:,} examples "
          f"({args.rounds} rounds)")


if __name__ == "__main__":
  main()
