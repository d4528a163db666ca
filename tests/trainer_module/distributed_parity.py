"""Trains the same model on one device and data-parallel, 3 steps at the
same global batch, for each case of CASES; prints per case the largest
relative weight difference and the metric differences as JSON.

Run as a script (test_distribution.py does), in its own process: the CPU
must be split before TensorFlow initialises its devices, and TensorFlow
allows one multi-worker strategy per process.

  distributed_parity.py [CASE...]        mirrored over 2 logical CPU devices
  distributed_parity.py --worker I PORT0,PORT1 [CASE...]
      worker I of a 2-worker MultiWorkerMirroredStrategy on localhost
      (TF_CONFIG); each worker prints its results.
"""

import json
import os
import sys

import keras
import numpy as np
import tensorflow as tf

from trainer_module import distribution
from trainer_module import models
from trainer_module import settings
from trainer_module import training

VOCAB = {"a": 7, "b": 5}
BASE = dict(dense_lr=1e-2, embed_lr=3e-2, l2=1e-3, r=0.5, zeta=1e-3,
            warmup_epochs=1.0, steps_per_epoch=3)
# name -> (architecture, StepOptions fields, importance weights)
CASES = {
    "dense-cowclip-paper": ("deepfm", {}, False),
    "sparse-cowclip-paper": ("deepfm", {"embedding_update": "sparse"}, False),
    "dense-cowclip-reference": ("deepfm", {"cowclip_variant": "reference"},
                                False),
    "sparse-cowclip-reference": ("deepfm", {"embedding_update": "sparse",
                                            "cowclip_variant": "reference"},
                                 False),
    "dense-noclip": ("deepfm", {"cowclip": False}, False),
    "sparse-noclip": ("deepfm", {"embedding_update": "sparse",
                                 "cowclip": False}, False),
    "dense-weighted": ("deepfm", {}, True),
    "sparse-weighted": ("deepfm", {"embedding_update": "sparse"}, True),
    "dcnv2-sparse": ("dcnv2", {"embedding_update": "sparse"}, False),
    "lr-baseline": ("lr", {"cowclip": False}, False),
}
ROWS, BATCH = 41, 16  # 3 steps, the last one 9 rows: split 5 and 4.


def _data(weighted):
  rng = np.random.default_rng(0)
  # Field a: a few frequent ids, so CowClip's counts matter across replicas.
  features = {"a": rng.choice(7, ROWS, p=[.4, .2, .1, .1, .1, .05, .05]),
              "b": rng.integers(0, 5, ROWS),
              "x": rng.normal(size=ROWS).astype(np.float32)}
  labels = ((features["a"] % 2 == 0) ^ (features["x"] > 0.5)).astype(
      np.float32)
  if weighted:
    weights = rng.integers(1, 4, ROWS).astype(np.float32)
    return tf.data.Dataset.from_tensor_slices((features, labels, weights))
  return tf.data.Dataset.from_tensor_slices((features, labels))


def _train(strategy, architecture, fields, weighted):
  with strategy.scope():
    keras.utils.set_random_seed(1)
    model = models.build_model(
        architecture, VOCAB, ("x",),
        models.ModelOptions(embedding_dim=3, hidden_units=(8,),
                            cross_layers=1, precision="float32"))
    training.compile_model(model, training.TrainingConfig(
        **BASE, step=settings.StepOptions(**fields)))
  initial = {v.path: np.asarray(v.numpy()) for v in model.weights}
  data = _data(weighted).batch(BATCH)
  history = model.fit(data, validation_data=data, epochs=1, verbose=0)
  weights = {v.path: np.asarray(v.numpy()) for v in model.weights}
  logs = {k: float(v[0]) for k, v in history.history.items()}
  logs["update"] = max(float(np.max(np.abs(weights[k] - initial[k])))
                       for k in initial if "iteration" not in k)
  return weights, logs


def _strategy(argv):
  """(the data-parallel strategy, the cases to run) of the arguments."""
  if argv[:1] != ["--worker"]:
    distribution.configure_cpu_devices(2)
    return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]), argv
  index, ports = int(argv[1]), argv[2].split(",")
  os.environ["TF_CONFIG"] = json.dumps({
      "cluster": {"worker": [f"localhost:{p}" for p in ports]},
      "task": {"type": "worker", "index": index}})
  return distribution.strategy("multi-worker"), argv[3:]


def main():
  parallel, names = _strategy(sys.argv[1:])
  results = {}
  for name in (names or CASES):
    architecture, fields, weighted = CASES[name]
    two, two_logs = _train(parallel, architecture, fields, weighted)
    one, one_logs = _train(tf.distribute.get_strategy(), architecture,
                           fields, weighted)
    results[name] = {
        "weight_relative_difference": max(
            float(np.max(np.abs(one[k] - two[k])) /
                  max(float(np.max(np.abs(one[k]))), 1e-12)) for k in one),
        "metric_difference": {k: abs(one_logs[k] - two_logs[k])
                              for k in one_logs},
        "update": one_logs["update"],
        "replicas": parallel.num_replicas_in_sync}
  print(json.dumps(results))


if __name__ == "__main__":
  main()
