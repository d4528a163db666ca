"""PD and AUC of the replicas and the ensemble, scored directly from the
exported SavedModel on the eval split (cross-check of the Evaluator).

  PYTHONPATH=. .venv/bin/python docs/scripts/pd_direct.py OUTPUT
"""
import glob
import sys

import numpy as np
from sklearn.metrics import roc_auc_score
import tensorflow as tf

from trainer_module import contract
from trainer_module.contract import prediction_difference


def main(out):
  model = glob.glob(f"{out}/pipeline/Trainer/model/*/Format-Serving")[0]
  files = glob.glob(
      f"{out}/pipeline/RawCtrExampleGen/examples/*/Split-eval/*")
  serve = tf.saved_model.load(model).signatures["serving_default"]
  preds, labels = {}, []
  for batch in tf.data.TFRecordDataset(files,
                                       compression_type="GZIP").batch(4096):
    labels.append(tf.io.parse_example(
        batch, {"label": tf.io.FixedLenFeature([], tf.int64)})["label"]
                  .numpy())
    for k, v in serve(examples=batch).items():
      preds.setdefault(k, []).append(v.numpy().ravel())
  preds = {k: np.concatenate(v) for k, v in preds.items()}
  y = np.concatenate(labels)
  print("eval examples", len(y), "click rate", y.mean())
  for k in sorted(preds):
    print(f"{k}: AUC {roc_auc_score(y, preds[k]):.4f} "
          f"mean prediction {preds[k].mean():.4f}")
  r = [preds[contract.replica_output(i)] for i in range(2)]
  print("PD replica_0 vs replica_1", prediction_difference(r))
  print("PD ensemble vs replica_0",
        prediction_difference([preds["probability"], r[0]]))
  print("PD replica vs logistic_regression",
        prediction_difference([r[0], preds["logistic_regression"]]))


if __name__ == "__main__":
  main(sys.argv[1])
