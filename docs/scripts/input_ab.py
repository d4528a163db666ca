"""The Trainer's input pipeline: wall and CPU seconds of cached epochs.

Reads the train part (validation slice of 10% held out) of FILE_PATTERN
through input_pipeline.make_dataset at batch 1024, shuffled and cached, 4
epochs:
  PYTHONPATH=<tree> .venv/bin/python docs/scripts/input_ab.py FILE_PATTERN GRAPH
FILE_PATTERN: what that tree's make_dataset reads (transformed examples
before materialize=False, ExampleGen's since); GRAPH: a Transform graph.
"""
import sys
import time

import tensorflow_transform as tft

from data_ab import cpu_seconds  # docs/scripts/, this script's directory.
from trainer_module import input_pipeline


def main() -> None:
  pattern, graph = sys.argv[1:3]
  dataset = input_pipeline.make_dataset(
      [pattern], tft.TFTransformOutput(graph), "label", 1024, shuffle=True,
      part="train", buckets=100, cache=True)
  for epoch in range(4):
    wall, cpu, rows = time.time(), cpu_seconds(), 0
    for _, labels in dataset:
      rows += int(labels.shape[0])
    print(f"epoch {epoch} rows {rows} wall {time.time() - wall:.2f} "
          f"cpu {cpu_seconds() - cpu:.2f}", flush=True)


if __name__ == "__main__":
  main()
