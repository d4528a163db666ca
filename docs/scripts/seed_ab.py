"""Measurements of docs/benchmark_data.md's "Seeded runs" section.

read: on one ExampleGen output and its Transform graph, in one process,
alternating (two rounds): (1) one pass of the shuffled training part
(make_dataset, parse and Transform graph included) with the files
interleaved in completion order against in a fixed order; (2) split_stats
and one pass of the validation slice keyed on the records' bytes (the code
in MAIN_SRC, a checkout of main before example_keys) against on their
values (example_keys, the code on PYTHONPATH).

rss: the process's RSS around trainer.run_fn (seeded, 1 epoch, batch 8192,
a 64x64 DNN) on that output: what the Evaluator, run next in the same
process by the Beam and local runners, starts beside. Run it with the code
before and after the cache's release on PYTHONPATH.

  PYTHONPATH=. python docs/scripts/seed_ab.py read EXAMPLEGEN_OUT GRAPH MAIN_SRC
  PYTHONPATH=SRC python docs/scripts/seed_ab.py rss EXAMPLEGEN_OUT GRAPH OUT_DIR
EXAMPLEGEN_OUT holds Split-train/; GRAPH is a Transform graph of it.
"""

import ctypes
import gc
import glob
import importlib.util
import json
import os
import resource
import sys
import time
import types

from trainer_module import keras_version

keras_version.pin_keras3()

# pylint: disable=g-import-not-at-top,wrong-import-position
import psutil
import tensorflow as tf
import tensorflow_transform as tft

from trainer_module import input_pipeline
from trainer_module import trainer
from trainer_module.settings import ModelOptions
from trainer_module.settings import TrainerSettings
# pylint: enable=g-import-not-at-top,wrong-import-position

LABEL = "label"


def _chunks(deterministic: bool):
  """input_pipeline._record_chunks with the interleave's order forced."""
  def record_chunks(files, shuffle=False, seed=None):
    names = tf.data.Dataset.from_tensor_slices(files)
    if shuffle:
      names = names.shuffle(len(files), seed=seed)
    return names.interleave(
        lambda f: tf.data.TFRecordDataset(f, compression_type="GZIP").batch(
            input_pipeline._RECORD_CHUNK),  # pylint: disable=protected-access
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
  return record_chunks


def _count(dataset) -> int:
  return sum(int(tf.shape(batch[1])[0]) for batch in dataset)


def read(examples: str, graph: str, main_src: str) -> None:
  spec = importlib.util.spec_from_file_location(
      "main_input_pipeline",
      os.path.join(main_src, "trainer_module", "input_pipeline.py"))
  bytes_keyed = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(bytes_keyed)
  files = sorted(glob.glob(os.path.join(examples, "Split-train", "*")))
  output = tft.TFTransformOutput(graph)
  raw_spec = output.raw_feature_spec()
  stats = input_pipeline.split_stats(files, raw_spec, LABEL)
  records = int(stats.records.sum())
  buckets = input_pipeline.validation_buckets(records)
  print(f"{len(files)} files, {records} records", flush=True)
  real = input_pipeline._record_chunks  # pylint: disable=protected-access
  for round_ in range(2):
    for deterministic in (False, True):
      input_pipeline._record_chunks = _chunks(deterministic)  # pylint: disable=protected-access
      start = time.perf_counter()
      n = _count(input_pipeline.make_dataset(
          files, output, LABEL, 8192, shuffle=True, seed=0, part="train",
          buckets=buckets))
      seconds = time.perf_counter() - start
      print(f"read round {round_} deterministic={deterministic}: {n} ex in "
            f"{seconds:.1f} s = {n / seconds:,.0f} ex/s", flush=True)
  input_pipeline._record_chunks = real  # pylint: disable=protected-access
  for round_ in range(2):
    for name, module in (("bytes", bytes_keyed), ("keys", input_pipeline)):
      start = time.perf_counter()
      if module is input_pipeline:
        counted = module.split_stats(files, raw_spec, LABEL)
      else:
        counted = module.split_stats(files, LABEL)
      stats_seconds = time.perf_counter() - start
      start = time.perf_counter()
      validation = _count(module.make_dataset(
          files, output, LABEL, 8192, shuffle=False, part="validation",
          buckets=buckets))
      slice_seconds = time.perf_counter() - start
      n = int(counted.records.sum())
      print(f"keys round {round_} {name}: split_stats {n} rec in "
            f"{stats_seconds:.1f} s = {n / stats_seconds:,.0f} rec/s; "
            f"validation pass {validation} of {n} rec in "
            f"{slice_seconds:.1f} s = {n / slice_seconds:,.0f} rec/s",
            flush=True)


def _rss() -> str:
  return f"{psutil.Process().memory_info().rss / 2**30:.2f} GiB"


def rss(examples: str, graph: str, out: str) -> None:
  files = sorted(glob.glob(os.path.join(examples, "Split-train", "*")))
  settings = TrainerSettings(
      dataset="criteo", batch_size=8192, epochs=1, seed=1,
      model_options=ModelOptions(hidden_units=(64, 64)))
  print(f"before run_fn: {_rss()}", flush=True)
  start = time.perf_counter()
  trainer.run_fn(types.SimpleNamespace(
      custom_config=settings.to_custom_config(), transform_output=graph,
      hyperparameters=None, train_files=files,
      model_run_dir=os.path.join(out, "run"),
      serving_model_dir=os.path.join(out, "serving")))
  print(f"run_fn took {time.perf_counter() - start:.0f} s", flush=True)
  with open(os.path.join(out, "run", "training.json")) as f:
    print("train_examples", json.load(f)["train_examples"], flush=True)
  peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
  print(f"peak (ru_maxrss): {peak:.2f} GiB", flush=True)
  print(f"after run_fn returned: {_rss()}", flush=True)
  gc.collect()
  print(f"after gc.collect(): {_rss()}", flush=True)
  ctypes.CDLL("libc.so.6").malloc_trim(0)
  print(f"after malloc_trim(0): {_rss()}", flush=True)


if __name__ == "__main__":
  {"read": read, "rss": rss}[sys.argv[1]](*sys.argv[2:])
