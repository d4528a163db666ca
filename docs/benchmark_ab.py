"""A/B driver for docs/benchmark.md: one checkout's training step, timed.

Run with the current directory at a checkout (its `pipeline` and
`trainer_module` are imported from there, so an older commit times its own
step) and the same transformed data for both, cached as a pickle by the
first run:

  cd CHECKOUT && python /path/to/docs/benchmark_ab.py --data RAW --cache PKL \
      --cases 1024:dense:on:1,... [--precision mixed_bfloat16] --out CSV

Each case is batch:update:cowclip(on|off):vocab_scale. It calls the
checkout's own commands.benchmark.time_training_step (pipeline.benchmark
before the commands/ room; commit 22f48f6 has the same function without
precisions and step components). It needs the benchmark's former in-memory
transform (load_transformed, _StepClock): checkouts from the issue #12
contract on time trainer.train on the real Transform output instead, with
`python -m pipeline benchmark`.
"""

import argparse
import csv
import inspect
import os
import pickle
import sys
import time

sys.path.insert(0, os.getcwd())

try:  # The checkout's; before the commands/ room it was pipeline.benchmark.
  from commands import benchmark  # noqa: E402
except ImportError:
  from pipeline import benchmark  # noqa: E402
from trainer_module import features  # noqa: E402
from trainer_module import models  # noqa: E402


class _CpuClock(benchmark._StepClock):  # pylint: disable=protected-access
  """The checkout's step clock, also recording this process's CPU time
  (all threads) at every step end: on a shared, oversubscribed machine CPU
  seconds per step measure the step's work, wall seconds mostly the load."""

  last = None

  def __init__(self):
    super().__init__()
    self.cpu = []
    _CpuClock.last = self

  def on_train_batch_end(self, batch, logs=None):
    super().on_train_batch_end(batch, logs)
    self.cpu.append(time.process_time())


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--data", required=True)
  parser.add_argument("--cache", required=True)
  parser.add_argument("--cases", required=True)
  parser.add_argument("--precision", default="float32")
  parser.add_argument("--steps", type=int, default=10)
  parser.add_argument("--warmup-steps", type=int, default=2)
  parser.add_argument("--label", default=os.path.basename(os.getcwd()))
  parser.add_argument("--out", required=True)
  args = parser.parse_args()
  spec = features.CRITEO
  if os.path.exists(args.cache):
    with open(args.cache, "rb") as f:
      data = benchmark.TransformedData(**pickle.load(f))
  else:
    data = benchmark.load_transformed(spec, args.data, spec.min_frequency)
    with open(args.cache, "wb") as f:
      pickle.dump(data.__dict__, f)
  benchmark._StepClock = _CpuClock  # pylint: disable=protected-access
  new_api = "precision" in inspect.signature(
      benchmark.BenchmarkCase).parameters
  rows = []
  for text in args.cases.split(","):
    batch, update, clip, scale = text.split(":")
    kwargs = {"precision": args.precision} if new_api else {}
    case = benchmark.BenchmarkCase(int(batch), update, clip == "on",
                                   int(scale), **kwargs)
    extra = {"components": False} if new_api else {}
    result = benchmark.time_training_step(
        "deepfm", spec, data, case, models.ModelOptions(), args.warmup_steps,
        args.steps, **extra)
    cpu = _CpuClock.last.cpu
    result.update(label=args.label, precision=args.precision,
                  cpu_seconds_per_step=(cpu[-1] - cpu[args.warmup_steps - 1])
                  / args.steps)
    print(args.label, text, args.precision,
          f"{result['examples_per_second']:,.0f} ex/s",
          f"{result['cpu_seconds_per_step']:.4f} cpu s/step", flush=True)
    rows.append(result)
  exists = os.path.exists(args.out)
  with open(args.out, "a", newline="") as f:
    fields = ["label", "precision", "batch_size", "embedding_update",
              "cowclip", "vocab_scale", "vocab_rows", "steps",
              "seconds_per_step", "examples_per_second",
              "cpu_seconds_per_step"]
    writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
    if not exists:
      writer.writeheader()
    writer.writerows(rows)


if __name__ == "__main__":
  main()
