"""A/B timing of the Trainer's reads of ExampleGen's train split.

Times split_stats (one pass counting every record) and one pass of the
validation slice (input_pipeline.make_dataset, parse and Transform graph
included)
with the code on PYTHONPATH (the process's peak memory so far after each),
then, with `--interleave`, the plain read of
four files interleaved record by record against chunk by chunk:
  PYTHONPATH=/work/main .venv/bin/python docs/scripts/read_ab.py EXAMPLEGEN_OUT GRAPH
  PYTHONPATH=. .venv/bin/python docs/scripts/read_ab.py EXAMPLEGEN_OUT GRAPH --interleave
EXAMPLEGEN_OUT holds Split-train/; GRAPH is a Transform graph of it (e.g.
docs/scripts/data_ab.py transform's OUT/graph).
"""

import glob
import inspect
import os
import resource
import sys
import time

import tensorflow as tf
import tensorflow_transform as tft

from data_ab import cpu_seconds  # docs/scripts/, this script's directory.
from trainer_module import input_pipeline


def _timed(name: str, run, rows=lambda result: result):
  """run()'s result, after printing its time and rows(result)."""
  wall, cpu = time.time(), cpu_seconds()
  result = run()
  print(f"{name}: {rows(result)} rows, wall_s {time.time() - wall:.1f} "
        f"cpu_s {cpu_seconds() - cpu:.1f} max_rss_MB "
        f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10}",
        flush=True)
  return result


def _split_stats(files, output):
  """split_stats of the code on PYTHONPATH: keyed on the examples' values
  (the raw spec given), or, before example_keys, on their bytes."""
  if "raw_spec" in inspect.signature(input_pipeline.split_stats).parameters:
    return input_pipeline.split_stats(files, output.raw_feature_spec(),
                                      "label")
  return input_pipeline.split_stats(files, "label")


def main(examples: str, graph: str, interleave: bool) -> None:
  files = [os.path.join(examples, "Split-train", "*.gz")]
  output = tft.TFTransformOutput(graph)
  stats = _timed("split_stats", lambda: _split_stats(files, output),
                 lambda stats: int(stats.records.sum()))
  buckets = input_pipeline.validation_buckets(int(stats.records.sum()))
  _timed("validation slice", lambda: sum(
      int(labels.shape[0]) for _, labels in input_pipeline.make_dataset(
          files, output, "label", 16384, shuffle=False, part="validation",
          buckets=buckets)))
  if not interleave:
    return
  four = sorted(glob.glob(files[0]))[:4]
  read = lambda f: tf.data.TFRecordDataset(f, compression_type="GZIP")
  count = lambda ds: int(ds.map(tf.size).reduce(
      tf.constant(0), lambda total, n: total + n).numpy())
  names = tf.data.Dataset.from_tensor_slices(four)
  _timed("4 files, interleaved record by record", lambda: count(
      names.interleave(read, num_parallel_calls=tf.data.AUTOTUNE).batch(
          8192)))
  _timed("4 files, interleaved in chunks of 8192", lambda: count(
      names.interleave(lambda f: read(f).batch(8192),
                       num_parallel_calls=tf.data.AUTOTUNE)))


if __name__ == "__main__":
  main(sys.argv[1], sys.argv[2], "--interleave" in sys.argv[3:])
