"""Test-wide setup: Keras 3, as every entry point decides (keras_version)."""

from trainer_module import keras_version

keras_version.pin_keras3()
