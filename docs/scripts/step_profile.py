"""Op-level profile of the Trainer's step, for docs/benchmark.md.

Times one benchmark case (commands.experiments.benchmark.time_training_step, on FIXED
batches: the step alone) with TensorFlow's profiler tracing steps 5 to 9,
and prints the traced ops' time per step, by op type and by op, summed over
the host's threads. Ops run side by side on the cores (TensorFlow's
inter-op pool), so the sums exceed the step's wall time, and an op that
shares the cores with others takes longer than it would alone.

  PYTHONPATH=. .venv/bin/python docs/scripts/step_profile.py RAW_FILE WORK_DIR \
      BATCH dense|sparse on|off [PRECISION] [VOCAB_SCALE]

RAW_FILE and WORK_DIR as `python -m pipeline benchmark --data RAW_FILE
--work-dir WORK_DIR --min-frequency 10` (its ingestion and Transform are
reused when WORK_DIR holds them).
"""
import collections
import glob
import os
import sys
import tempfile

import keras
import tensorflow as tf
from tensorflow.tsl.profiler.protobuf import xplane_pb2

from commands.experiments import benchmark
from trainer_module import features
from trainer_module import models

FIRST_TRACED, LAST_TRACED = 5, 9


class TraceSteps(keras.callbacks.Callback):
  """Traces steps FIRST_TRACED..LAST_TRACED of the fit into `logdir`."""

  def __init__(self, logdir: str):
    super().__init__()
    self.logdir = logdir

  def on_train_batch_begin(self, batch, logs=None):
    if batch == FIRST_TRACED:
      tf.profiler.experimental.start(self.logdir)

  def on_train_batch_end(self, batch, logs=None):
    if batch == LAST_TRACED:
      tf.profiler.experimental.stop()


def op_seconds(logdir: str):
  """(seconds by op type, seconds by op name) of the traced host ops."""
  path, = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"),
                    recursive=True)
  space = xplane_pb2.XSpace()
  with open(path, "rb") as f:
    space.ParseFromString(f.read())
  by_type, by_name = collections.Counter(), collections.Counter()
  counts = collections.Counter()
  for plane in space.planes:
    if not plane.name.startswith("/host:CPU"):
      continue
    names = {key: value.name for key, value in plane.event_metadata.items()}
    for line in plane.lines:
      for event in line.events:
        name = names[event.metadata_id]
        # A TensorFlow op's event is "op name:OpType"; the executor's own
        # events ("ExecutorState::Process", "EagerLocalExecute: f") span
        # the ops.
        op_name, _, op_type = name.rpartition(":")
        if not op_name or "::" in name or " " in name:
          continue
        by_type[op_type] += event.duration_ps / 1e12
        by_name[name] += event.duration_ps / 1e12
        counts[op_type] += 1
  return by_type, by_name, counts


def main() -> None:
  raw, work_dir, batch, update, clip = sys.argv[1:6]
  precision = sys.argv[6] if len(sys.argv) > 6 else "mixed_bfloat16"
  vocab_scale = int(sys.argv[7]) if len(sys.argv) > 7 else 1
  spec = features.get_spec("criteo")
  data = benchmark.transform(spec, raw, 10, os.path.join(work_dir,
                                                         "pipeline"))
  case = benchmark.BenchmarkCase(int(batch), update, clip == "on",
                                 vocab_scale=vocab_scale,
                                 precision=precision, input="fixed")
  logdir = tempfile.mkdtemp()
  result = benchmark.time_training_step(
      "deepfm", spec, data, case, models.ModelOptions(),
      warmup_steps=3, steps=LAST_TRACED + 2, components=False,
      callbacks=[TraceSteps(logdir)])
  steps = LAST_TRACED - FIRST_TRACED + 1
  print(f"{result['examples_per_second']:,.0f} examples/s, "
        f"{result['seconds_per_step'] * 1e3:.1f} ms a step ({steps} traced)")
  by_type, by_name, counts = op_seconds(logdir)
  total = sum(by_type.values())
  print(f"traced ops: {total / steps * 1e3:.1f} ms a step, summed over "
        f"threads; {sum(counts.values()) / steps:,.0f} ops a step")
  for op, seconds in by_type.most_common(25):
    print(f"{op:32s} {seconds / steps * 1e3:8.2f} ms  {seconds / total:6.1%}"
          f"  {counts[op] / steps:6.0f} ops")
  print("--- by op")
  for op, seconds in by_name.most_common(25):
    print(f"{op[-88:]:88s} {seconds / steps * 1e3:8.2f} ms")


if __name__ == "__main__":
  main()
