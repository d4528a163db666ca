"""Test-wide setup: pin Keras 3 as every entry point does (see commands.cli)."""

import os

os.environ["TF_USE_LEGACY_KERAS"] = "0"
