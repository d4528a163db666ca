"""`--precision auto`: bfloat16 matrix products where this machine's are
measurably faster, float32 elsewhere.

Whether bf16 pays depends on the cores, not on the code: on one AMD EPYC
with AVX512_BF16 bf16 products ran at 0.53x fp32, on another at 1.8x,
and on Intel AMX cores at 1.3-1.6x per step (docs/benchmark.md). So the
choice is measured where the model trains: probe() times a square matmul
in both dtypes, alternating (a few milliseconds a call), and auto picks
mixed_bfloat16 when bf16 is at least BF16_MIN_SPEEDUP times faster. The
margin keeps a machine near parity on float32, where the step's other work
(casts, the float32 embeddings and optimizer) would eat the gain.

The choice is a measurement, so on a machine near the margin, or one
whose load swings, two probes can choose differently: under a test run's
load one chose float32 for a run and bf16 for the next on the same machine
(docs/defaults.md). So the Trainer keeps its first choice per kind of
machine (`kept_in`: a folder beside its outputs, one file per
machine_kind) and every later run of the pipeline on that kind of machine
trains in it: a retrain, or two runs compared, differ in what they were
asked to, not in a probe's luck. Another kind of machine probes afresh;
delete the file to probe again. In a multi-worker cluster the chief keeps
the choice and every worker trains in the chief's
(distribution.chiefs_answer).
"""

import functools
import hashlib
import json
import math
import os
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import tensorflow as tf

AUTO = "auto"
FLOAT32 = "float32"
MIXED_BFLOAT16 = "mixed_bfloat16"
BF16_MIN_SPEEDUP = 1.3
# The probe's matmul: [PROBE_SIZE, PROBE_SIZE] squared, 2.1 GFLOP, a few
# milliseconds on a CPU core; PROBE_REPEATS calls per round, PROBE_ROUNDS
# rounds of each dtype, alternating; the best round of each counts (the
# others were disturbed), and alternating exposes both to the same load.
PROBE_SIZE = 1024
PROBE_REPEATS = 4
PROBE_ROUNDS = 5


def matmul_gflops(dtypes: Sequence[tf.DType], size: int = PROBE_SIZE,
                  repeats: int = PROBE_REPEATS,
                  rounds: int = PROBE_ROUNDS) -> List[float]:
  """This machine's matrix-product rate now in each of `dtypes`, in
  GFLOP/s: the best of `rounds` rounds of `repeats` [size, size] x [size,
  size] matmuls, the dtypes' rounds alternating, after one untimed call
  each (tracing, warm caches)."""
  product = tf.function(tf.matmul)
  operands = []
  for dtype in dtypes:
    a = tf.cast(tf.random.normal([size, size], seed=1), dtype)
    b = tf.cast(tf.random.normal([size, size], seed=2), dtype)
    product(a, b).numpy()
    operands.append((a, b))
  best = [math.inf] * len(dtypes)
  for _ in range(rounds):
    for index, (a, b) in enumerate(operands):
      start = time.perf_counter()
      for _ in range(repeats):
        result = product(a, b)
      result.numpy()
      best[index] = min(best[index], (time.perf_counter() - start) / repeats)
  return [2 * size**3 / seconds / 1e9 for seconds in best]


def measure() -> Dict[str, float]:
  """Float32 and bfloat16 matmul rates now, their ratio, and the seconds
  the measurement took."""
  start = time.perf_counter()
  float32, bfloat16 = matmul_gflops([tf.float32, tf.bfloat16])
  return {"float32_gflops": float32, "bfloat16_gflops": bfloat16,
          "bf16_speedup": bfloat16 / float32,
          "probe_seconds": time.perf_counter() - start}


@functools.lru_cache(maxsize=None)
def probe() -> Dict[str, float]:
  """measure(), once per process: the tuner's trials and the study's runs
  train with the same choice."""
  return measure()


def machine_kind() -> str:
  """What a probe's answer is a property of: the CPU model and the flags
  that decide bf16's speed, the core count and the GPUs TensorFlow sees."""
  model, flags = "unknown CPU", set()
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
      for line in cpuinfo:
        name, _, value = line.partition(":")
        if name.strip() == "model name" and model == "unknown CPU":
          model = value.strip()
        elif name.strip() == "flags" and not flags:
          flags = set(value.split())
  except OSError:
    pass
  fast = sorted(flags & {"avx2", "avx512f", "avx512_bf16", "amx_bf16",
                         "amx_tile"})
  gpus = sorted(tf.config.experimental.get_device_details(gpu).get(
      "device_name", gpu.name) for gpu in tf.config.list_physical_devices("GPU"))
  return (f"{model}; {' '.join(fast) or 'no avx2'}; {os.cpu_count()} cores; "
          f"GPUs: {', '.join(gpus) or 'none'}")


def resolve(precision: str, kept_in: Optional[str] = None
            ) -> Tuple[str, Dict[str, Any]]:
  """The precision to train with, and for AUTO its record (else {}: the
  choice was the user's).

  With `kept_in`, AUTO takes the choice kept there for this machine_kind
  if there is one, else probes and keeps it; the record then says which
  (``kept_at``, and ``probed_now`` False when the choice was read)."""
  if precision != AUTO:
    return precision, {}
  kind = machine_kind() if kept_in else ""
  path = (os.path.join(kept_in, hashlib.sha256(kind.encode()).hexdigest()[:16]
                       + ".json") if kept_in else None)
  if path and tf.io.gfile.exists(path):
    with tf.io.gfile.GFile(path) as kept:
      record = json.load(kept)
    return record["chosen"], {**record["probe"], "kept_at": path,
                              "probed_now": False}
  measured = probe()
  chosen = (MIXED_BFLOAT16 if measured["bf16_speedup"] >= BF16_MIN_SPEEDUP
            else FLOAT32)
  if not path:
    return chosen, measured
  tf.io.gfile.makedirs(kept_in)
  partial = f"{path}.{os.getpid()}.partial"
  with tf.io.gfile.GFile(partial, "w") as kept:
    json.dump({"machine": kind, "chosen": chosen, "probe": measured}, kept,
              indent=1)
  tf.io.gfile.rename(partial, path, overwrite=True)
  return chosen, {**measured, "kept_at": path, "probed_now": True}
