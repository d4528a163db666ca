"""The Keras callbacks of every training: the NaN guard, the step timer and
early stopping (the Trainer, the Tuner's trials, the study and the
benchmark use them)."""

import math
import time
from typing import Optional

import keras
import tensorflow as tf


class NonFiniteLossError(FloatingPointError):
  """The training loss became NaN or infinite: the run is unusable."""


class NonFiniteLossGuard(keras.callbacks.Callback):
  """Raises NonFiniteLossError as soon as the training loss is not finite.

  Keras' TerminateOnNaN only stops training, after which the pipeline would
  export the broken model; an exception fails the run visibly. The logged
  loss is the running mean of the epoch, so it turns non-finite at the
  first bad step.
  """

  def __init__(self):
    super().__init__()
    self._epoch = 0

  def on_epoch_begin(self, epoch, logs=None):
    self._epoch = epoch

  def on_train_batch_end(self, batch, logs=None):
    loss = (logs or {}).get("loss")
    if loss is not None and not math.isfinite(float(loss)):
      raise NonFiniteLossError(
          f"loss became {float(loss)} at epoch {self._epoch + 1} step "
          f"{batch + 1}; training stopped so no broken model is exported "
          "(lower the learning rates, raise l2, or check the input "
          "features for NaN/inf)")


class ThroughputLogger(keras.callbacks.Callback):
  """Logs training examples/second per epoch (console, logs, TensorBoard).

  The one step timer (the Trainer, the study and the benchmark use it).
  The rate covers the training steps only (not validation) and leaves out
  the first ``warmup_steps`` steps of each epoch (the first step of the
  first epoch traces and compiles the step function); the last, partial
  batch counts as full. The value is also put into the epoch logs as
  ``examples_per_second``, so History and a TensorBoard callback placed
  after this one record it; ``timed_steps``, ``timed_seconds`` and
  ``timed_cpu_seconds`` (the process's CPU time over the same steps, all
  threads: the step's work, which a loaded machine does not stretch as it
  does wall time) keep the last epoch's measurement.
  """

  def __init__(self, batch_size: int, log_dir: Optional[str] = None,
               warmup_steps: int = 1):
    super().__init__()
    if warmup_steps < 1:
      raise ValueError(f"warmup_steps must be >= 1 (the first step "
                       f"compiles), got {warmup_steps}")
    self.batch_size = batch_size
    self.log_dir = log_dir
    self.warmup_steps = warmup_steps
    self.timed_steps = 0
    self.timed_seconds = 0.0
    self.timed_cpu_seconds = 0.0
    self._writer = None
    self._start = None
    self._last_step_end = None
    self._steps = 0

  def on_epoch_begin(self, epoch, logs=None):
    self._start = None
    self._steps = 0

  def on_train_batch_end(self, batch, logs=None):
    now = (time.perf_counter(), time.process_time())
    self._steps = batch + 1
    if self._steps == self.warmup_steps:
      self._start = now
    self._last_step_end = now

  def on_epoch_end(self, epoch, logs=None):
    if self._steps <= self.warmup_steps:
      return  # Only warm-up steps ran: no meaningful rate.
    self.timed_steps = self._steps - self.warmup_steps
    self.timed_seconds = self._last_step_end[0] - self._start[0]
    self.timed_cpu_seconds = self._last_step_end[1] - self._start[1]
    rate = self.timed_steps * self.batch_size / self.timed_seconds
    print(f"Epoch {epoch + 1}: {rate:,.0f} examples/s "
          f"({self.timed_steps} steps of batch {self.batch_size} in "
          f"{self.timed_seconds:.2f} s)", flush=True)
    if logs is not None:
      logs["examples_per_second"] = rate
    if self.log_dir:
      if self._writer is None:
        self._writer = tf.summary.create_file_writer(self.log_dir)
      with self._writer.as_default():
        tf.summary.scalar("examples_per_second", rate, step=epoch)
      self._writer.flush()


# Early stopping watches the validation slice's log loss, not `val_loss`,
# whose L2 term changes with the weights and measures no fit.
EARLY_STOPPING_MONITOR = "val_logloss"
# Epochs without a lower validation log loss before training stops.
EARLY_STOPPING_PATIENCE = 2


def early_stopping() -> keras.callbacks.EarlyStopping:
  """Keras' EarlyStopping on the validation log loss that restores the best
  epoch's weights at the end of training (Keras 3 does so whether or not it
  stopped early); its ``best_epoch`` is 0-based."""
  return keras.callbacks.EarlyStopping(
      monitor=EARLY_STOPPING_MONITOR, mode="min",
      patience=EARLY_STOPPING_PATIENCE, restore_best_weights=True)
