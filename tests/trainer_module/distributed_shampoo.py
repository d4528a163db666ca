"""distributed_parity.py's one-device against mirrored comparison, of DCNv2
with Shampoo as the dense optimizer of the CowClip step (its roots
recomputed at updates 1 and 3 of the 3, stale at update 2); prints the same
JSON.

Run as a script (test_shampoo.py does): the CPU must be split before
TensorFlow initialises its devices.
"""

import sys

import distributed_parity
from trainer_module import optimizers
from trainer_module import shampoo
from trainer_module import training

CASES = ("dcnv2-sparse",)  # Its DNN and matrix cross kernels.
_compile_model = training.compile_model


def compile_with_shampoo(model, config):
  """training.compile_model, then Shampoo (warmed up the same way) in
  place of the dense FusedAdam."""
  _compile_model(model, config)
  _, dense = model.split_variables()
  dense_optimizer = shampoo.Shampoo(
      learning_rate=optimizers.LinearWarmup(config.dense_lr,
                                            config.warmup_steps),
      start_preconditioning_step=1, precondition_every=2,
      name="dense_shampoo")
  dense_optimizer.build(dense)
  model.compile(optimizer=dense_optimizer, jit_compile=config.jit_compile)


if __name__ == "__main__":
  training.compile_model = compile_with_shampoo
  sys.argv[1:] = CASES
  distributed_parity.main()
