"""Retraining every day: two days of generated logs as TFX spans, the
second day's model warm-started from the first day's pushed model (rows
carried over by id) and gated against it on the second day's eval split,
then trained again on both days (--span rolling:2)."""

import json
import os

import pytest
from ml_metadata.proto import metadata_store_pb2
from tfx.components.evaluator import constants as evaluator_constants

from commands.cli import main as cli
from commands.report import reading as report_reading
from commands.synthetic import generate
from components import span_window
from pipeline import metadata
from pipeline import pipeline as pipeline_lib
from pipeline import progress
from trainer_module import contract
from trainer_module import warm_start

pytestmark = pytest.mark.slow

ROWS = 2500
# Day 1 must push for day 2 to warm-start from it. One epoch on 2,265 rows
# barely trains the model: it may lose to the logistic-regression baseline
# (AUC 0.49-0.55 against 0.61, measured), whose gate check is not what this
# test is about.
DAY_1 = ("--span", "1", "--no-lr-check")


def _run(logs, output, *extra):
  return cli.main(["run", "--dataset", "criteo", "--data",
                   str(logs) + "/day-{SPAN}/", "--output", str(output),
                   "--epochs", "1", "--batch-size", "256", "--min-frequency",
                   "2", "--embed-lr", "1e-2", "--embedding-dim", "4",
                   "--hidden-units", "16", "--serve", "model", *extra])


def _examples_spans(store):
  return sorted(a.custom_properties["span"].int_value
                for a in store.get_artifacts_by_type("Examples")
                if "rows_read" in a.custom_properties)


def test_the_second_day_warm_starts_from_the_first_and_is_gated_on_its_data(
    tmp_path, capsys):
  logs = tmp_path / "logs"
  generate.write_days("criteo", ROWS, 2, 5, str(logs), churn=0.3)
  output = tmp_path / "out"
  # Day 1 (span 1), from scratch: nothing is served yet.
  assert _run(logs, output, *DAY_1) == 0
  first_out = capsys.readouterr().out
  assert "span 1" in first_out and "warm start:" not in first_out
  (day1,) = os.listdir(output / "serving")
  assert warm_start.has_state(str(output / "serving" / day1))

  # Day 2 (the latest span): warm-started from day 1's pushed model.
  code = _run(logs, output)
  out = capsys.readouterr().out
  assert code in (0, progress.EXIT_NOT_PUSHED), out  # Pushed or refused: the gate decided.
  store = metadata.open_store(str(output / "metadata.sqlite"))
  assert _examples_spans(store) == [1, 2]
  assert "ingested:   " in out and ", span 2" in out
  (model,) = [a for a in store.get_artifacts_by_type("Model")
              if a.id == metadata.latest_artifact(store, "Model").id]
  with open(os.path.join(model.uri, "Format-Serving",
                         contract.TRAINING_RECORD)) as f:
    record = json.load(f)
  warm = record["warm_start"]
  assert warm["from"] == str(output / "serving" / day1)
  # A 30% churn of the large fields: ids carried, new and dropped.
  assert warm["carried_ids"] > 0 and warm["new_ids"] > 0
  assert warm["dropped_ids"] > 0
  assert (f"warm start: from {output / 'serving' / day1}: the rows of "
          f"{warm['carried_ids']:,} ids carried over") in out
  # The gate compared with day 1's model, on day 2's eval rows.
  blessing = metadata.latest_artifact(store, "ModelBlessing")
  baseline = blessing.custom_properties[
      evaluator_constants.ARTIFACT_PROPERTY_BASELINE_MODEL_URI_KEY
  ].string_value
  with open(os.path.join(baseline, "Format-Serving",
                         contract.SERVED_FROM)) as f:
    assert f.read() == str(output / "serving" / day1)
  assert "vs served:" in out and "in service: AUC " in out
  evaluation = metadata.latest_artifact(store, "ModelEvaluation")
  (day2_examples,) = [a for a in store.get_artifacts_by_type("Examples")
                      if a.custom_properties["span"].int_value == 2 and
                      "rows_read" in a.custom_properties]
  inputs = [e for e in store.get_events_by_artifact_ids([day2_examples.id])
            if e.type == metadata_store_pb2.Event.INPUT]
  evaluator_runs = {e.execution_id for e in store.get_events_by_artifact_ids(
      [evaluation.id]) if e.type == metadata_store_pb2.Event.OUTPUT}
  assert evaluator_runs <= {e.execution_id for e in inputs}

  # Day 2 again, on days 1 and 2 (day 1 ingested once, by its own run).
  # The warm start is keyed by day 2's examples: still day 1's model, not
  # what day 2 itself pushed.
  code = _run(logs, output, "--span", "rolling:2")
  out = capsys.readouterr().out
  assert code in (0, progress.EXIT_NOT_PUSHED), out
  assert _examples_spans(store) == [1, 2]  # Nothing ingested again.
  assert ", span 2; trained on spans 1,2 (a window of 2 days)" in out
  rolling = metadata.latest_artifact(store, "Model")
  assert rolling.id != model.id
  with open(os.path.join(rolling.uri, "Format-Serving",
                         contract.TRAINING_RECORD)) as f:
    record = json.load(f)
  assert record["warm_start"]["from"] == str(output / "serving" / day1)
  assert pipeline_lib.WARM_START_ID not in pipeline_lib.UNCACHED_NODES
  # Day 1's ids are still in the window's vocabulary: none dropped.
  assert record["warm_start"]["dropped_ids"] == 0
  assert record["warm_start"]["carried_ids"] > warm["carried_ids"]
  # Transform and the Trainer read both days' train splits.
  assert record["train_examples"] + record["validation_examples"] == sum(
      a.custom_properties["train_rows"].int_value
      for a in store.get_artifacts_by_type("Examples")
      if "rows_read" in a.custom_properties)
  transform_runs = {e.execution_id for e in store.get_events_by_artifact_ids(
      [metadata.latest_artifact(store, "TransformGraph").id])
                    if e.type == metadata_store_pb2.Event.OUTPUT}
  (window,) = [a for a in store.get_artifacts_by_id([
      e.artifact_id for e in store.get_events_by_execution_ids(transform_runs)
      if e.type == metadata_store_pb2.Event.INPUT])
               if span_window.WINDOW_SPANS_PROPERTY in a.custom_properties]
  assert window.custom_properties[
      span_window.WINDOW_SPANS_PROPERTY].string_value == "1,2"

  # Day 1 again (a backfill): its cached run, and the console and the
  # report say day 1 and its model, not the newer day 2's.
  assert _run(logs, output, *DAY_1) in (0, progress.EXIT_NOT_PUSHED)
  assert ", span 1" in capsys.readouterr().out
  backfill = report_reading.read_run(str(output))
  assert backfill.outcome.model not in (None, model.uri)
  assert "warm_start" not in backfill.training
