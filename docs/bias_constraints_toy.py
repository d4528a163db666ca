"""Ascent-step sweep of the bias constraints on the unit tests' toy data
(docs/production_calibration.md): DeepFM, 80 steps of batch 512, no
CowClip; bucket-bias variance of the predicted-CTR deciles and of field
"a"'s ids (whose click rates differ) on 4,096 held-out rows.

  .venv/bin/python docs/bias_constraints_toy.py
"""

import dataclasses
import os
import sys

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.join(os.getcwd(), "tests", "trainer_module"))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import test_bias_constraints as t  # noqa: E402

from trainer_module import settings  # noqa: E402

features, labels = t._batch(2, rows=4096)  # pylint: disable=protected-access
for feature in (settings.PREDICTED_CTR, "a"):
  for lr in (0.0, 1.0, 10.0, 50.0):
    config = t.CONFIG if lr == 0 else dataclasses.replace(
        t.CONFIG, bias_constraints=(feature,), bias_constraint_lr=lr)
    model = t._model(config)  # pylint: disable=protected-access
    for step in range(80):
      model.train_on_batch(*t._batch(100 + step % 16, rows=512))  # pylint: disable=protected-access
    logits = keras.ops.convert_to_numpy(model(features))[:, 0]
    deciles = np.argsort(np.argsort(logits)) * 10 // len(logits)
    p = t._sigmoid(logits)  # pylint: disable=protected-access
    by_decile = np.var([np.mean(labels[deciles == k] - p[deciles == k])
                        for k in range(10)])
    by_a = np.var([np.mean(labels[features["a"] == k] - p[features["a"] == k])
                   for k in range(t.VOCAB["a"])])
    print(f"{feature} lr {lr}: var deciles {by_decile:.2e}, var a {by_a:.2e}",
          flush=True)
