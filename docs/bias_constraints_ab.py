"""Bucket-bias variance and AUC with and without bias constraints
(docs/production_calibration.md).

  .venv/bin/python docs/bias_constraints_ab.py --data FILE --output DIR \
      --constraints predicted_ctr,C6,C9 --lrs 1,0.1 --seeds 0,1 --epochs 2 \
      --out CSV

Runs the pipeline up to Transform once (the study's transform_once, cached),
then for each seed trains DeepFM through trainer.train (the Trainer's one
training path: early stopping, bias refit) without and with
--bias-constraints (one run per ascent step of --lrs), on the same data and
seed. On the transformed EVAL split, and on the TRAIN split the constraints
act on, it reports AUC (scikit-learn), log loss, overall calibration and,
per axis, the unweighted variance over buckets of (mean label - mean
prediction): the deciles of predicted CTR, and the training buckets of each
categorical feature of --axes (top 9 ids + other,
bias_constraints.id_buckets); beside each, its noise floor (noise_floor:
what the labels' sampling alone gives a calibrated model), and the largest
final multiplier of each constrained feature.
"""

import argparse
import csv
import dataclasses
import os
import sys
import time

sys.path.insert(0, os.getcwd())

import keras  # noqa: E402
import numpy as np  # noqa: E402
from sklearn import metrics  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_transform as tft  # noqa: E402

from commands import study_data  # noqa: E402
from pipeline.config import PipelineConfig  # noqa: E402
from trainer_module import bias_constraints  # noqa: E402
from trainer_module import settings as settings_lib  # noqa: E402
from trainer_module import input_pipeline  # noqa: E402
from trainer_module import trainer  # noqa: E402


def bucket_bias_variance(labels, predictions, buckets):
  """Unweighted population variance over the non-empty buckets of
  mean(label) - mean(prediction)."""
  biases = [labels[buckets == k].mean() - predictions[buckets == k].mean()
            for k in np.unique(buckets)]
  return float(np.var(biases))


def noise_floor(predictions, buckets):
  """The bucket-bias variance a perfectly calibrated model would show from
  the labels' sampling alone: each bucket's bias then has mean 0 and
  variance s_k = mean_k(p (1 - p)) / n_k (Bernoulli labels), and the
  expected population variance of K such independent biases is
  (K - 1) / K^2 * sum_k s_k."""
  noise = [np.mean(predictions[buckets == k] * (1 - predictions[buckets == k]))
           / np.sum(buckets == k) for k in np.unique(buckets)]
  count = len(noise)
  return float((count - 1) / count ** 2 * np.sum(noise))


def evaluate(model, data, axes, prefix=""):
  """AUC, log loss, calibration and each axis' bucket-bias variance with
  its noise floor on `data`; keys prefixed with `prefix`."""
  logits, labels, ids = [], [], {a: [] for a in axes}
  for batch, label in data:
    logits.append(keras.ops.convert_to_numpy(
        model(batch, training=False)).reshape(-1))
    labels.append(label.numpy().reshape(-1))
    for axis in axes:
      ids[axis].append(batch[axis].numpy().reshape(-1))
  z = np.concatenate(logits).astype(np.float64)
  y = np.concatenate(labels).astype(np.float64)
  p = 1 / (1 + np.exp(-z))
  deciles = np.argsort(np.argsort(z, kind="stable")) * 10 // len(z)
  row = {"auc": metrics.roc_auc_score(y, p),
         "logloss": metrics.log_loss(y, np.clip(p, 1e-7, 1 - 1e-7)),
         "calibration": p.mean() / y.mean(),
         "examples": len(y),
         "var_predicted_ctr": bucket_bias_variance(y, p, deciles),
         "noise_predicted_ctr": noise_floor(p, deciles)}
  for axis in axes:
    buckets = bias_constraints.id_buckets(
        tf.constant(np.concatenate(ids[axis]))).numpy()
    row[f"var_{axis}"] = bucket_bias_variance(y, p, buckets)
    row[f"noise_{axis}"] = noise_floor(p, buckets)
  return {prefix + k: v for k, v in row.items()}


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--data", required=True)
  parser.add_argument("--output", required=True)
  parser.add_argument("--dataset", default="criteo")
  parser.add_argument("--constraints", default="predicted_ctr,C6,C9")
  parser.add_argument("--axes", default="C6,C9,C17,C20")
  parser.add_argument("--lrs", default=str(
      settings_lib.DEFAULT_BIAS_CONSTRAINT_LR), help="ascent steps, "
                      "comma-separated: one constrained run each")
  parser.add_argument("--seeds", default="0,1")
  parser.add_argument("--epochs", type=int, default=2)
  parser.add_argument("--batch-size", type=int, default=1024)
  parser.add_argument("--out", required=True)
  args = parser.parse_args()
  config = PipelineConfig.from_fields(dataset=args.dataset, data=args.data,
                          output=args.output, epochs=args.epochs,
                          batch_size=args.batch_size)
  inputs = study_data.transform_once(config)
  tft_output = tft.TFTransformOutput(inputs.transform_graph)
  train_files = study_data.split_files(inputs.raw_examples, "train")
  eval_files = study_data.split_files(inputs.raw_examples, "eval")
  label = config.spec.label
  eval_data = input_pipeline.make_dataset(eval_files, tft_output, label, 8192,
                                   shuffle=False)
  # The training rows the constraints act on (the validation slice too).
  train_data = input_pipeline.make_dataset(train_files, tft_output, label,
                                           8192, shuffle=False)
  axes = [a for a in args.axes.split(",") if a]
  constraints = tuple(c for c in args.constraints.split(",") if c)
  lrs = [float(lr) for lr in args.lrs.split(",")]
  for seed in [int(s) for s in args.seeds.split(",")]:
    for variant, lr in [((), None)] + [(constraints, lr) for lr in lrs]:
      settings = dataclasses.replace(config.trainer, step=dataclasses.replace(
          config.trainer.step, bias_constraints=variant,
          bias_constraint_lr=lr or settings_lib.DEFAULT_BIAS_CONSTRAINT_LR))
      data = input_pipeline.training_data(train_files, tft_output, label,
                                   args.batch_size, seed=seed)
      start = time.perf_counter()
      model, record = trainer.train(settings, data, tft_output, seed=seed,
                                    verbose=0)
      multipliers = record.get("bias_multipliers", {})
      row = {"constraints": ",".join(variant) or "none", "seed": seed,
             "lr": lr or "", "epochs_run":
             record["epochs_run"], "best_epoch": record["best_epoch"],
             "train_seconds": round(time.perf_counter() - start, 1),
             "train_examples": data.train_examples,
             **{f"max_abs_lambda_{name}": max(abs(v) for v in
                                             multipliers[name])
                if name in multipliers else "" for name in constraints},
             **evaluate(model, eval_data, axes, "eval_"),
             **evaluate(model, train_data, axes, "train_")}
      print(row, flush=True)
      new = not os.path.exists(args.out)
      with open(args.out, "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(row))
        if new:
          writer.writeheader()
        writer.writerow(row)


if __name__ == "__main__":
  main()
