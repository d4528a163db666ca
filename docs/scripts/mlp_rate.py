"""The DNN's own arithmetic rate, for docs/benchmark.md: how near the
matmul peak the MLP runs when nothing else shares the cores.

Times, in bf16 and float32 at one batch size (best of 3 rounds of 10):
  * each matrix product of the MLP's shapes alone (DeepFM on Criteo with
    the default options: 26 fields x 10 + 13 dense = 273 inputs,
    400-400-400), and the benchmark's own peak
    (commands.experiments.benchmark.matmul_peak_gflops);
  * the model's own DNN (models.dnn_layers, then the 1-unit logit layer)
    forward and backward, as commands.experiments.benchmark.component_seconds times it.

  PYTHONPATH=. .venv/bin/python docs/scripts/mlp_rate.py BATCH
"""
import dataclasses
import sys
import time

import keras
import tensorflow as tf

from commands.experiments import benchmark
from trainer_module import features
from trainer_module import models

OPTIONS = models.ModelOptions()
INPUTS = (len(features.CRITEO.categorical_features) * OPTIONS.embedding_dim
          + len(features.CRITEO.dense))
ROUNDS, CALLS = 3, 10


def best_seconds(function) -> float:
  """Wall seconds of one call, best of ROUNDS rounds of CALLS calls."""
  function()
  best = float("inf")
  for _ in range(ROUNDS):
    start = time.perf_counter()
    for _ in range(CALLS):
      result = function()
    tf.nest.map_structure(lambda t: t.numpy(), result)
    best = min(best, (time.perf_counter() - start) / CALLS)
  return best


def main() -> None:
  batch = int(sys.argv[1])
  width = OPTIONS.hidden_units[0]
  for dtype in (tf.bfloat16, tf.float32):
    def uniform(*shape):
      return tf.cast(tf.random.uniform(shape), dtype)
    x, w0 = uniform(batch, INPUTS), uniform(INPUTS, width)
    h, w = uniform(batch, width), uniform(width, width)
    products = {
        f"[{batch},{INPUTS}] x [{INPUTS},{width}]":
            (lambda: x @ w0, 2 * batch * INPUTS * width),
        f"[{batch},{width}] x [{width},{width}]":
            (lambda: h @ w, 2 * batch * width * width),
        f"[{width},{batch}] x [{batch},{width}] (weight gradient)":
            (lambda: tf.matmul(h, h, transpose_a=True),
             2 * batch * width * width)}
    for name, (product, flop) in products.items():
      seconds = best_seconds(tf.function(product))
      print(f"{dtype.name:9s} {name:50s} {seconds * 1e3:7.2f} ms "
            f"{flop / seconds / 1e9:5.0f} GFLOP/s")
  for precision in ("mixed_bfloat16", "float32"):
    print(f"{precision:15s} the benchmark's matmul peak "
          f"{benchmark.matmul_peak_gflops(precision):5.0f} GFLOP/s")
    options = dataclasses.replace(OPTIONS, precision=precision)
    dnn = keras.Sequential(models.dnn_layers(options) +
                           [keras.layers.Dense(1, use_bias=False)])
    dnn.build((None, INPUTS))
    inputs = tf.random.uniform([batch, INPUTS])

    @tf.function
    def forward_backward():
      with tf.GradientTape() as tape:
        tape.watch(inputs)
        out = tf.reduce_sum(tf.cast(dnn(inputs), tf.float32))
      return tape.gradient(out, [inputs] + dnn.trainable_variables)

    kernels = sum(int(v.shape[0] * v.shape[1])
                  for v in dnn.trainable_variables if len(v.shape) == 2)
    seconds = best_seconds(forward_backward)
    print(f"{precision:15s} the DNN forward and backward {seconds * 1e3:7.2f} "
          f"ms {6 * kernels * batch / seconds / 1e9:5.0f} GFLOP/s")


if __name__ == "__main__":
  main()
