"""Our logistic-regression baseline against scikit-learn's, on the same rows.

From the repository root, with .venv's Python:

  python docs/scripts/lr_baseline_ab.py --dataset criteo --data FILE --output DIR \
      [--dense buckets|log1p] [--pipeline-arg=--eval-fraction=0.5 ...]

Runs the pipeline (`python -m pipeline run --dataset D --data FILE --output
DIR` and the --pipeline-arg's) unless DIR already holds an evaluated run,
then reads the train and eval splits back from that run's RawCtrExampleGen
output: the ExampleGen's hash split of the lines, so the eval rows are the
ones the Evaluator measured (checked by their count). It fits scikit-learn's
LogisticRegressionCV on the train split and prints a row of
docs/lr_baseline.md: rows, eval rows, scikit-learn's eval AUC, the run's
logistic-regression baseline AUC and model AUC (the Evaluator's overall
slice), and the gap (scikit-learn minus ours); before it, the C our
baseline chose, its grid's epochs and its training time (training.json).

The scikit-learn features, the usual strong linear baseline on these logs:
every field is categorical; an integer value x > 2 of a Criteo count
feature is the bucket floor(log(x)^2), any other (x <= 2) its own bucket;
Avazu's `hour` is its hour of day and weekday, as our Transform does; a
missing field is the value '<missing>'; a value seen fewer than twice in the
train split is its field's '<rare>' value. Each value is a one-hot column.
`--dense log1p` gives the count features our LR's treatment instead: one
numeric column each, log1p(max(x, 0)) scaled to [0, 1] by the train split's
min and max, 0 when missing (what is left of the gap is then the fit).
C is chosen from 7 values, 1e-3 to 1, by 5-fold cross-validated AUC on
the train split (StratifiedKFold, no shuffle), with liblinear (L2); or,
with --c, given (one fit, for millions of rows).
"""

import argparse
import collections
import datetime
import glob
import math
import os
import subprocess
import sys
import warnings

sys.path.insert(0, os.getcwd())

# Before TensorFlow: a library it loads would ask the pipeline run for
# legacy Keras otherwise.
from trainer_module import keras_version  # noqa: E402

keras_version.pin_keras3()

import numpy as np  # noqa: E402
from scipy import sparse  # noqa: E402
from sklearn import exceptions  # noqa: E402
from sklearn import linear_model  # noqa: E402
from sklearn import metrics  # noqa: E402
import tensorflow as tf  # noqa: E402

from commands.report import reading as report_reading  # noqa: E402
from pipeline import metadata  # noqa: E402
from trainer_module import features  # noqa: E402

CS = np.logspace(-3, 0, 7)
FOLDS = 5
MIN_COUNT = 2
MISSING = "<missing>"
RARE = "<rare>"


def read_split(examples_uri: str, split: str, spec: features.DatasetSpec):
  """(labels, rows of {field: raw value}) of one ExampleGen split."""
  files = sorted(glob.glob(os.path.join(examples_uri, f"Split-{split}",
                                        "*.gz")))
  labels, rows = [], []
  for record in tf.data.TFRecordDataset(files, compression_type="GZIP"):
    feature = tf.train.Example.FromString(record.numpy()).features.feature
    row = {}
    for name, value in feature.items():
      kind = value.WhichOneof("kind")
      row[name] = (value.int64_list.value[0] if kind == "int64_list" else
                   value.bytes_list.value[0].decode())
    labels.append(row.pop(spec.label))
    rows.append(row)
  return np.asarray(labels), rows


def tokens(row, spec: features.DatasetSpec, dense: str):
  """The row's categorical value per field (see the module docstring)."""
  result = {}
  for name in spec.raw_features:
    if name == spec.label or (dense == "log1p" and name in spec.dense):
      continue
    value = row.get(name)
    if value is None:
      result[name] = MISSING
    elif name == spec.time_field:
      day = datetime.date(2000 + value // 1000000, value // 10000 % 100,
                          value // 100 % 100)
      result[features.HOUR_OF_DAY] = str(value % 100)
      result[features.WEEKDAY] = str(day.weekday())
    elif name in spec.dense and value > 2:
      result[name] = f"log2:{math.floor(math.log(value) ** 2)}"
    else:
      result[name] = str(value)
  return result


def log1p_columns(train_rows, eval_rows, spec: features.DatasetSpec):
  """The count features as our Transform gives them, for both splits."""
  def counts(rows):
    return np.log1p(np.maximum(
        [[row.get(name, 0) for name in spec.dense] for row in rows], 0))

  train, evaluation = counts(train_rows), counts(eval_rows)
  low, high = train.min(axis=0), train.max(axis=0)
  scale = np.where(high > low, high - low, 1)
  return [sparse.csr_matrix((m - low) / scale) for m in (train, evaluation)]


def features_of(train_rows, eval_rows, spec: features.DatasetSpec,
                dense: str):
  """Sparse feature matrices of both splits, over the train vocabulary."""
  train_tokens = [tokens(r, spec, dense) for r in train_rows]
  counts = collections.Counter((f, v) for t in train_tokens
                               for f, v in t.items())
  columns = {}

  def matrix(rows_tokens):
    indices, indptr = [], [0]
    for t in rows_tokens:
      for field, value in t.items():
        key = (field, value) if counts[field, value] >= MIN_COUNT else (
            field, RARE)
        indices.append(columns.setdefault(key, len(columns)))
      indptr.append(len(indices))
    return indices, indptr

  train = matrix(train_tokens)
  evaluation = matrix(tokens(r, spec, dense) for r in eval_rows)
  one_hot = [sparse.csr_matrix((np.ones(len(i)), i, p),
                               shape=(len(p) - 1, len(columns)))
             for i, p in (train, evaluation)]
  if dense == "buckets" or not spec.dense:
    return one_hot
  return [sparse.hstack([m, c], format="csr") for m, c in zip(
      one_hot, log1p_columns(train_rows, eval_rows, spec))]


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--dataset", required=True, choices=features.DATASETS)
  parser.add_argument("--data", required=True)
  parser.add_argument("--output", required=True)
  parser.add_argument("--dense", choices=("buckets", "log1p"),
                      default="buckets")
  parser.add_argument("--pipeline-arg", action="append", default=[])
  parser.add_argument("--c", type=float, help="fit one LogisticRegression "
                      "at this C instead of the 5-fold search (the search "
                      "is ~35 fits: too long at millions of rows)")
  args = parser.parse_args()
  spec = features.get_spec(args.dataset)
  metadata_path = os.path.join(args.output, "metadata.sqlite")
  store = (metadata.open_store(metadata_path)
           if os.path.exists(metadata_path) else None)
  if not store or not metadata.latest_artifact(store, "ModelEvaluation"):
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", "run", "--dataset", args.dataset,
         "--data", args.data, "--output", args.output, *args.pipeline_arg],
        check=False)
    if done.returncode not in (0, 3):  # 3: evaluated, not pushed.
      sys.exit(f"the pipeline run failed (exit {done.returncode})")
    store = metadata.open_store(metadata_path)
  examples = metadata.latest_artifact(store, "Examples")
  train_labels, train_rows = read_split(examples.uri, "train", spec)
  eval_labels, eval_rows = read_split(examples.uri, "eval", spec)
  run = report_reading.read_run(args.output)
  overall = run.evaluation.overall
  if overall["example_count"] != len(eval_rows):
    sys.exit(f"the Evaluator measured {overall['example_count']:.0f} "
             f"examples, the eval split has {len(eval_rows)}")
  train, evaluation = features_of(train_rows, eval_rows, spec, args.dense)
  model = (linear_model.LogisticRegression(
      C=args.c, solver="liblinear", max_iter=1000) if args.c else
           linear_model.LogisticRegressionCV(
               Cs=CS, cv=FOLDS, scoring="roc_auc", solver="liblinear",
               max_iter=1000))
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always", exceptions.ConvergenceWarning)
    model.fit(train, train_labels)
  unconverged = sum(issubclass(w.category, exceptions.ConvergenceWarning)
                    for w in caught)
  sklearn_auc = metrics.roc_auc_score(
      eval_labels, model.decision_function(evaluation))
  ours = overall[report_reading.LR_PREFIX + "auc"]
  lr = (run.training or {}).get("logistic_regression", {})
  if "c" in lr:
    print(f"our LR: C {lr['c']:g} (l2 {lr['l2']:.3g}) of "
          f"{[g['c'] for g in lr['grid']]}, epochs "
          f"{[g['epochs_run'] for g in lr['grid']]}, trained in "
          f"{lr['seconds']:.1f} s")
  chosen = args.c or model.C_[0]
  print(f"columns {train.shape[1]:,}, C {chosen:g}"
        f"{' (given)' if args.c else ''}"
        f"{' (an end of the range)' if chosen in (CS[0], CS[-1]) else ''}"
        f", {unconverged} unconverged fits; served: "
        f"{(run.training or {}).get('served', {}).get('served', 'model')}")
  print("| rows | eval rows | scikit-learn AUC | our LR AUC | our model AUC "
        "| gap (sklearn - our LR) |")
  print(f"| {len(train_rows) + len(eval_rows):,} | {len(eval_rows):,} | "
        f"{sklearn_auc:.4f} | {ours:.4f} | {overall['auc']:.4f} | "
        f"{sklearn_auc - ours:+.4f} |")


if __name__ == "__main__":
  main()
