"""Two study runs compared on the same eval rows, paired (issue #59).

Each run's served model (the study exports it to DIR/runs/<study>/<run>/
serving) scores every row of the eval split the study evaluated it on; the
two AUCs are compared by DeLong and the log losses by the rows' paired
differences, with the gate's statistics (trainer_module.paired_statistics,
the ones components.gate_metrics computes inside TFMA). A paired interval
holds the eval rows' noise only: whether a difference is a rule's or a
seed's is for the seed-to-seed spread (docs/study.md) to say.

The exports are not in git, so both runs must have trained on this
machine's DIR; each run's eval predictions are kept beside its export
(eval_predictions.npz) for its next pair. The row goes to
RESULTS/pairs.csv, which is committed with the study's rows.

  PYTHONPATH=. .venv/bin/python docs/scripts/paired_runs.py DATASET RAW DIR RESULTS RUN_A RUN_B

DATASET, RAW and DIR as the study's --dataset, --data and --output;
RESULTS its --results; RUN_A minus RUN_B is reported.
"""
import csv
import datetime
import os
import sys

import numpy as np
import tensorflow as tf
import tensorflow_transform as tft

from commands.cli import flags
from commands.cli import parser as parser_lib
from commands.experiments import study_data
from commands.experiments import study_provenance
from commands.experiments import study_results
from trainer_module import contract
from trainer_module import paired_statistics

BATCH = 8192
COLUMNS = ("run_a", "run_b", "eval_rows", "auc_a", "auc_b",
           "auc_difference", "auc_difference_low", "auc_difference_high",
           "logloss_difference", "logloss_difference_low",
           "logloss_difference_high", "data_fingerprint", "commit", "date")


def eval_predictions(serving_dir: str, eval_pattern: str, label: str):
  """(labels, predicted click rates) of every eval row, in file order;
  kept beside the export after the first pass."""
  kept = os.path.join(os.path.dirname(serving_dir), "eval_predictions.npz")
  if os.path.exists(kept):
    with np.load(kept) as saved:
      return saved["labels"], saved["predictions"]
  serve = tf.saved_model.load(serving_dir).signatures["serving_default"]
  labels, predictions = [], []
  records = tf.data.TFRecordDataset(sorted(tf.io.gfile.glob(eval_pattern)),
                                    compression_type="GZIP").batch(BATCH)
  for batch in records:
    parsed = tf.io.parse_example(
        batch, {label: tf.io.FixedLenFeature([1], tf.int64)})
    labels.append(parsed[label].numpy().reshape(-1))
    predictions.append(serve(examples=batch)[
        contract.PREDICTION_KEY].numpy().reshape(-1))
  labels, predictions = np.concatenate(labels), np.concatenate(predictions)
  np.savez(kept, labels=labels, predictions=predictions.astype(np.float32))
  return labels, predictions


def main(argv) -> int:
  dataset, raw, directory, results, run_a, run_b = argv
  args = parser_lib.build_parser().parse_args(
      ["study", "--dataset", dataset, "--data", raw, "--output", directory,
       "--results", results])
  config = flags.config_from_args(args)
  inputs = study_data.transform_artifacts(config)
  fingerprint = study_provenance.data_fingerprint(
      tft.TFTransformOutput(inputs.transform_graph))
  rows = {r["run"]: r for r in study_results.read_rows(
      os.path.join(results, "study.csv"))}
  for run in (run_a, run_b):
    if run not in rows:
      raise SystemExit(f"error: no run {run} in {results}/study.csv")
    if rows[run]["data_fingerprint"] != fingerprint:
      raise SystemExit(f"error: {run} was evaluated on other data than "
                       f"{directory}'s ({rows[run]['data_fingerprint']} "
                       f"against {fingerprint})")
  eval_pattern = study_data.split_pattern(inputs.raw_examples, "eval")
  scored = []
  for run in (run_a, run_b):
    run_dir = os.path.join(directory, "runs", os.path.basename(
        os.path.normpath(results)), run)
    serving = os.path.join(run_dir, "serving")
    if not os.path.isdir(serving):
      raise SystemExit(f"error: {serving} does not exist: {run} did not "
                       "train on this machine")
    scored.append(eval_predictions(serving, eval_pattern, config.spec.label))
  (labels, first), (labels_b, second) = scored
  if not np.array_equal(labels, labels_b):
    raise SystemExit("error: the two runs' eval rows differ")
  aucs, auc = paired_statistics.paired_aucs(labels, first, second)
  logloss = paired_statistics.log_loss_difference(labels, first, second)
  row = {"run_a": run_a, "run_b": run_b, "eval_rows": len(labels),
         "auc_a": aucs[0], "auc_b": aucs[1], "auc_difference": auc.value,
         "auc_difference_low": auc.interval()[0],
         "auc_difference_high": auc.interval()[1],
         "logloss_difference": logloss.value,
         "logloss_difference_low": logloss.interval()[0],
         "logloss_difference_high": logloss.interval()[1],
         "data_fingerprint": fingerprint,
         "commit": study_provenance.code_commit(),
         "date": datetime.date.today().isoformat()}
  path = os.path.join(results, "pairs.csv")
  new = not os.path.exists(path)
  with open(path, "a", newline="") as f:
    writer = csv.DictWriter(f, COLUMNS)
    if new:
      writer.writeheader()
    writer.writerow(row)
  print(row)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
