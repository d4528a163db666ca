"""The Trainer's run_fn data-parallel, with the test's seeded settings;
prints the replicas it trained on and its exported model's outputs on the
eval records as JSON (test_determinism compares them with the one-device
run it already has). Run as a script, in its own process (the CPU is split
before TensorFlow initialises its devices; one multi-worker strategy per
process):

  distributed_run_fn.py CUSTOM_CONFIG_JSON TRANSFORM_DIR EVAL_RECORDS OUT_DIR
      TRAIN_FILE...
      mirrored over 2 logical CPU devices
  distributed_run_fn.py --worker I PORT0,PORT1 [--probed-speedup S]
      CUSTOM_CONFIG_JSON ...
      worker I of 2 on localhost (TF_CONFIG), multi-worker; each worker
      writes under OUT_DIR/worker-I, the chief prints the results; with
      --probed-speedup, --precision auto on a worker whose probe measures
      bf16 at S times float32
"""

import json
import os
import sys
import types

import tensorflow as tf

from trainer_module import contract
from trainer_module import distribution
from trainer_module import precision
from trainer_module import trainer


def main():
  argv = sys.argv[1:]
  worker = None
  if argv[0] == "--worker":
    worker, ports, argv = int(argv[1]), argv[2].split(","), argv[3:]
    if argv[0] == "--probed-speedup":
      speedup, argv = float(argv[1]), argv[2:]
      precision.probe = lambda: {"float32_gflops": 100.0,
                                 "bfloat16_gflops": 100.0 * speedup,
                                 "bf16_speedup": speedup,
                                 "probe_seconds": 0.0}
      config = json.loads(argv[0])
      config["model_options"]["precision"] = precision.AUTO
      argv = [json.dumps(config), *argv[1:]]
    os.environ["TF_CONFIG"] = json.dumps({
        "cluster": {"worker": [f"localhost:{p}" for p in ports]},
        "task": {"type": "worker", "index": worker}})
  custom_config, transform_dir, records_path, out_dir, *files = argv
  custom_config = json.loads(custom_config)
  if worker is None:
    custom_config.update(distribution="mirrored", cpu_devices=2)
    distribution.configure_cpu_devices(2)
  else:
    custom_config.update(distribution="multi-worker", cpu_devices=1)
    out_dir = os.path.join(out_dir, f"worker-{worker}")
  serving_dir = os.path.join(out_dir, "serving")
  trainer.run_fn(types.SimpleNamespace(
      custom_config=custom_config, transform_output=transform_dir,
      hyperparameters=None, train_files=files,
      model_run_dir=os.path.join(out_dir, "run"),
      serving_model_dir=serving_dir))
  if worker:  # Not the chief: trains, writes no model.
    print(json.dumps({"serving_files": sorted(
        os.listdir(serving_dir)) if os.path.isdir(serving_dir) else []}))
    return
  records = list(tf.data.TFRecordDataset(records_path).as_numpy_iterator())
  serve = tf.saved_model.load(serving_dir).signatures["serving_default"]
  with open(os.path.join(serving_dir, contract.TRAINING_RECORD)) as f:
    replicas = json.load(f)["distribution"]["replicas"]
  print(json.dumps({"replicas": replicas, "outputs": {
      k: v.numpy().reshape(-1).tolist()
      for k, v in serve(examples=tf.constant(records)).items()}}))


if __name__ == "__main__":
  main()
