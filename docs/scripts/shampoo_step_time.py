"""Not a test: the step time of a DeepFM-sized dense stack (390 -> 400 ->
400 -> 400 -> 1, batch 8192) with optimizers.FusedAdam and with
shampoo.Shampoo (roots every 10 updates), on this machine's CPU.

  PYTHONPATH=. .venv/bin/python docs/scripts/shampoo_step_time.py

Prints, per optimizer, the median and mean of a whole step (forward,
backward, update; one tf.function) over rounds of 20 steps that alternate
between the optimizers, so that other load hits both alike, and of the
update alone (optimizer.apply of fixed gradients).
"""

import time

from trainer_module import keras_version

keras_version.pin_keras3()

# pylint: disable=g-import-not-at-top,g-bad-import-order
import keras
import numpy as np
import tensorflow as tf

from trainer_module import optimizers
from trainer_module import shampoo

BATCH, ROUNDS, STEPS = 8192, 6, 20


def _functions(optimizer):
  """(one training step, one update of fixed gradients), traced, after
  12 steps (so Shampoo's roots exist)."""
  rng = np.random.default_rng(0)
  x = tf.constant(rng.normal(size=(BATCH, 390)).astype(np.float32))
  y = tf.constant((rng.uniform(size=(BATCH, 1)) < 0.25).astype(np.float32))
  keras.utils.set_random_seed(0)
  model = keras.Sequential(
      [keras.Input((390,))] +
      [keras.layers.Dense(400, activation="relu") for _ in range(3)] +
      [keras.layers.Dense(1)])
  weights = model.trainable_variables
  optimizer.build(weights)
  fixed = [tf.random.normal(v.shape) * 1e-3 for v in weights]

  @tf.function
  def step():
    with tf.GradientTape() as tape:
      loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
          labels=y, logits=model(x, training=True)))
    optimizer.apply(tape.gradient(loss, weights), weights)
    return loss

  @tf.function
  def update():
    optimizer.apply(fixed, weights)
    return optimizer.iterations

  for _ in range(12):
    step().numpy()
    update().numpy()
  return step, update


def main():
  warmup = optimizers.LinearWarmup(1e-3, 10)
  functions = {
      "FusedAdam": _functions(optimizers.FusedAdam(learning_rate=warmup)),
      "Shampoo(precondition_every=10)": _functions(shampoo.Shampoo(
          learning_rate=warmup, precondition_every=10,
          start_preconditioning_step=1))}
  times = {(name, kind): [] for name in functions
           for kind in ("step", "update")}
  for _ in range(ROUNDS):
    for name, pair in functions.items():
      for kind, function in zip(("step", "update"), pair):
        for _ in range(STEPS):
          start = time.perf_counter()
          function().numpy()
          times[name, kind].append(1e3 * (time.perf_counter() - start))
  for (name, kind), values in times.items():
    print(f"{name:32s} {kind:6s} median {np.median(values):6.1f} ms, "
          f"mean {np.mean(values):6.1f} ms")


if __name__ == "__main__":
  main()
