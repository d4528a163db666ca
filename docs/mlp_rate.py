"""The DNN's own arithmetic rate, for docs/benchmark.md: how near the
matmul peak the MLP runs when nothing else shares the cores.

Times, in bf16 and float32 at one batch size (best of 3 rounds of 10):
  * each matrix product of the MLP's shapes alone (DeepFM on Criteo: 26
    fields x 10 + 13 dense = 273 inputs, 400-400-400), and the benchmark's
    2048-square peak;
  * the model's own DNN (models.dnn_layers, then the 1-unit logit layer)
    forward and backward, as commands.benchmark.component_seconds times it.

  PYTHONPATH=. .venv/bin/python docs/mlp_rate.py BATCH
"""
import sys
import time

import keras
import tensorflow as tf

from trainer_module import models

INPUTS, ROUNDS, CALLS = 26 * 10 + 13, 3, 10


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
  units = models.ModelOptions().hidden_units
  width = units[0]
  for dtype in (tf.bfloat16, tf.float32):
    def uniform(*shape):
      return tf.cast(tf.random.uniform(shape), dtype)
    x, w0 = uniform(batch, INPUTS), uniform(INPUTS, width)
    h, w = uniform(batch, width), uniform(width, width)
    square = uniform(2048, 2048)
    products = {
        f"[{batch},{INPUTS}] x [{INPUTS},{width}]":
            (lambda: x @ w0, 2 * batch * INPUTS * width),
        f"[{batch},{width}] x [{width},{width}]":
            (lambda: h @ w, 2 * batch * width * width),
        f"[{width},{batch}] x [{batch},{width}] (weight gradient)":
            (lambda: tf.matmul(h, h, transpose_a=True),
             2 * batch * width * width),
        "[2048,2048] x [2048,2048] (the peak)":
            (lambda: square @ square, 2 * 2048 ** 3)}
    for name, (product, flop) in products.items():
      seconds = best_seconds(tf.function(product))
      print(f"{dtype.name:9s} {name:50s} {seconds * 1e3:7.2f} ms "
            f"{flop / seconds / 1e9:5.0f} GFLOP/s")
  for precision in ("mixed_bfloat16", "float32"):
    options = models.ModelOptions(precision=precision)
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
