"""The Trainer's run_fn twice on the same inputs and seed, once data-
parallel and once on one device; prints the largest difference of their
exported models' outputs on the eval records as JSON. Run as a script, in
its own process (the CPU is split before TensorFlow initialises its
devices; one multi-worker strategy per process):

  distributed_run_fn.py TRANSFORM_DIR EVAL_RECORDS OUT_DIR TRAIN_FILE...
      mirrored over 2 logical CPU devices
  distributed_run_fn.py --worker I PORT0,PORT1 TRANSFORM_DIR ...
      worker I of 2 on localhost (TF_CONFIG), multi-worker; each worker
      writes under OUT_DIR/worker-I, the chief prints the results
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


def _run(kind, transform_dir, out_dir, files, cpu_devices):
  """run_fn with distribution `kind`, seed 3; its serving directory."""
  settings = TrainerSettings(
      dataset="criteo", batch_size=128, epochs=2, seed=3, distribution=kind,
      cpu_devices=cpu_devices, serve="model",
      model_options=ModelOptions(embedding_dim=4, hidden_units=(16, 16),
                                 precision="float32"))
  serving_dir = os.path.join(out_dir, kind, "serving")
  trainer.run_fn(types.SimpleNamespace(
      custom_config=settings.to_custom_config(),
      transform_output=transform_dir, hyperparameters=None,
      train_files=files, model_run_dir=os.path.join(out_dir, kind, "run"),
      serving_model_dir=serving_dir))
  return serving_dir


def _served(kind, transform_dir, records_path, out_dir, files,
            cpu_devices=2):
  """(replicas trained, the exported model's outputs on the records)."""
  serving_dir = _run(kind, transform_dir, out_dir, files, cpu_devices)
  records = list(tf.data.TFRecordDataset(records_path).as_numpy_iterator())
  serve = tf.saved_model.load(serving_dir).signatures["serving_default"]
  with open(os.path.join(serving_dir, contract.TRAINING_RECORD)) as f:
    replicas = json.load(f)["distribution"]["replicas"]
  return replicas, {k: v.numpy() for k, v in serve(
      examples=tf.constant(records)).items()}


def main():
  argv = sys.argv[1:]
  worker = None
  if argv[0] == "--worker":
    worker, ports, argv = int(argv[1]), argv[2].split(","), argv[3:]
    os.environ["TF_CONFIG"] = json.dumps({
        "cluster": {"worker": [f"localhost:{p}" for p in ports]},
        "task": {"type": "worker", "index": worker}})
  else:
    distribution.configure_cpu_devices(2)
  transform_dir, records_path, out_dir, *files = argv
  if worker is None:
    two_replicas, two = _served("mirrored", transform_dir, records_path, out_dir,
                                files)
  else:
    out_dir = os.path.join(out_dir, f"worker-{worker}")
    if worker > 0:  # Not the chief: trains, writes no model.
      serving_dir = _run("multi-worker", transform_dir, out_dir, files, 1)
      print(json.dumps({"serving_files": sorted(
          os.listdir(serving_dir)) if os.path.isdir(serving_dir) else []}))
      return
    two_replicas, two = _served("multi-worker", transform_dir, records_path,
                                out_dir, files, cpu_devices=1)
  one_replicas, one = _served("none", transform_dir, records_path, out_dir,
                              files,
                              cpu_devices=1 if worker is not None else 2)
  print(json.dumps({
      "replicas": [one_replicas, two_replicas],
      "difference": {k: float(np.abs(one[k] - two[k]).max()) for k in one},
      "spread": float(np.std(one[contract.PREDICTION_KEY]))}))


if __name__ == "__main__":
  main()
