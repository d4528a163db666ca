"""The Keras callbacks of every training: the NaN guard, the step timer,
early stopping (the Trainer, the Tuner's trials, the study and the
benchmark use them) and the Trainer's backup, from which a killed fit
resumes."""

import io
import json
import math
import os
import time
from typing import Dict, List, Optional

import keras
import numpy as np
import tensorflow as tf

from trainer_module import contract


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
  ``examples_per_second``, with ``examples_per_cpu_second`` (the same
  examples over the process's CPU seconds), so History and a TensorBoard
  callback placed after this one record them; ``timed_steps``, ``timed_seconds`` and
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
    # The validation AUC, when this epoch validated: a console without a
    # terminal prints this line as the epoch's (commands.cli.console).
    auc = (logs or {}).get(contract.OBJECTIVE)
    print(f"Epoch {epoch + 1}: {rate:,.0f} examples/s "
          f"({self.timed_steps} steps of batch {self.batch_size} in "
          f"{self.timed_seconds:.2f} s)"
          + (f", {contract.OBJECTIVE} {float(auc):.4f}" if auc is not None
             else ""), flush=True)
    if logs is not None:
      logs["examples_per_second"] = rate
      logs["examples_per_cpu_second"] = (
          self.timed_steps * self.batch_size / self.timed_cpu_seconds
          if self.timed_cpu_seconds > 0 else float("nan"))
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


class TrainingBackup(keras.callbacks.BackupAndRestore):
  """Keras' BackupAndRestore, which keeps the weights, the optimizer's
  state and the epoch at each epoch's end, and also what it does not keep:
  early stopping's state (best value and epoch, best weights, epochs
  waited), every epoch's metrics, whether the fit ended, and the wall
  seconds spent on the epochs it holds, over every attempt (a resumed
  run's time to train counts the epochs done before the stop). A fit killed
  after epoch k and started again with the same backup_dir continues at
  epoch k + 1 and ends as the uninterrupted fit would (issue #45); one that
  had ended ends again at once, with its best weights. The backup stays
  when the fit ends: a Trainer killed in its next fit (a replica, the
  student) finds this one done. The Trainer deletes the backups when it
  completes (run_fn).

  Give it after `stopping` in the callbacks: it saves after early stopping
  has seen the epoch and restores after it has reset itself.

  `write_dir`: where to write instead, on a multi-worker run's other
  workers: each worker saves (saving may read variables collectively) and
  restores from the chief's backup, but only the chief's is kept.
  """

  STATE = "fit_state.json"
  BEST_WEIGHTS = "best_weights.npz"

  def __init__(self, backup_dir: str, stopping: keras.callbacks.EarlyStopping,
               write_dir: Optional[str] = None):
    super().__init__(backup_dir, save_freq="epoch", delete_checkpoint=False)
    self._stopping = stopping
    self._write_dir = write_dir
    self.history: Dict[str, List[float]] = {}
    self._epochs = 0
    # Wall seconds of the epochs held: the earlier attempts' (read from
    # the backup), then this one's since on_train_begin (tracing included,
    # as a fresh fit's).
    self.earlier_seconds = 0.0
    self._start = 0.0

  def epochs_done(self) -> int:
    """The epochs the backup holds (0: none, or one not written whole)."""
    state = self._state()
    return state["epoch"] if state else 0

  def _state(self) -> Optional[dict]:
    """Our state, if it and Keras' metadata are of the same epoch (a kill
    between the two writes leaves them apart: then no backup)."""
    try:
      with tf.io.gfile.GFile(os.path.join(self.backup_dir, self.STATE)) as f:
        state = json.load(f)
      with tf.io.gfile.GFile(self._training_metadata_path) as f:
        keras_epoch = json.load(f)["epoch"]
    except (tf.errors.OpError, OSError, ValueError, KeyError):
      return None
    return state if state.get("epoch") == keras_epoch else None

  def on_train_begin(self, logs=None):
    self._start = time.monotonic()
    state = self._state()
    if (state is None and self._write_dir is None and
        tf.io.gfile.exists(self.backup_dir)):
      tf.io.gfile.rmtree(self.backup_dir)  # Not written whole.
    if state is not None:
      super().on_train_begin(logs)  # The weights, optimizer and epoch.
      stopping = self._stopping
      if stopping.monitor_op is None:
        # Keras sets it, and `best` to infinity, at the first epoch's end
        # otherwise: after this, it keeps the best restored here.
        stopping._set_monitor_op()  # pylint: disable=protected-access
      stopping.best, stopping.wait = state["best"], state["wait"]
      stopping.best_epoch = state["best_epoch"]
      with tf.io.gfile.GFile(os.path.join(self.backup_dir, self.BEST_WEIGHTS),
                             "rb") as f, np.load(f) as saved:
        stopping.best_weights = [saved[f"w{i}"] for i in range(len(saved))]
      self.history, self._epochs = state["history"], state["epoch"]
      # Backups from before the seconds were kept have none.
      self.earlier_seconds = state.get("seconds", 0.0)
      if state["finished"]:
        self.model._initial_epoch = self.params["epochs"]  # pylint: disable=protected-access
    if self._write_dir is not None:
      self.backup_dir = self._write_dir
      self._weights_path = os.path.join(self._write_dir, "latest.weights.h5")
      self._training_metadata_path = os.path.join(
          self._write_dir, "training_metadata.json")

  def on_epoch_end(self, epoch, logs=None):
    for name, value in (logs or {}).items():
      self.history.setdefault(name, []).append(float(value))
    self._epochs = epoch + 1
    super().on_epoch_end(epoch, logs)  # Keras' weights and epoch first.
    weights = {f"w{i}": w
               for i, w in enumerate(self._stopping.best_weights or [])}
    npz = io.BytesIO()  # np.savez seeks: a GFile being written cannot.
    np.savez(npz, **weights)
    _write_atomically(os.path.join(self.backup_dir, self.BEST_WEIGHTS),
                      npz.getvalue())
    self._write_state(finished=False)

  def on_train_end(self, logs=None):
    if self._epochs:
      self._write_state(finished=True)
    if self._write_dir is not None and tf.io.gfile.exists(self._write_dir):
      tf.io.gfile.rmtree(self._write_dir)

  def _write_state(self, finished: bool) -> None:
    stopping = self._stopping
    state = {"epoch": self._epochs, "finished": finished,
             "best": float(stopping.best), "wait": stopping.wait,
             "best_epoch": stopping.best_epoch, "history": self.history,
             "seconds": self.earlier_seconds + time.monotonic() - self._start}
    _write_atomically(os.path.join(self.backup_dir, self.STATE),
                      json.dumps(state).encode())


def _write_atomically(path: str, content: bytes) -> None:
  """`content` to a file beside `path`, then renamed to it (any file system
  TensorFlow reads: the backup may be on GCS)."""
  partial = path + ".partial"
  with tf.io.gfile.GFile(partial, "wb") as f:
    f.write(content)
  tf.io.gfile.rename(partial, path, overwrite=True)
