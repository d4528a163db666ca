"""AUC check for docs/benchmark.md: one checkout's training step, trained.

Run with the current directory at a checkout (its code is imported, so an
older commit trains with its own step), after docs/benchmark_ab.py has
cached the transformed data:

  cd CHECKOUT && python /path/to/docs/auc_ab.py --cache PKL --batch 1024 \
      --epochs 1 --seed 0 [--precision mixed_bfloat16] --out CSV

Trains DeepFM with CowClip (dense update, the dataset's base hyperparameters
scaled to the batch with the CowClip rule) on rows [0, --train-rows) and
reports the exact ROC AUC (scikit-learn) on the last --eval-rows rows.
"""

import argparse
import csv
import dataclasses
import math
import os
import pickle
import sys
import time

sys.path.insert(0, os.getcwd())

import keras  # noqa: E402
import numpy as np  # noqa: E402
from sklearn import metrics  # noqa: E402
import tensorflow as tf  # noqa: E402

from trainer_module import features  # noqa: E402
from trainer_module import models  # noqa: E402
from trainer_module import scaling  # noqa: E402
from trainer_module import settings  # noqa: E402
from trainer_module import training  # noqa: E402


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--cache", required=True)
  parser.add_argument("--batch", type=int, required=True)
  parser.add_argument("--epochs", type=int, default=1)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--precision", default="float32")
  parser.add_argument("--update", default="dense")
  parser.add_argument("--train-rows", type=int, default=300_000)
  parser.add_argument("--eval-rows", type=int, default=100_000)
  parser.add_argument("--label", default=os.path.basename(os.getcwd()))
  parser.add_argument("--out", required=True)
  args = parser.parse_args()
  spec = features.CRITEO
  with open(args.cache, "rb") as f:
    data = pickle.load(f)
  train = {k: v[:args.train_rows] for k, v in data["features"].items()}
  evaluation = {k: v[-args.eval_rows:] for k, v in data["features"].items()}
  labels = data["labels"]
  keras.utils.set_random_seed(args.seed)
  options = models.ModelOptions()
  if args.precision != "float32":
    options = dataclasses.replace(options, precision=args.precision)
  model = models.build_model("deepfm", data["vocab_sizes"],
                             data["dense_features"], options)
  rate = float(labels[:args.train_rows].mean())
  model.bias.assign([math.log(rate / (1 - rate))])
  hparams = scaling.scale_hparams("cowclip", spec.base_hparams,
                                  spec.base_batch_size, args.batch)
  steps = math.ceil(args.train_rows / args.batch)
  training.compile_model(model, training.TrainingConfig(
      **hparams, steps_per_epoch=steps,
      step=settings.StepOptions(embedding_update=args.update)))
  dataset = tf.data.Dataset.from_tensor_slices(
      (train, labels[:args.train_rows])).shuffle(
          200_000, seed=args.seed).batch(args.batch).prefetch(2)
  start = time.perf_counter()
  model.fit(dataset, epochs=args.epochs, verbose=0)
  seconds = time.perf_counter() - start
  logits = model.predict(
      tf.data.Dataset.from_tensor_slices(evaluation).batch(8192), verbose=0)
  auc = metrics.roc_auc_score(labels[-args.eval_rows:], logits.ravel())
  print(args.label, args.batch, args.precision, args.seed,
        f"auc {auc:.5f} fit {seconds:.0f}s", flush=True)
  exists = os.path.exists(args.out)
  with open(args.out, "a", newline="") as f:
    writer = csv.writer(f)
    if not exists:
      writer.writerow(["label", "batch", "epochs", "update", "precision",
                       "seed", "auc", "fit_seconds"])
    writer.writerow([args.label, args.batch, args.epochs, args.update,
                     args.precision, args.seed, f"{auc:.5f}",
                     f"{seconds:.1f}"])


if __name__ == "__main__":
  main()
