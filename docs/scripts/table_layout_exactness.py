"""Seeded models' predictions and losses, to compare two table layouts bit
for bit (docs/benchmark.md, "one embedding table per kind").

Five models x dense and sparse update x CowClip on and off, seed 7, 4
fields (one of Zipf ids), 2 epochs at batch 128: the initial and trained
predictions, the per-epoch losses and the evaluation, into one npz. Run it
in each checkout and compare:

  PYTHONPATH=. .venv/bin/python docs/scripts/table_layout_exactness.py A.npz   # in each
  python -c "import numpy as np; a, b = np.load('A.npz'), np.load('B.npz'); \
    print(max(abs(a[k] - b[k]).max() for k in a.files))"
"""
import sys

import keras
import numpy as np
import tensorflow as tf

from trainer_module import models
from trainer_module import training
from trainer_module.settings import ModelOptions
from trainer_module.settings import StepOptions

VOCAB = {"c1": 50, "c2": 7, "c3": 300, "c4": 1}
DENSE = ["i1", "i2"]
ROWS = 512


def batches():
  """(features, labels) of ROWS seeded rows."""
  rng = np.random.default_rng(0)
  features = {f: rng.integers(0, v, ROWS).astype(np.int64)
              for f, v in VOCAB.items()}
  features["c3"] = (rng.zipf(1.3, ROWS) % VOCAB["c3"]).astype(np.int64)
  for name in DENSE:
    features[name] = rng.normal(size=ROWS).astype(np.float32)
  return features, (rng.random(ROWS) < 0.3).astype(np.float32)


def main(path: str) -> int:
  features, labels = batches()
  data = tf.data.Dataset.from_tensor_slices((features, labels)).batch(128)
  out = {}
  for name in ("deepfm", "wdl", "dcn", "dcnv2", "lr"):
    for update in ("dense", "sparse"):
      for clip in (True, False):
        if name == "lr" and clip:
          continue
        keras.utils.set_random_seed(7)
        model = models.build_model(name, VOCAB, DENSE, ModelOptions(
            embedding_dim=4, hidden_units=(8, 8), precision="float32"))
        key = f"{name}-{update}-{clip}"
        out[key + "-init"] = model(features).numpy()
        training.compile_model(model, training.TrainingConfig(
            dense_lr=1e-3, embed_lr=1e-2, l2=1e-3, r=1.0, zeta=1e-4,
            warmup_epochs=0, steps_per_epoch=4,
            step=StepOptions(cowclip=clip, embedding_update=update)))
        history = model.fit(data, epochs=2, verbose=0)
        out[key + "-trained"] = model(features).numpy()
        out[key + "-loss"] = np.array(history.history["loss"])
        out[key + "-eval"] = np.array(model.evaluate(data, verbose=0))
  np.savez(path, **out)
  print(f"{len(out)} arrays in {path}")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1]))
