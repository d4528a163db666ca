"""Traces the train and test steps mirrored over 2 logical CPU devices with
NCCL all-reduces, the graph MirroredStrategy builds over 2 GPUs, and prints
as JSON, per case and step, its collective ops, the ops without a GPU kernel
and the dtypes of the GPU kernels that compute on the host. Run as a script
(test_gpu_kernels.py does): the CPU must be split before TensorFlow
initialises its devices."""

import json

import tensorflow as tf

from trainer_module import distribution

distribution.configure_cpu_devices(2)

# pylint: disable=g-import-not-at-top
import test_gpu_kernels as kernels
# pylint: enable=g-import-not-at-top

# name -> (TrainingConfig fields, importance weights)
CASES = {
    "dense": ({}, False),
    "sparse": ({"embedding_update": "sparse"}, False),
    "sparse-weighted": ({"embedding_update": "sparse"}, True),
}


def main():
  strategy = tf.distribute.MirroredStrategy(
      ["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.NcclAllReduce())
  results = {}
  for name, (fields, weighted) in CASES.items():
    train, test = kernels.steps("deepfm", weighted=weighted,
                                strategy=strategy, **fields)
    results[name] = {
        step: {
            "collectives": sorted({
                node.op for _, node in kernels.nodes(function)[0]
                if "Nccl" in node.op or "Collective" in node.op}),
            "without_gpu_kernel": {
                op: sorted(where) for op, where in
                kernels.without_gpu_kernel(function).items()},
            "on_the_host": sorted(set().union(
                *kernels.on_the_host(function).values())),
        } for step, function in (("train", train), ("test", test))}
  print(json.dumps(results))


if __name__ == "__main__":
  main()
