"""The whole pipeline, from raw generated files to a pushed model, via the CLI.

Each dataset runs once (module-scoped fixture: Transform alone costs a couple
of minutes here) and several tests assert on what that run produced: the
executions in ML Metadata, the pushed SavedModel scoring raw examples, the
cache on re-run.
"""

import glob
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request

import numpy as np
import pytest
import tensorflow as tf
from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2
from sklearn.metrics import roc_auc_score
from tfx import v1 as tfx

from commands.cli import console
from commands.cli import main as cli
from commands.report import reading as report_reading
from commands.report import text as report_text
from commands.synthetic import generate
from components import gate_metrics
from conftest import run_command
from pipeline import metadata
from pipeline import progress
from pipeline.code_fingerprint import REPO_ROOT
import run_parity
from trainer_module import contract
from trainer_module import features

pytestmark = pytest.mark.slow

BAD_ROWS = 3
COMPONENTS = ("RawCtrExampleGen", "StatisticsGen", "ImportSchemaGen",
              "StrictExampleValidator", "Transform", "Trainer", "Evaluator",
              "Pusher")


def run_arguments(dataset, data, output, *extra):
  # 20k rows are ~500 steps' worth of data at the paper's embedding lr
  # (1e-4): too few to move the embeddings; 1e-2 learns in a few steps.
  return ["run", "--dataset", dataset, "--data", str(data),
          "--output", str(output), "--batch-size", "512",
          "--epochs", "2", "--min-frequency", "3",
          "--embed-lr", "1e-2",
          # The gate's own margins: its checks allow for the noise of the
          # ~2k eval rows (components.gate_metrics).
          # Criteo's test.txt and readme.txt beside train.txt.gz.
          "--skip-foreign-files", *extra]


def run_cli(dataset, data, output, *extra):
  """A re-run of `finished_run`'s pipeline, with its options and `extra`."""
  return cli.main(run_arguments(dataset, data, output,
                                *PRODUCTION_PRACTICE[dataset], *extra))


# The Avazu run is also the production-practice run (issue 16): two seeded
# replicas served as their mean, SmeLU, non-clicks down-sampled to half, and
# a PD bound every run passes (PD is at most 2). The Criteo run has the Factory Floor's
# accuracy techniques (issue 35): Shampoo for the dense layers, the rank
# loss, and two replicas distilled into the one model served.
PRODUCTION_PRACTICE = {
    "criteo": ("--dense-optimizer", "shampoo", "--rank-loss-weight", "0.2",
               "--replicas", "2", "--distill"),
    "avazu": ("--replicas", "2", "--max-pd", "1.9", "--activation", "smelu",
              "--negative-sampling-rate", "0.5"),
}


# The raw files as they ship, gzipped: Avazu's train.gz; Criteo's train.txt
# (gzipped here) in the directory dac.tar.gz extracts to, beside test.txt
# (no label column) and readme.txt, which --skip-foreign-files skips.
RAW_FILE = {"criteo": "train.txt.gz", "avazu": "train.gz"}
FOREIGN_FILES = {"criteo": ("readme.txt", "test.txt"), "avazu": ()}


def _write_raw_files(dataset, data):
  plain = data / "plain.txt"
  generate.write_synthetic(dataset, 20000, 1, str(plain))
  with open(plain, "a") as f:  # 3 bad rows: dropped, reported.
    f.write("1\tnot\tenough\tfields\n" * BAD_ROWS)
  with open(plain, "rb") as f, gzip.open(data / RAW_FILE[dataset], "wb") as out:
    shutil.copyfileobj(f, out)
  if dataset == "criteo":
    with open(plain) as f:
      head = [next(f) for _ in range(100)]
    (data / "test.txt").write_text("".join(r.split("\t", 1)[1] for r in head))
    (data / "readme.txt").write_text("Criteo Display Advertising Challenge\n")
  plain.unlink()


@pytest.fixture(scope="module", params=["criteo", "avazu"])
def finished_run(request, tmp_path_factory):
  """(dataset, data dir, output dir, exit code, console output) of one full
  pipeline run, run as a user runs it (a subprocess)."""
  dataset = request.param
  root = tmp_path_factory.mktemp(dataset)
  data = root / "data"
  data.mkdir()
  _write_raw_files(dataset, data)
  code, out, err = run_command(*run_arguments(
      dataset, data, root / "out", *PRODUCTION_PRACTICE[dataset]))
  return dataset, data, root / "out", code, out + err


def _store(output):
  return metadata_store.MetadataStore(
      tfx.orchestration.metadata.sqlite_metadata_connection_config(
          str(output / "metadata.sqlite")))


def _executions_by_component(store):
  types = {t.id: t.name for t in store.get_execution_types()}
  result = {}
  for execution in store.get_executions():
    name = types[execution.type_id].rsplit(".", 1)[-1]
    result.setdefault(name, []).append(execution)
  return result


# Library output on the console of a clean run, at most (issue 33).
MAX_LIBRARY_LINES = 10
# The headline's lines, in order (report_text.headline).
HEADLINE = ("model:", "baseline:", "ingested:", "pushed:", "components:",
            "report:")


def test_console_shows_progress_and_the_headline_and_logs_the_rest(
    finished_run):
  """Each component with its time, the skipped files, the headline last;
  the libraries' output (hundreds of lines) in DIR/logs/run.log."""
  dataset, data, output, code, console_output = finished_run
  assert code == 0, console_output
  lines = console_output.splitlines()
  components = [l for l in lines if re.fullmatch(
      r"(\w+) (\.\.\.|done in \d+\.\d s)", l)]
  for component in COMPONENTS:
    assert f"{component} ..." in components, console_output
    assert any(l.startswith(f"{component} done in ") for l in components)
  # Piped, not a terminal: a line per finished epoch of each of the
  # Trainer's fits (--epochs 2; replicas, distillation), between its start
  # and its end (commands.cli.console._PlainEpochs).
  epochs = [l for l in lines if re.fullmatch(
      r"Trainer epoch \d+: [\d,]+ examples/s, validation AUC \d\.\d{4}", l)]
  assert len(epochs) >= 2 and epochs[0].startswith("Trainer epoch 1: "), (
      console_output)
  assert (lines.index("Trainer ...") < lines.index(epochs[0]) and
          lines.index(epochs[-1]) < min(i for i, l in enumerate(lines)
                                        if l.startswith("Trainer done in ")))
  skipped = [l for l in lines if l.startswith(
      "warning: skipping, not training data: ")]
  assert [l.split(": ")[2] for l in skipped] == [
      str(data / name) for name in FOREIGN_FILES[dataset]], console_output
  # A "served:" line says which model is served, and why
  # (served_model.choose_served).
  start = max(i for i, l in enumerate(lines) if l.startswith("model:"))
  headline = lines[start:]
  # "on noise:" lines after the verdict when a check passed on its
  # interval alone (report_text.noise_passes); they explain, so they go.
  noise = [l for l in headline if l.startswith("on noise:   ")]
  expected = (HEADLINE[:2] + ("trained:", "served:") + HEADLINE[2:4] +
              ("on",) * len(noise) + HEADLINE[4:])
  assert [l.split()[0] for l in headline] == list(expected), console_output
  assert all(re.search(r"95% interval .* more eval rows would decide$", l)
             for l in noise), noise
  headline = [l for l in headline if l not in noise]
  record = _record(output)
  # The batch size the plan chose, and why (trainer_module/plan.py), and
  # the precision --precision auto chose, kept under the pipeline root
  # for its later runs (and Tuner trials) on this kind of machine.
  assert headline[2] == (
      f"trained:    batch {record['batch_size']} "
      f"({record['batch_size_reason']}), {record['rule']} scaling, in "
      f"{report_text.precision_text(record)}"), headline
  kept = record["precision"]
  assert kept["probed_now"] and os.path.dirname(kept["kept_at"]) == str(
      output / "pipeline" / contract.PRECISION_DIR)
  with open(kept["kept_at"], encoding="utf-8") as f:
    assert json.load(f)["chosen"] == kept["chosen"]
  headline = headline[:2] + headline[3:]
  served = record["served"]
  assert re.fullmatch(
      r"served:     the (logistic-regression baseline, not the )?deepfm: "
      r"validation AUC of the deepfm minus the logistic regression's "
      rf"[+-]\d\.\d{{4}} on {served['rows']:,} rows \(one-sided 95% "
      r"lower bound [+-]\d\.\d{4}\), .*", headline[2]), headline
  assert ("not the deepfm" in headline[2]) == (
      served["served"] == contract.LR_OUTPUT)
  headline = headline[:2] + headline[3:]
  # Each gated metric with its 95% interval (components.gate_metrics).
  interval = r"[+-]?\d\.\d{4} \[[+-]?\d\.\d{4}, [+-]?\d\.\d{4}\]"
  assert re.fullmatch(rf"model:      AUC {interval}  log loss 0\.\d{{4}}  "
                      rf"calibration {interval}", headline[0]), headline
  assert re.search(rf"\(logistic regression; model AUC minus LR {interval}\)$",
                   headline[1]), headline
  assert headline[3].startswith("pushed:     yes: the Evaluator blessed")
  assert all(f"{c} " in headline[4] for c in COMPONENTS)
  assert headline[5] == f"report:     {output / 'report' / 'index.html'}"
  library = [l for l in lines
             if l not in components + epochs + skipped + headline + noise]
  assert len(library) <= MAX_LIBRARY_LINES, library
  log = (output / progress.LOG_FILE).read_text()
  assert "Could not find cuda drivers" in log or "oneDNN" in log
  assert "WARNING:absl:" in log and len(log.splitlines()) > 100


def test_every_component_ran_and_is_recorded(finished_run):
  _, _, output, code, _ = finished_run
  assert code == 0
  executions = _executions_by_component(_store(output))
  for component in COMPONENTS:
    states = [e.last_known_state for e in executions.get(component, [])]
    assert metadata_store_pb2.Execution.COMPLETE in states, (component,
                                                             executions)


def test_bad_rows_are_dropped_and_reported(finished_run):
  _, _, output, _, _ = finished_run
  outcome = metadata.read_outcome_at(str(output / "metadata.sqlite"))
  assert f"20,{BAD_ROWS:03d} rows, {BAD_ROWS} bad rows dropped" in (
      outcome.ingestion)


def _record(output):
  """The pushed model's training record (training.json)."""
  with open(glob.glob(str(output / "serving" / "*" /
                          contract.TRAINING_RECORD))[0]) as f:
    return json.load(f)


def _raw_examples(dataset, data_dir):
  """Serialized raw tf.Examples (no label) and labels from the raw file."""
  spec = features.get_spec(dataset)
  path = os.path.join(data_dir, RAW_FILE[dataset])
  with gzip.open(path, "rt") as f:
    lines = f.read().splitlines()[1 if spec.has_header else 0:][:2000]
  serialized, labels = [], []
  for line in lines:
    values = dict(zip(spec.columns, line.split(spec.delimiter)))
    feature = {}
    for name in spec.raw_features:
      value = values[name]
      if name == spec.label or value == "":
        continue
      if spec.raw_dtype(name) == "int":
        feature[name] = tf.train.Feature(
            int64_list=tf.train.Int64List(value=[int(value)]))
      else:
        feature[name] = tf.train.Feature(
            bytes_list=tf.train.BytesList(value=[value.encode()]))
    serialized.append(tf.train.Example(features=tf.train.Features(
        feature=feature)).SerializeToString())
    labels.append(int(values[spec.label]))
  return serialized, np.array(labels)


def test_pushed_model_scores_raw_examples(finished_run):
  dataset, data, output, _, _ = finished_run
  pushed = glob.glob(str(output / "serving" / "*" / "saved_model.pb"))
  assert len(pushed) == 1, pushed
  model = tf.saved_model.load(os.path.dirname(pushed[0]))
  serialized, labels = _raw_examples(dataset, data)
  scores = model.signatures["serving_default"](
      examples=tf.constant(serialized))["probability"].numpy().ravel()
  assert scores.shape == labels.shape
  assert np.all((scores > 0) & (scores < 1))
  # Mostly training rows, so this checks the model learned, not that it
  # generalises (the Evaluator's AUC on the eval split gates that).
  assert roc_auc_score(labels, scores) > 0.6
  # An example with every feature missing still gets a probability.
  empty = tf.train.Example().SerializeToString()
  assert 0 < float(model.signatures["serving_default"](
      examples=tf.constant([empty]))["probability"][0, 0]) < 1


def test_model_serves_its_logistic_regression_baseline_and_early_stops(
    finished_run):
  """Both outputs, evaluated side by side; the training record says which
  epoch was kept, chosen on the train split's validation slice."""
  dataset, data, output, _, _ = finished_run
  pushed = glob.glob(str(output / "serving" / "*" / "saved_model.pb"))
  model_dir = os.path.dirname(pushed[0])
  model = tf.saved_model.load(model_dir)
  serialized, labels = _raw_examples(dataset, data)
  outputs = model.signatures["serving_default"](
      examples=tf.constant(serialized))
  lr = outputs[contract.LR_OUTPUT].numpy().ravel()
  assert np.all((lr > 0) & (lr < 1)) and roc_auc_score(labels, lr) > 0.6
  record = _record(output)
  assert 1 <= record["best_epoch"] <= record["epochs_run"] <= 2
  assert record["validation_examples"] > 0
  # The baseline's fit (trainer.train_baseline): each C's validation log
  # loss, the kept C, and its cost.
  baseline = record["logistic_regression"]
  assert [g["c"] for g in baseline["grid"]][0] == 0.01
  assert all(g["val_logloss"] > 0 for g in baseline["grid"])
  assert baseline["c"] in [g["c"] for g in baseline["grid"]]
  assert baseline["seconds"] > 0 and baseline["refit"]["iterations"] > 0
  evaluation = report_reading.read_evaluation(metadata.read_outcome_at(
      str(output / "metadata.sqlite")).evaluation)
  lr = report_reading.LR_PREFIX
  assert {"auc", gate_metrics.AUC_OVER_LR, lr + "auc",
          lr + "binary_crossentropy"} <= set(evaluation.overall)


@pytest.mark.parametrize("finished_run", ["avazu"], indirect=True)
def test_production_practice_options_reach_model_record_gate_and_report(
    finished_run):
  """Replicas, SmeLU and negative down-sampling together: the served
  prediction is the replicas' mean (or the better logistic regression's),
  the record says what each
  option did, the Evaluator measured PD overall and by slice, the report
  shows PD and the calibration buckets."""
  dataset, data, output, code, _ = finished_run
  assert code == 0
  model_dir = os.path.dirname(glob.glob(
      str(output / "serving" / "*" / "saved_model.pb"))[0])
  serialized, _ = _raw_examples(dataset, data)
  outputs = tf.saved_model.load(model_dir).signatures["serving_default"](
      examples=tf.constant(serialized))
  record = _record(output)
  replicas = [outputs[contract.replica_output(i)].numpy() for i in (0, 1)]
  # The replicas' mean, or the logistic regression when it ranked better
  # on the validation slice (served_model.choose_served; the gate then judges it).
  served = (outputs[contract.LR_OUTPUT].numpy()
            if record["served"]["served"] == contract.LR_OUTPUT
            else np.mean(replicas, axis=0))
  np.testing.assert_allclose(outputs[contract.PREDICTION_KEY].numpy(), served,
                             rtol=1e-5)
  assert not np.allclose(*replicas)  # Different seeds, different models.
  assert [r["seed"] for r in record["replicas"]] == [0, 1]
  assert record["push"] == "ensemble"
  assert record["model_options"]["activation"] == "smelu"
  assert record["negative_sampling"]["rate"] == 0.5

  evaluation = report_reading.read_evaluation(metadata.read_outcome_at(
      str(output / "metadata.sqlite")).evaluation)
  assert 0 < evaluation.overall[contract.REPLICA_PD] < 2
  assert any(contract.REPLICA_PD in s.candidate for s in evaluation.slices)
  page = (output / "report" / "index.html").read_text()
  assert "Prediction Difference" in page and "Calibration by bucket" in page


@pytest.mark.parametrize("finished_run", ["criteo"], indirect=True)
def test_factory_floor_techniques_reach_the_model_and_its_record(
    finished_run):
  """Shampoo, the rank loss and distillation together: one model is served
  (the student, no replica outputs), and its record compares it with the
  ensemble it was distilled from."""
  dataset, data, output, code, console_output = finished_run
  assert code == 0, console_output
  model_dir = os.path.dirname(glob.glob(
      str(output / "serving" / "*" / "saved_model.pb"))[0])
  serialized, _ = _raw_examples(dataset, data)
  outputs = tf.saved_model.load(model_dir).signatures["serving_default"](
      examples=tf.constant(serialized))
  assert contract.replica_output(0) not in outputs
  record = _record(output)
  assert record["model_options"] and record["scaled"]
  distilled = record["distillation"]
  assert 0.5 < distilled["student_auc"] <= 1
  assert 0.5 < distilled["ensemble_auc"] <= 1
  assert 0 < distilled["student_pd_vs_ensemble"] < 2
  assert [r["seed"] for r in record["replicas"]] == [0, 1]


def _pushed_versions(output):
  return sorted(os.listdir(output / "serving"))


# Re-runs cost a Trainer or an Evaluator each: one dataset shows them. A
# higher AUC floor is an Evaluator setting, so this re-run reuses Transform
# and the Trainer and re-evaluates the same model against the new floor.
@pytest.mark.parametrize("finished_run", ["criteo"], indirect=True)
def test_rerun_reuses_cache_and_the_gate_blocks_a_model_below_the_floor(
    finished_run, capsys):
  dataset, data, output, _, _ = finished_run
  if dataset != "criteo":
    pytest.skip("the cache and the gate's floor work alike on every "
                "dataset: checked once, on the Criteo run")
  before = _pushed_versions(output)
  first = output / "serving" / before[0] / "saved_model.pb"
  stamp = first.stat().st_mtime_ns
  assert run_cli(dataset, data, output, "--min-auc", "0.99") == (
      progress.EXIT_NOT_PUSHED)
  out = capsys.readouterr().out
  assert "not pushed: auc 0." in out
  assert ("its 95% interval is entirely below the minimum 0.9900 (Overall)"
          in out)
  executions = _executions_by_component(_store(output))
  for component in ("Transform", "Trainer"):
    states = [e.last_known_state for e in executions[component]]
    assert states.count(metadata_store_pb2.Execution.COMPLETE) == 1
    assert metadata_store_pb2.Execution.CACHED in states
  assert _pushed_versions(output) == before
  assert first.stat().st_mtime_ns == stamp


# Beam on a real engine (issue 56): the same Criteo run through a local
# Flink cluster (kubeflow/local_flink.sh), its workers a separate pool that
# installs what the job staged. Skipped, with the script's own reason, where
# the cluster cannot start (no Java or Maven, or no job server jar).
FLINK_SCRIPT = os.path.join(REPO_ROOT, "kubeflow", "local_flink.sh")
FLINK_REST = "http://localhost:8081"
FLINK_RUN = ("--beam-runner", "flink", "--job-endpoint", "localhost:8099",
             "--environment-type", "EXTERNAL", "--environment-config",
             "localhost:50000")
# Several times the run's time on Flink here (about 10 minutes).
FLINK_RUN_SECONDS = 2400
# The components that run Beam pipelines: at least one Flink job each.
BEAM_COMPONENTS = ("RawCtrExampleGen", "StatisticsGen", "Transform",
                   "Evaluator")


@pytest.fixture(scope="module")
def flink_cluster():
  started = subprocess.run([FLINK_SCRIPT, "start"], capture_output=True,
                           text=True, check=False, timeout=900)
  if started.returncode:
    pytest.skip("no local Flink cluster: " +
                (started.stderr.strip().splitlines() or ["?"])[-1])
  yield
  subprocess.run([FLINK_SCRIPT, "stop"], capture_output=True, check=False,
                 timeout=300)


def _flink_jobs():
  with urllib.request.urlopen(f"{FLINK_REST}/jobs/overview", timeout=10) as r:
    return json.load(r)["jobs"]


def _kill_a_taskmanager():
  """SIGKILLs the cluster's TaskManager, as a lost machine or pod would."""
  cluster = os.path.join(REPO_ROOT, "runs", "flink-cluster")
  (pid_file,) = glob.glob(os.path.join(cluster, "flink-*-taskexecutor.pid"))
  with open(pid_file) as f:
    os.kill(int(f.read().split()[0]), 9)


@pytest.mark.parametrize("finished_run", ["criteo"], indirect=True)
def test_the_run_on_flink_survives_a_lost_taskmanager_and_matches_in_process(
    flink_cluster, finished_run, tmp_path):
  """Every Beam component a finished Flink job, with the in-process run's
  outputs, though the TaskManager is killed once Transform's job runs: the
  script brings a new one up (as Kubernetes restarts a pod) and Flink's
  restart strategy re-runs the job on it."""
  dataset, data, output, code, console_output = finished_run
  assert code == 0, console_output
  before = {job["jid"] for job in _flink_jobs()}
  run = subprocess.Popen(
      [sys.executable, "-m", "pipeline", *run_arguments(
          dataset, data, tmp_path / "flink", *PRODUCTION_PRACTICE[dataset]),
       *FLINK_RUN], cwd=REPO_ROOT, stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT, text=True)
  # A hung Flink job fails the test instead of holding it (docs/flink.md:
  # an Evaluator job that waited on a closed SDK environment).
  watchdog = threading.Timer(FLINK_RUN_SECONDS, run.kill)
  watchdog.start()
  lines, killed = [], None
  for line in run.stdout:
    lines.append(line)
    if killed is None and line.startswith("Transform ..."):
      while not [j for j in _flink_jobs()
                 if j["jid"] not in before and j["state"] == "RUNNING"]:
        time.sleep(1)
      time.sleep(5)  # Its tasks deployed and running.
      _kill_a_taskmanager()
      killed = subprocess.run([FLINK_SCRIPT, "start"], capture_output=True,
                              text=True, check=False, timeout=300)
  watchdog.cancel()
  assert run.wait() == 0, "".join(lines)
  assert killed is not None and killed.returncode == 0, killed
  finished = [job for job in _flink_jobs() if job["jid"] not in before]
  assert len(finished) >= len(BEAM_COMPONENTS), finished
  assert {job["state"] for job in finished} == {"FINISHED"}, finished
  restarted = [job for job in finished if _flink_exceptions(job["jid"])]
  assert len(restarted) == 1, finished  # Transform's, after the kill.
  assert run_parity.differences(str(tmp_path / "flink"), str(output)) == []


def _flink_exceptions(jid):
  with urllib.request.urlopen(f"{FLINK_REST}/jobs/{jid}/exceptions",
                              timeout=10) as r:
    return json.load(r).get("exceptionHistory", {}).get("entries", [])
