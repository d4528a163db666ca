"""The Trainer's run_fn, killed by SIGKILL as its epoch EPOCH + 1 begins
(after EPOCH finished epochs): what a preempted node or an OOM kill does,
with no chance to clean up. Run as a script, in its own process:

  killed_run_fn.py EPOCH CUSTOM_CONFIG_JSON TRANSFORM_DIR OUT_DIR TRAIN_FILE...

run_fn's model_run_dir and serving_model_dir are OUT_DIR/run and
OUT_DIR/serving, as the test's uninterrupted runs have them.
"""

import json
import os
import signal
import sys
import types

import keras

from trainer_module import callbacks as callbacks_lib
from trainer_module import trainer


class _KilledAtEpoch(keras.callbacks.EarlyStopping):
  """Early stopping as the Trainer's, and SIGKILL as epoch `kill_at`
  (0-based) begins: after the backup of the epoch before it."""

  def __init__(self, kill_at: int, **kwargs):
    super().__init__(**kwargs)
    self.kill_at = kill_at

  def on_epoch_begin(self, epoch, logs=None):
    if epoch == self.kill_at:
      os.kill(os.getpid(), signal.SIGKILL)


def main():
  epoch, custom_config, transform_dir, out_dir, *files = sys.argv[1:]
  callbacks_lib.early_stopping = lambda: _KilledAtEpoch(
      int(epoch), monitor=callbacks_lib.EARLY_STOPPING_MONITOR, mode="min",
      patience=callbacks_lib.EARLY_STOPPING_PATIENCE,
      restore_best_weights=True)
  trainer.run_fn(types.SimpleNamespace(
      custom_config=json.loads(custom_config),
      transform_output=transform_dir, hyperparameters=None, train_files=files,
      model_run_dir=os.path.join(out_dir, "run"),
      serving_model_dir=os.path.join(out_dir, "serving")))
  raise AssertionError(f"run_fn finished: no kill at epoch {epoch}")


if __name__ == "__main__":
  main()
