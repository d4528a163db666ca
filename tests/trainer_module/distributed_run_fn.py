"""The Trainer's run_fn twice on the same inputs and seed, once mirrored
over 2 logical CPU devices and once on one device; prints the largest
difference of their exported models' outputs on the eval records as JSON.
Run as a script, in its own process (the CPU is split before TensorFlow
initialises its devices):

  distributed_run_fn.py TRANSFORM_DIR EVAL_RECORDS OUT_DIR TRAIN_FILE...
"""

import json
import os
import sys
import types

import numpy as np
import tensorflow as tf

from trainer_module import contract
from trainer_module import distribution
from trainer_module import trainer
from trainer_module.settings import ModelOptions
from trainer_module.settings import TrainerSettings


def _served(kind, transform_dir, records, out_dir, files):
  settings = TrainerSettings(
      dataset="criteo", batch_size=128, epochs=2, seed=3, distribution=kind,
      cpu_devices=2,
      model_options=ModelOptions(embedding_dim=4, hidden_units=(16, 16)))
  serving_dir = os.path.join(out_dir, kind, "serving")
  trainer.run_fn(types.SimpleNamespace(
      custom_config=settings.to_custom_config(),
      transform_output=transform_dir, hyperparameters=None,
      train_files=files, model_run_dir=os.path.join(out_dir, kind, "run"),
      serving_model_dir=serving_dir))
  serve = tf.saved_model.load(serving_dir).signatures["serving_default"]
  with open(os.path.join(serving_dir, contract.TRAINING_RECORD)) as f:
    replicas = json.load(f)["distribution"]["replicas"]
  return replicas, {k: v.numpy() for k, v in serve(
      examples=tf.constant(records)).items()}


def main():
  transform_dir, records_path, out_dir, *files = sys.argv[1:]
  distribution.configure_cpu_devices(2)
  records = list(tf.data.TFRecordDataset(records_path).as_numpy_iterator())
  one_replicas, one = _served("none", transform_dir, records, out_dir, files)
  two_replicas, two = _served("mirrored", transform_dir, records, out_dir,
                              files)
  print(json.dumps({
      "replicas": [one_replicas, two_replicas],
      "difference": {k: float(np.abs(one[k] - two[k]).max()) for k in one},
      "spread": float(np.std(one[contract.PREDICTION_KEY]))}))


if __name__ == "__main__":
  main()
