"""The compiled Kubeflow spec, run on two days of logs through run-compiled.

The spec is compiled as for a cluster (`--for-local-run` changes only the
paths: tests/kubeflow/test_compile_kubeflow.py checks that) and run the way
the open-source KFP v2 backend runs it: each task's own container command in
a subprocess. Day 1's run (span 1) pushes a model. Day 2's run, under the
same root as a daily recurring run (kubeflow/README.md), ingests span 2,
trains on days 1 and 2 (`--span rolling:2`), warm-starts from day 1's
pushed model with its embedding rows carried over by id, and trains it
into a deliberately worse one, which the Evaluator compares with day 1's
model (LatestPushedModel) on day 2's data and refuses.
"""

import argparse
import glob
import json
import os

import numpy as np
import pytest
import tensorflow as tf
from sklearn.metrics import roc_auc_score
import tensorflow_model_analysis as tfma

from commands.cli import kubeflow_flags
from commands.runs import kfp
from commands.synthetic import generate
from kubeflow import run_compiled
from pipeline import metadata as metadata_lib
from pipeline import pipeline as pipeline_lib
from trainer_module import contract
from trainer_module import features

pytestmark = pytest.mark.slow

ROWS = 6000  # A day.
# The gate's defaults: on ~600 eval rows its checks allow for their noise
# (components.gate_metrics).
COMMON = ["--dataset", "criteo", "--image", "local/cowclip:test",
          "--for-local-run", "--batch-size", "256", "--min-frequency", "3",
          "--embedding-dim", "4", "--hidden-units", "16"]
GOOD = ["--epochs", "2", "--embed-lr", "1e-2"]
# Warm-started from day 1's model, then wrecked: 1 epoch at learning rates
# 100-1000x larger, and served whatever its AUC (not replaced by its
# better logistic regression).
WORSE = ["--epochs", "1", "--embed-lr", "10", "--dense-lr", "1",
         "--serve", "model"]
# Day 2's new span: its data steps run again (kubeflow/compiler.py).
DAY_STEPS = ("RawCtrExampleGen", "StatisticsGen", "StrictExampleValidator",
             pipeline_lib.SPAN_WINDOW_ID, "Transform",
             pipeline_lib.WARM_START_ID)


def compile_spec(path, data, root, extra):
  parser = argparse.ArgumentParser()
  kubeflow_flags.add_compile_parser(parser.add_subparsers())
  args = parser.parse_args(["compile-kubeflow", "--output", str(path),
                            "--data", data, "--pipeline-root",
                            str(root), *COMMON, *extra])
  assert kfp.compile_spec(args) == 0
  return str(path)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """(day 1's run, day 2's run, push destination, the versions and the
  saved models' modification times after day 1)."""
  base = tmp_path_factory.mktemp("kfp")
  logs = base / "logs"
  # A 30% churn of the large fields: day 2 has new ids and drops old ones.
  generate.write_days("criteo", ROWS, 2, 3, str(logs), churn=0.3)
  data = str(logs) + "/day-{SPAN}/"
  root = base / "root"
  good = compile_spec(base / "good.yaml", data, root, GOOD + ["--span", "1"])
  worse = compile_spec(base / "worse.yaml", data, root,
                       WORSE + ["--span", "rolling:2"])
  first = run_compiled.run_spec(good, str(base / "runs"), run_id="first")
  assert metadata(first, "Evaluator", "blessing")["blessed"] == 1, (
      metadata_lib.failed_checks(
          first.tasks["Evaluator"].artifacts["evaluation"]["uri"]))
  serving = root / "serving"
  versions = sorted(os.listdir(serving))
  stamps = [os.stat(serving / v / "saved_model.pb").st_mtime_ns
            for v in versions]
  second = run_compiled.run_spec(worse, str(base / "runs"), run_id="second")
  return first, second, serving, versions, stamps


def metadata(result, task, key):
  return result.tasks[task].artifacts[key]["metadata"]


def test_first_run_evaluates_without_baseline_and_pushes(runs):
  first, _, serving, versions, _ = runs
  assert all(t.state == run_compiled.SUCCEEDED for t in first.tasks.values())
  for resolver in (pipeline_lib.BASELINE_ID, pipeline_lib.WARM_START_ID):
    assert metadata(first, resolver, "model")["pushed_model_found"] == 0
  assert metadata(first, "RawCtrExampleGen", "examples")["span"] == 1
  blessing = metadata(first, "Evaluator", "blessing")
  assert blessing["blessed"] == 1
  assert "baseline_model" not in blessing
  pushed = metadata(first, "Pusher", "pushed_model")
  assert pushed["pushed"] == 1
  assert versions == [pushed["pushed_version"]]
  assert pushed["pushed_destination"] == str(serving / versions[0])


def _eval_examples(result):
  """Raw serialized tf.Examples of ExampleGen's eval split, and labels."""
  examples = result.tasks["RawCtrExampleGen"].artifacts["examples"]["uri"]
  files = glob.glob(os.path.join(examples, "Split-eval", "*"))
  serialized = [r.numpy() for r in tf.data.TFRecordDataset(
      files, compression_type="GZIP")]
  label = features.get_spec("criteo").label
  labels = [tf.train.Example.FromString(s).features.feature[label]
            .int64_list.value[0] for s in serialized]
  return serialized, np.array(labels)


def _overall(evaluation_uri, metric):
  """The candidate's `metric` on the overall slice."""
  for metrics in tfma.load_metrics(evaluation_uri):
    if not metrics.slice_key.single_slice_keys:
      for entry in metrics.metric_keys_and_values:
        if (entry.key.name == metric and not entry.key.is_diff and
            entry.key.model_name in ("", "candidate")):
          return entry.value.double_value.value
  raise AssertionError(f"{metric} not in {evaluation_uri}")


def test_pushed_model_scores_raw_examples(runs):
  first, _, serving, versions, _ = runs
  model = tf.saved_model.load(str(serving / versions[0]))
  serialized, labels = _eval_examples(first)
  scores = model.signatures["serving_default"](
      examples=tf.constant(serialized))["probability"].numpy().ravel()
  assert scores.shape == labels.shape and len(labels) > 300
  assert np.all((scores > 0) & (scores < 1))
  # The Evaluator scored the same examples through the same signature.
  evaluation = first.tasks["Evaluator"].artifacts["evaluation"]["uri"]
  assert roc_auc_score(labels, scores) == pytest.approx(
      _overall(evaluation, "auc"), abs=0.01)


def test_second_day_warm_starts_from_the_first_days_pushed_model(runs):
  _, second, serving, versions, _ = runs
  warm = metadata(second, pipeline_lib.WARM_START_ID, "model")
  assert warm["pushed_model_found"] == 1
  assert warm["pushed_version"] == versions[0]
  model = second.tasks["Trainer"].artifacts["model"]["uri"]
  with open(os.path.join(model, "Format-Serving",
                         contract.TRAINING_RECORD)) as f:
    record = json.load(f)["warm_start"]
  assert record["from"] == str(serving / versions[0])
  assert record["carried_ids"] > 0 and record["new_ids"] > 0
  # Day 1's ids are still in the window's vocabulary (rolling:2): none
  # dropped. One day's window drops them: tests/pipeline/test_daily.py.
  assert record["dropped_ids"] == 0


def test_second_day_trains_on_both_days(runs):
  first, second, _, _, _ = runs
  assert metadata(first, pipeline_lib.SPAN_WINDOW_ID,
                  "window")["window_spans"] == "1"
  window = metadata(second, pipeline_lib.SPAN_WINDOW_ID, "window")
  assert (window["window_spans"], window["missing_spans"]) == ("1,2", "")
  model = second.tasks["Trainer"].artifacts["model"]["uri"]
  with open(os.path.join(model, "Format-Serving",
                         contract.TRAINING_RECORD)) as f:
    record = json.load(f)
  assert record["train_examples"] + record["validation_examples"] == sum(
      metadata(run, "RawCtrExampleGen", "examples")["train_rows"]
      for run in (first, second))


def test_second_day_is_gated_against_the_first_days_model_on_its_data(runs):
  _, second, _, versions, _ = runs
  baseline = metadata(second, pipeline_lib.BASELINE_ID, "model")
  assert baseline["pushed_model_found"] == 1
  assert baseline["pushed_version"] == versions[0]
  assert metadata(second, "RawCtrExampleGen", "examples")["span"] == 2
  # KFP-style caching: the schema is reused; day 2's data steps, the
  # Trainer and the baseline run.
  assert second.tasks["ImportSchemaGen"].state == run_compiled.CACHED
  for name in DAY_STEPS + ("Trainer", pipeline_lib.BASELINE_ID):
    assert second.tasks[name].state == run_compiled.SUCCEEDED, name
  blessing = metadata(second, "Evaluator", "blessing")
  assert blessing["blessed"] == 0
  assert blessing["baseline_model"] == (
      second.tasks[pipeline_lib.BASELINE_ID].artifacts["model"]["uri"])
  checks = metadata_lib.failed_checks(
      second.tasks["Evaluator"].artifacts["evaluation"]["uri"])
  assert any("vs the last blessed model" in check for check in checks), checks


def test_the_worse_model_is_not_pushed(runs):
  _, second, serving, versions, stamps = runs
  assert second.tasks["Pusher"].state == run_compiled.SUCCEEDED
  assert metadata(second, "Pusher", "pushed_model")["pushed"] == 0
  assert sorted(os.listdir(serving)) == versions
  assert [os.stat(serving / v / "saved_model.pb").st_mtime_ns
          for v in versions] == stamps
