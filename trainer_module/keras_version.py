"""The one place that decides which Keras `tf.keras` is: Keras 3.

tf.Transform sets TF_USE_LEGACY_KERAS=1 when it is unset, after which
tf.keras flips between Keras 3 and tf_keras with import order. The models,
CowClip's training step and KerasTuner 1.4 are Keras 3 code, so the entry
points (the CLI, the tests) call `pin_keras3` before anything imports
TensorFlow. A user's explicit setting is honoured when it asks for Keras 3
too, and refused with a message otherwise. (The Kubeflow image sets it in
kubeflow/Dockerfile: TFX's container entry point runs before any of ours.)
"""

import os
from typing import MutableMapping, Optional

VARIABLE = "TF_USE_LEGACY_KERAS"
# The values for which TensorFlow (and tf.Transform) route tf.keras to
# tf_keras (tensorflow/python/util/lazy_loader.py); any other is Keras 3.
LEGACY_VALUES = ("true", "True", "1")


def pin_keras3(environ: Optional[MutableMapping[str, str]] = None) -> None:
  """Sets TF_USE_LEGACY_KERAS=0 when unset; keeps a value meaning Keras 3.

  Raises:
    RuntimeError: the variable asks for legacy Keras (tf_keras).
  """
  environ = os.environ if environ is None else environ
  value = environ.get(VARIABLE)
  if value is None:
    environ[VARIABLE] = "0"
  elif value in LEGACY_VALUES:
    raise RuntimeError(
        f"{VARIABLE}={value!r} asks for legacy Keras (tf_keras), but this "
        "project's models, CowClip training step and KerasTuner need Keras "
        f"3: unset {VARIABLE} or set it to 0")
