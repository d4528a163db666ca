"""Measurements of docs/production_smelu_sampling.md: SmeLU vs ReLU, and
negative down-sampling.

Runs the real pipeline up to Transform once (cached, like `study`), then
trains each run through trainer.train (the Trainer's one training path, with
its validation slice, early stopping and bias refit) and scores the
TRANSFORMED eval split (never sampled) with the trained model, keeping every
eval prediction, so that:

* AUC (exact, scikit-learn), log loss and calibration (mean prediction /
  mean label) are computed on all eval examples;
* PD (Anil et al. 2022, sec. 5) is computed between the eval predictions of
  two runs that differ only in the seed:
  PD = mean_i |p_i1 - p_i2| / ((p_i1 + p_i2) / 2).

  cd WORKTREE && .venv/bin/python docs/scripts/smelu_sampling_ab.py \
      --data runs/criteo300k.txt --output runs/h16-measure \
      --activations relu,smelu --seeds 1,2,3 --rates 1,0.5,0.25 \
      --rate-seeds 1 --epochs 1

Runs: every activation at rate 1 with every seed (the PD pairs), and every
rate with the first activation and every seed. Results go to
OUTPUT/smelu_sampling.csv (one row per run; a restart skips finished runs)
and the tables are printed as markdown.

With --profile LABEL, it instead profiles where the CPU seconds of the
sampled training go, for every rate, --repeats times (rates alternating):
training_data (the label passes), one pass over the training part and one
over the validation slice without a model (the input pipeline alone), the
whole train() (--epochs epochs, validation every epoch, the bias refit) on
a fresh TrainingData and its eval scores, then the bias refit alone (a
second refit). One row per run is appended
to OUTPUT/profile.csv under LABEL (e.g. "main" or "branch": run the script
from each checkout, alternating, for before/after ratios).
"""

import argparse
import csv
import dataclasses
import itertools
import json
import os
import resource
import sys
import time

sys.path.insert(0, os.getcwd())

import numpy as np  # noqa: E402
from sklearn import metrics  # noqa: E402
import tensorflow_transform as tft  # noqa: E402

from commands.experiments import study_data  # noqa: E402
from pipeline.config import PipelineConfig  # noqa: E402
from trainer_module import callbacks as callbacks_lib  # noqa: E402
from trainer_module import input_pipeline  # noqa: E402
from trainer_module import plan  # noqa: E402
from trainer_module import trainer  # noqa: E402
from trainer_module import training  # noqa: E402
from trainer_module.contract import prediction_difference  # noqa: E402


def _key(activation, rate, seed):
  return f"{activation}-p{rate:g}-s{seed}"


def run_one(config, setup, activation, rate, seed, batch_size):
  settings = dataclasses.replace(
      config.trainer, negative_sampling_rate=rate, batch_size=batch_size,
      model_options=dataclasses.replace(config.trainer.model_options,
                                        activation=activation))
  tfto, train_files, eval_files = setup
  data = input_pipeline.training_data(train_files, tfto, config.spec.label,
                               batch_size, seed=seed,
                               negative_sampling_rate=rate)
  timer = callbacks_lib.ThroughputLogger(batch_size)
  start, cpu_start = time.perf_counter(), time.process_time()
  model, record = trainer.train(
      plan.resolve(settings, {}, data.train_examples), data, tfto, seed=seed,
      verbose=0, callbacks=[timer])
  seconds = time.perf_counter() - start
  cpu_seconds = time.process_time() - cpu_start
  p, y, scores = evaluate(model, tfto, eval_files, config.spec.label)
  history = record["history"]
  return p, y, {
      "run": _key(activation, rate, seed), "activation": activation,
      "rate": rate, "seed": seed, "batch_size": batch_size,
      "train_examples": data.train_examples,
      "epochs_run": record["epochs_run"], "best_epoch": record["best_epoch"],
      "train_seconds": seconds, "train_cpu_seconds": cpu_seconds,
      "examples_per_second": float(np.mean(history["examples_per_second"])),
      **scores,
      "warning": record.get("negative_sampling", {}).get("warning") or ""}


def evaluate(model, tfto, eval_files, label):
  """(predictions, labels, scores) on every (unsampled) eval example:
  exact AUC, log loss, calibration = mean prediction / mean label."""
  evaluation = input_pipeline.make_dataset(eval_files, tfto, label, 8192,
                                    shuffle=False)
  logits, labels = [], []
  for features, batch_labels in evaluation:
    logits.append(model.predict_on_batch(features).reshape(-1))
    labels.append(np.asarray(batch_labels).reshape(-1))
  z = np.concatenate(logits).astype(np.float64)
  y = np.concatenate(labels).astype(np.float64)
  p = 1 / (1 + np.exp(-z))
  return p, y, {"auc": metrics.roc_auc_score(y, p),
                "logloss": metrics.log_loss(y, p),
                "calibration": p.mean() / y.mean(), "eval_examples": len(y)}


def _cpu():
  """CPU seconds of this process (user + system, every thread: tf.data's
  and the training step's)."""
  usage = resource.getrusage(resource.RUSAGE_SELF)
  return usage.ru_utime + usage.ru_stime


def _timed(fn):
  """(fn(), CPU seconds, wall seconds)."""
  cpu, wall = _cpu(), time.perf_counter()
  result = fn()
  return result, _cpu() - cpu, time.perf_counter() - wall


def profile_one(config, setup, rate, batch_size):
  """Where one sampled training's CPU goes (see the module doc)."""
  config = dataclasses.replace(config, trainer=dataclasses.replace(
      config.trainer, negative_sampling_rate=rate, batch_size=batch_size))
  tfto, train_files, eval_files = setup
  label = config.spec.label

  def data():
    return input_pipeline.training_data(train_files, tfto, label, batch_size,
                                 seed=1, negative_sampling_rate=rate)

  def count(dataset):
    return sum(int(batch[1].shape[0]) for batch in dataset)

  probe, data_cpu, _ = _timed(data)
  train_rows, train_pass_cpu, _ = _timed(lambda: count(probe.train))
  _, validation_pass_cpu, _ = _timed(lambda: count(probe.validation))
  fresh = data()
  timer = callbacks_lib.ThroughputLogger(batch_size)
  (model, record), train_cpu, train_wall = _timed(lambda: trainer.train(
      plan.resolve(config.trainer, {}, fresh.train_examples), fresh, tfto,
      seed=1, verbose=0,
      callbacks=[timer]))
  scores = evaluate(model, tfto, eval_files, label)[2]
  _, refit_cpu, _ = _timed(lambda: training.recalibrate_bias(
      model, fresh.validation, fresh.click_rate))
  return {**scores, "rate": rate, "train_examples": fresh.train_examples,
          "rows_read": train_rows,
          "epochs_run": record["epochs_run"],
          "training_data_cpu": data_cpu,
          "train_pass_cpu": train_pass_cpu,
          "validation_pass_cpu": validation_pass_cpu,
          "train_cpu": train_cpu, "train_wall": train_wall,
          "refit_cpu": refit_cpu,
          "examples_per_second": float(np.mean(
              record["history"]["examples_per_second"]))}


def profile(config, setup, rates, repeats, batch_size, label, output):
  """Appends one OUTPUT/profile.csv row per (repeat, rate) run."""
  path = os.path.join(output, "profile.csv")
  for repeat in range(repeats):
    for rate in rates:
      row = {"label": label, "repeat": repeat,
             "load": os.getloadavg()[0],
             **profile_one(config, setup, rate, batch_size)}
      new = not os.path.exists(path)
      with open(path, "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(row))
        if new:
          writer.writeheader()
        writer.writerow(row)
      print(json.dumps(row), flush=True)
  profile_report(path)


def profile_report(path):
  """Markdown: the mean of each profile column per checkout label and rate
  (blank cells, e.g. rows recorded before a column existed, are left out)."""
  with open(path) as f:
    rows = list(csv.DictReader(f))
  columns = ("training_data_cpu", "train_pass_cpu", "validation_pass_cpu",
             "train_cpu", "refit_cpu", "examples_per_second", "auc",
             "calibration", "train_examples")
  print("| checkout | p | runs | " + " | ".join(columns) + " |")
  print("|---|---|---|" + "---|" * len(columns))
  for label in dict.fromkeys(r["label"] for r in rows):
    for rate in sorted({float(r["rate"]) for r in rows}, reverse=True):
      runs = [r for r in rows if r["label"] == label
              and float(r["rate"]) == rate]
      cells = []
      for column in columns:
        values = [float(r[column]) for r in runs if r.get(column)]
        cells.append(f"{np.mean(values):.4g}" if values else "")
      print(f"| {label} | {rate:g} | {len(runs)} | " + " | ".join(cells)
            + " |")


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--data", required=True)
  parser.add_argument("--output", required=True)
  parser.add_argument("--activations", default="relu,smelu")
  parser.add_argument("--seeds", default="1,2,3")
  parser.add_argument("--rates", default="1,0.5,0.25")
  parser.add_argument("--rate-seeds", default=None,
                      help="seeds of the runs below rate 1 (default --seeds)")
  parser.add_argument("--epochs", type=int, default=2)
  parser.add_argument("--batch-size", type=int, default=1024)
  parser.add_argument("--profile", metavar="LABEL", default=None,
                      help="profile the sampled training's CPU instead "
                      "(module doc); LABEL names the checkout")
  parser.add_argument("--repeats", type=int, default=1,
                      help="--profile: runs per rate")
  args = parser.parse_args()
  activations = args.activations.split(",")
  seeds = [int(s) for s in args.seeds.split(",")]
  rates = [float(r) for r in args.rates.split(",")]
  rate_seeds = [int(s) for s in (args.rate_seeds or args.seeds).split(",")]
  config = PipelineConfig.from_fields(dataset="criteo", data=args.data,
                          output=args.output, epochs=args.epochs,
                          batch_size=args.batch_size)
  inputs = study_data.transform_once(config)
  setup = (tft.TFTransformOutput(inputs.transform_graph),
           study_data.split_files(inputs.raw_examples, "train"),
           study_data.split_files(inputs.raw_examples, "eval"))
  if args.profile:
    profile(config, setup, rates, args.repeats, args.batch_size,
            args.profile, args.output)
    return
  # Seed by seed, the activations and the rates alternate (timing ratios
  # from one sitting).
  runs = []
  for seed in seeds:
    runs += [(a, 1.0, seed) for a in activations]
    if seed in rate_seeds:
      runs += [(activations[0], r, seed) for r in rates if r != 1]
  csv_path = os.path.join(args.output, "smelu_sampling.csv")
  pred_dir = os.path.join(args.output, "predictions")
  os.makedirs(pred_dir, exist_ok=True)
  rows = {}
  if os.path.exists(csv_path):
    with open(csv_path) as f:
      rows = {r["run"]: r for r in csv.DictReader(f)}
  for activation, rate, seed in runs:
    key = _key(activation, rate, seed)
    if key in rows:
      continue
    print(f"run {key}", flush=True)
    p, y, row = run_one(config, setup, activation, rate, seed,
                        args.batch_size)
    np.save(os.path.join(pred_dir, key + ".npy"), p)
    np.save(os.path.join(pred_dir, "labels.npy"), y)
    rows[key] = row
    with open(csv_path, "w", newline="") as f:
      writer = csv.DictWriter(f, fieldnames=list(row))
      writer.writeheader()
      writer.writerows(rows.values())
    print(json.dumps(row), flush=True)
  report(rows, activations, seeds, rates, rate_seeds, pred_dir)


def report(rows, activations, seeds, rates, rate_seeds, pred_dir):
  """Markdown tables: per activation (mean, std over seeds, PD over seed
  pairs), per rate."""
  def value(key, name):
    return float(rows[key][name])

  print("| activation | AUC mean | AUC std | log loss | calibration | "
        "PD (seed pairs) | pairs |")
  print("|---|---|---|---|---|---|---|")
  for activation in activations:
    keys = [_key(activation, 1.0, s) for s in seeds]
    aucs = [value(k, "auc") for k in keys]
    pds = [prediction_difference([
        np.load(os.path.join(pred_dir, a + ".npy")),
        np.load(os.path.join(pred_dir, b + ".npy"))])
           for a, b in itertools.combinations(keys, 2)]
    pairs = ", ".join(f"{a.split('-s')[1]}-{b.split('-s')[1]}"
                      for a, b in itertools.combinations(keys, 2))
    print(f"| {activation} | {np.mean(aucs):.4f} | {np.std(aucs):.4f} | "
          f"{np.mean([value(k, 'logloss') for k in keys]):.4f} | "
          f"{np.mean([value(k, 'calibration') for k in keys]):.3f} | "
          f"{np.mean(pds):.4f} ({', '.join(f'{d:.4f}' for d in pds)}) | "
          f"seeds {pairs} |")
  print()
  print("| rate | AUC mean | AUC std | log loss | calibration | train s | "
        "train CPU s | train examples | examples/s |")
  print("|---|---|---|---|---|---|---|---|---|")
  for rate in sorted(rates, reverse=True):
    keys = [_key(activations[0], rate, s) for s in rate_seeds]
    stat = {n: [value(k, n) for k in keys] for n in (
        "auc", "logloss", "calibration", "train_seconds",
        "train_cpu_seconds", "train_examples", "examples_per_second")}
    print(f"| {rate:g} | {np.mean(stat['auc']):.4f} | "
          f"{np.std(stat['auc']):.4f} | {np.mean(stat['logloss']):.4f} | "
          f"{np.mean(stat['calibration']):.3f} | "
          f"{np.mean(stat['train_seconds']):.1f} | "
          f"{np.mean(stat['train_cpu_seconds']):.1f} | "
          f"{np.mean(stat['train_examples']):.0f} | "
          f"{np.mean(stat['examples_per_second']):,.0f} |")


if __name__ == "__main__":
  main()
