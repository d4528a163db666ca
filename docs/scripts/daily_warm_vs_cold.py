"""Each day of generated daily logs trained both ways, in one DIR:
from scratch (measured only: its gate is set so that it never pushes)
and warm-started from the model served (pushed when the gate passes, the
next day's start). What docs/daily.md's table reports.

After the runs, each day's eval rows are scored again by both of the
day's models and split by whether an id is new that day (in the day's
vocabulary, not in the day before's): their share and the AUC of each
part (the new_id columns; computed for the rows that lack them, from the
models and data in ML Metadata).

  PYTHONPATH=. .venv/bin/python docs/scripts/daily_warm_vs_cold.py ROOT \
      [--days 4] [--rows 300000] [--epochs 4] [--results FILE.csv] \
      [--window K]

ROOT gets the logs (generate --days, seed 1) and the pipeline DIR; each
finished run appends its row to --results (default
docs/daily_warm_vs_cold.csv), so a stopped script resumes after the rows
it has. Day 1 trains once, from scratch.
"""

import argparse
import csv
import glob
import os
import time

from trainer_module import keras_version

keras_version.pin_keras3()  # Before TensorFlow Transform asks for tf_keras.

# pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np
from ml_metadata.proto import metadata_store_pb2
from sklearn.metrics import roc_auc_score
import tensorflow as tf
import tensorflow_transform as tft

from commands.cli import main as cli
from commands.report import reading as report_reading
from commands.synthetic import generate
from components import span_window
from pipeline import metadata
from pipeline import progress
from trainer_module import features
from trainer_module import warm_start
# pylint: enable=g-import-not-at-top,wrong-import-position

COLUMNS = ("day", "start", "auc", "logloss", "calibration", "epochs_run",
           "best_epoch", "trainer_seconds", "validation_auc_by_epoch",
           "carried_ids", "new_ids", "dropped_ids", "wall_seconds",
           "new_id_eval_share", "auc_new_id_rows", "auc_other_rows")
NEW_ID_COLUMNS = COLUMNS[-3:]


def _row(day, start, output, wall):
  run = report_reading.read_run(output)
  overall = run.evaluation.overall
  training = run.training or {}
  trainer = next(c for c in run.components if c.node == "Trainer")
  warm = training.get("warm_start", {})
  return {"day": day, "start": start, "auc": overall["auc"],
          "logloss": overall["binary_crossentropy"],
          "calibration": overall["calibration"],
          "epochs_run": training["epochs_run"],
          "best_epoch": training["best_epoch"],
          "trainer_seconds": trainer.seconds,
          "validation_auc_by_epoch": " ".join(
              f"{v:.5f}" for v in training["history"].get("val_auc", [])),
          "carried_ids": warm.get("carried_ids", ""),
          "new_ids": warm.get("new_ids", ""),
          "dropped_ids": warm.get("dropped_ids", ""), "wall_seconds": wall}


def _trainer_runs(store):
  """{(day, start): (Examples URI, TransformGraph URI, Model URI)} of the
  completed Trainer executions (start: 'warm' if its model was
  warm-started, else 'scratch'; '-Kdays' after it when it trained on a
  window of K days). The Examples are the day's: the last of the Trainer's
  window of spans."""
  types = {t.id: t.name for t in store.get_execution_types()}
  runs = {}
  for execution in store.get_executions():
    if (not types[execution.type_id].endswith("Trainer") or
        execution.last_known_state !=
        metadata_store_pb2.Execution.COMPLETE):
      continue
    events = store.get_events_by_execution_ids([execution.id])
    by_key = {}
    for event in events:
      (artifact,) = store.get_artifacts_by_id([event.artifact_id])
      by_key[event.path.steps[0].key] = artifact
    record = report_reading.read_training_record(by_key["model"].uri) or {}
    examples = by_key["examples"].custom_properties
    day = examples["span"].int_value
    days = (examples[span_window.WINDOW_DAYS_PROPERTY].int_value
            if span_window.WINDOW_DAYS_PROPERTY in examples else 1)
    start = "warm" if "warm_start" in record else "scratch"
    runs[(day, start + (f"-{days}days" if days > 1 else ""))] = (
        span_window.day_uris(by_key["examples"].uri)[-1],
        by_key["transform_graph"].uri,
        by_key["model"].uri)
  return runs


def _eval_rows(examples_uri, transform_uri, fields):
  """(serialized eval examples, labels, {field: tokens of their ids}):
  the ids as the day's Transform maps them, tokens from its vocabulary
  (None for an id outside it)."""
  files = sorted(glob.glob(os.path.join(examples_uri, "Split-eval", "*")))
  serialized = [r.numpy() for r in tf.data.TFRecordDataset(
      files, compression_type="GZIP")]
  output = tft.TFTransformOutput(transform_uri)
  raw = tf.io.parse_example(serialized, output.raw_feature_spec())
  transformed = output.transform_raw_features(raw, drop_unused_features=True)
  vocabularies = warm_start.transform_tokens(output, fields)
  tokens = {}
  for field in fields:
    vocabulary = vocabularies[field]
    tokens[field] = [vocabulary[i] if i < len(vocabulary) else None
                     for i in transformed[field].numpy().ravel()]
  label = features.get_spec("criteo").label
  return (serialized, transformed[label].numpy().ravel(), tokens)


def new_id_metrics(output):
  """{(day, start): {NEW_ID_COLUMNS}} of every day after the first: the
  share of the day's eval rows with an id new that day, and the run's
  model's AUC on those rows and on the others."""
  store = metadata.open_store(os.path.join(output, "metadata.sqlite"))
  runs = _trainer_runs(store)
  fields = features.get_spec("criteo").categorical_features
  results = {}
  for day in sorted({d for d, _ in runs if d > 1}):
    # New ids: in the day's vocabulary, not in the day before's (each of
    # one day: the scratch runs').
    yesterday = runs[(day - 1, "scratch")]
    known = {field: set(tokens) for field, tokens in warm_start.transform_tokens(
        tft.TFTransformOutput(yesterday[1]), fields).items()}
    examples_uri, transform_uri, _ = runs[(day, "scratch")]
    serialized, labels, tokens = _eval_rows(examples_uri, transform_uri,
                                            fields)
    new = np.zeros(len(labels), bool)
    for field in fields:
      new |= np.array([t is not None and t not in known[field]
                       for t in tokens[field]])
    for (d, start), (_, _, model_uri) in runs.items():
      if d != day:
        continue
      model = tf.saved_model.load(os.path.join(model_uri, "Format-Serving"))
      scores = np.concatenate([
          model.signatures["serving_default"](examples=tf.constant(
              serialized[i:i + 4096]))["probability"].numpy().ravel()
          for i in range(0, len(serialized), 4096)])
      results[(day, start)] = {
          "new_id_eval_share": new.mean(),
          "auc_new_id_rows": roc_auc_score(labels[new], scores[new]),
          "auc_other_rows": roc_auc_score(labels[~new], scores[~new])}
  return results


def _read_rows(results):
  if not os.path.exists(results):
    return []
  with open(results, newline="") as f:
    return list(csv.DictReader(f))


def _write_rows(results, rows):
  """All rows under today's COLUMNS (a file of fewer columns gains them)."""
  with open(results, "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=COLUMNS, restval="")
    writer.writeheader()
    writer.writerows(rows)


def add_new_id_metrics(output, results):
  """Fills the new_id columns of the rows of `results` that lack them."""
  rows = _read_rows(results)
  missing = [r for r in rows if int(r["day"]) > 1 and
             not r.get("new_id_eval_share")]
  if missing:
    metrics = new_id_metrics(output)
    for row in missing:
      row.update(metrics.get((int(row["day"]), row["start"]), {}))
    _write_rows(results, rows)


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("root")
  parser.add_argument("--days", type=int, default=4)
  parser.add_argument("--rows", type=int, default=300_000)
  parser.add_argument("--epochs", type=int, default=4)
  parser.add_argument("--results", default="docs/daily_warm_vs_cold.csv")
  parser.add_argument("--window", type=int, default=1,
                      help="also train each day after the first, warm-"
                      "started, on it and the days before it, up to this "
                      "many (start 'warm-Kdays', --span A-B); never pushed")
  args = parser.parse_args()
  logs = os.path.join(args.root, "logs")
  output = os.path.join(args.root, "pipeline")
  generate.write_days("criteo", args.rows, args.days, 1, logs)
  rows = _read_rows(args.results)
  done = {(int(r["day"]), r["start"]) for r in rows}
  common = ["run", "--dataset", "criteo", "--data",
            logs + "/day-{SPAN}/", "--output", output, "--epochs",
            str(args.epochs), "--seed", "1"]
  for day in range(1, args.days + 1):
    # From scratch first: it never pushes, so the warm run of the same day
    # starts from the model the day before pushed.
    # The window's run does not push either; the warm run pushes last.
    never_pushed = ["--min-auc", "1.0"] if day > 1 else []
    starts = [("scratch", str(day), ["--no-warm-start"] + never_pushed)]
    if day > 1 and args.window > 1:
      first = max(1, day - args.window + 1)
      starts.append((f"warm-{day - first + 1}days", f"{first}-{day}",
                     never_pushed))
    if day > 1:
      starts.append(("warm", str(day), []))
    for start, span, extra in starts:
      if (day, start) in done:
        continue
      began = time.perf_counter()
      code = cli.main(common + ["--span", span] + extra)
      if code not in (0, progress.EXIT_NOT_PUSHED):
        raise SystemExit(f"day {day} ({start}) failed: exit {code}")
      rows.append(_row(day, start, output, time.perf_counter() - began))
      _write_rows(args.results, rows)
      print(rows[-1], flush=True)
  add_new_id_metrics(output, args.results)


if __name__ == "__main__":
  main()
