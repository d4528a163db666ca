"""Tuning in the pipeline: flags, config, composition, the tuning job.

The slow part runs ONE pipeline with --tune on generated data (module-scoped
fixture) and asserts on it; the tuning job and --hparams-from then reuse its
cached ingestion, Transform and Tuner.
"""

import csv
import json
import os

from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2
import pytest
from tfx import v1 as tfx

from commands.cli import flags
from commands.cli import main as cli
from commands.cli import parser as cli_parser
from commands.experiments import tune
from commands.experiments import tuned_hparams
from commands.synthetic import generate
from components import tuner as tuner_component
from pipeline import progress
from pipeline.config import PipelineConfig
from pipeline.pipeline import create_pipeline
from trainer_module import contract
from trainer_module import features
from trainer_module import hparams
from trainer_module import scaling
from trainer_module import tuner

BEST_VALUES = {"dense_lr": 1e-3, "embed_lr": 1e-4, "l2": 1e-5, "r": 1.0,
               "zeta": 1e-5, "warmup_epochs": 1.0}


def _config(**fields):
  return PipelineConfig.from_fields(
      dataset="criteo", data="d", output="o", **fields)


def _parse(*argv):
  return flags.config_from_args(cli_parser.build_parser().parse_args(list(argv)))


def test_tuning_flags_become_config(tmp_path):
  space = tmp_path / "space.json"
  space.write_text('{"dense_lr": [1e-4, 1e-2], "embedding_dim": [8, 16]}')
  config = _parse("run", "--dataset", "criteo", "--data", "d", "--output",
                  "o", "--tune", "--trials", "3", "--tuner", "bayesian",
                  "--search-space", str(space), "--tune-model-size")
  assert (config.tuning.tune, config.tuning.trials,
          config.tuning.tuner) == (True, 3, "bayesian")
  assert not config.tuning.stop_after_tuner and config.tuning.tune_model_size
  assert config.tuner_config["tuning"] == {
      "tuner": "bayesian", "trials": 3, "tune_model_size": True,
      "search_space": {"dense_lr": [1e-4, 1e-2], "embedding_dim": [8, 16]}}
  assert "tuning" not in config.trainer_config
  job = _parse("tune", "--dataset", "avazu", "--data", "d", "--output", "o")
  assert job.tuning.tune and job.tuning.stop_after_tuner
  assert (job.tuning.trials, job.tuning.tuner) == (10, "random")


def test_tuning_flags_without_tune_fail(tmp_path, capsys):
  code = cli.main(["run", "--dataset", "criteo", "--data", str(tmp_path),
                   "--output", str(tmp_path / "o"), "--trials", "3",
                   "--tuner", "hyperband"])
  assert code == progress.EXIT_FAILED
  assert "--trials, --tuner only apply with --tune" in capsys.readouterr().err


def test_bad_search_space_file_fails_naming_it(tmp_path, capsys):
  space = tmp_path / "space.json"
  space.write_text('{"dense_lr": [1e-2, 1e-4]}')
  code = cli.main(["tune", "--dataset", "criteo", "--data", str(tmp_path),
                   "--output", str(tmp_path / "o"), "--search-space",
                   str(space)])
  assert code == progress.EXIT_FAILED
  err = capsys.readouterr().err
  assert str(space) in err and "'dense_lr' must be [low, high]" in err


@pytest.mark.parametrize("fields, message", [
    ({"tune": True, "hparams": {"r": 2.0}}, "conflict with tune"),
    ({"tune": True, "hparams_from": "x"}, "cannot be combined with tune"),
    ({"hparams": {"r": 2.0}, "hparams_from": "x"}, "cannot be combined"),
    ({"stop_after_tuner": True}, "stop_after_tuner needs tune"),
    ({"search_space": {"r": 1.0}}, "only used with tune"),
    ({"tune_model_size": True}, "only used with tune"),
    ({"tune": True, "trials": 0}, "trials must be a positive integer"),
    ({"tune": True, "tuner": "grid"}, "unknown tuner 'grid'"),
    ({"tune": True, "search_space": {"lr": [1, 2]}}, "unknown hyperparameter"),
])
def test_config_rejects_inconsistent_tuning(fields, message):
  with pytest.raises(ValueError, match=message):
    _config(**fields)


def _ids(pipeline):
  return [c.id for c in pipeline.components]


def test_tuner_feeds_the_trainer():
  pipeline = create_pipeline(_config(tune=True, trials=2))
  ids = _ids(pipeline)
  assert ids.index("Transform") < ids.index("CtrTuner") < ids.index("Trainer")
  tuner_node = pipeline.components[ids.index("CtrTuner")]
  trainer_node = pipeline.components[ids.index("Trainer")]
  assert (trainer_node.inputs["hyperparameters"] is
          tuner_node.outputs["best_hyperparameters"])
  assert tuner_node.exec_properties["tuner_fn"] == (
      "trainer_module.tuner.tuner_fn")
  assert json.loads(tuner_node.exec_properties["custom_config"])[
      "tuning"]["trials"] == 2
  # Transform only analyses (materialize=False): the Tuner, like the
  # Trainer, reads ExampleGen's raw examples through the Transform graph.
  assert (tuner_node.inputs["examples"] is
          pipeline.components[ids.index("RawCtrExampleGen")].outputs[
              "examples"])
  assert (tuner_node.inputs["transform_graph"] is
          pipeline.components[ids.index("Transform")].outputs[
              "transform_graph"])


def test_tuner_gets_the_trainers_accelerators():
  pipeline = create_pipeline(_config(tune=True, gpus=2))
  node = pipeline.components[_ids(pipeline).index("CtrTuner")]
  assert node.platform_config.accelerator.count == 2


def test_tuning_job_ends_at_the_tuner():
  ids = _ids(create_pipeline(_config(tune=True, stop_after_tuner=True)))
  assert ids[-1] == "CtrTuner"
  assert not {"Trainer", "Evaluator", "Pusher"} & set(ids)


def test_hparams_from_imports_the_artifact(tmp_path):
  pipeline = create_pipeline(_config(hparams_from=str(tmp_path)))
  ids = _ids(pipeline)
  assert "CtrTuner" not in ids
  importer = pipeline.components[ids.index("HyperParametersImporter")]
  assert importer.exec_properties["artifact_uri"] == str(tmp_path)
  trainer_node = pipeline.components[ids.index("Trainer")]
  assert trainer_node.inputs["hyperparameters"] is importer.outputs["result"]
  assert "hyperparameters" not in pipeline.components[
      _ids(create_pipeline(_config())).index("Trainer")].inputs


def _best_file(directory, values=None, **extra):
  os.makedirs(directory, exist_ok=True)
  path = os.path.join(directory, tune.BEST_FILE)
  with open(path, "w") as f:
    json.dump({"space": [], "values": {**(values or BEST_VALUES), **extra}},
              f)
  return path


def _raw_best_file(directory, text, name=tune.BEST_FILE):
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, name), "w") as f:
    f.write(text)


def test_resolve_hparams_dir_accepts_artifact_and_tuning_job_output(
    tmp_path):
  artifact = tmp_path / "artifact"
  _best_file(artifact, **{"tuner/epochs": 2})
  assert tuned_hparams.resolve_hparams_dir(str(artifact), "criteo") == str(artifact)
  job = tmp_path / "job"
  _best_file(job / tune.BEST_DIR, embedding_dim=16)
  (job / tune.BEST_JSON).write_text('{"dataset": "criteo"}')
  (job / "trials.csv").write_text("")
  assert tuned_hparams.resolve_hparams_dir(str(job), "criteo") == str(
      job / tune.BEST_DIR)
  with pytest.raises(ValueError, match="tuned on 'criteo'.*this run is "
                     "'avazu'"):
    tuned_hparams.resolve_hparams_dir(str(job), "avazu")
  assert tuned_hparams.resolve_hparams_dir("gs://b/best", "criteo") == "gs://b/best"


@pytest.mark.parametrize("setup, message", [
    (lambda d: None, "not a directory"),
    (lambda d: os.makedirs(d), "no best_hyperparameters.txt in it nor in "
     "best_hyperparameters/"),
    (lambda d: (_best_file(d), _raw_best_file(d, "", name="x.json")),
     r"holds \['x.json'\] besides best_hyperparameters.txt"),
    (lambda d: _best_file(d, lr=0.1), r"unknown hyperparameters \['lr'\]"),
    (lambda d: _best_file(d, dense_lr=-1.0), "dense_lr must be a finite "
     "number >= 0, got -1.0"),
    (lambda d: _best_file(d, embedding_dim=16.0), "embedding_dim must be a "
     "positive integer"),
    (lambda d: _raw_best_file(d, "{"), "line 1: not valid"),
    (lambda d: _raw_best_file(d, "[]"), "expected a KerasTuner"),
])
def test_resolve_hparams_dir_errors_name_the_path(tmp_path, setup, message):
  directory = str(tmp_path / "best")
  setup(directory)
  with pytest.raises(ValueError, match=message) as error:
    tuned_hparams.resolve_hparams_dir(directory, "criteo")
  assert directory in str(error.value)


def test_plot_of_trials_with_a_failure(tmp_path):
  rows = [{"trial_id": "0", "val_auc": 0.71}, {"trial_id": "1",
                                               "val_auc": None},
          {"trial_id": "2", "val_auc": 0.74}]
  path = tmp_path / "trials.png"
  tune.plot_trials(rows, str(path), "criteo deepfm")
  assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_summary_gives_the_batch_an_auto_search_trained_at(tmp_path):
  """The Tuner resolves `--batch-size auto` from the training rows
  (CtrHyperModel.batch_record): the summary says which batch and why, and
  the base values scaled to it."""
  best, results = tmp_path / "best", tmp_path / "results"
  best.mkdir()
  (best / tune.BEST_FILE).write_text(json.dumps(
      {"space": [], "values": BEST_VALUES}))
  tuner_component.write_trials(
      [{"trial_id": "0", "status": "COMPLETED", **BEST_VALUES,
        "val_auc": 0.75, "val_loss": 0.45, "epochs_run": 1,
        "error": None}], str(results))
  reason = "auto: 396 steps an epoch on 1,619,582 training rows"
  (results / tuner_component.BATCH_JSON).write_text(json.dumps(
      {"batch_size": 4096, "batch_size_reason": reason,
       "steps_per_epoch": 396}))
  config = _parse("tune", "--dataset", "criteo", "--data", "d", "--output",
                  str(tmp_path / "out"))
  assert config.trainer.batch_size == scaling.AUTO_BATCH_SIZE
  outcome = tune.write_results(config, str(best), str(results))
  summary = outcome.summary
  assert (summary["tuned_at_batch_size"], summary["batch_size_reason"]) == (
      4096, reason)
  assert summary["scaled_at_tuned_batch_size"] == scaling.scale_hparams(
      "cowclip", BEST_VALUES, 1024, 4096)
  assert f"trials trained at batch 4096 ({reason})" in outcome.describe()


# --- One real pipeline run with --tune, shared by the tests below. -------

RUN_ARGS = ("--dataset", "criteo", "--batch-size", "256", "--epochs", "1",
            "--min-frequency", "3", "--min-auc", "0")


def _store(output):
  return metadata_store.MetadataStore(
      tfx.orchestration.metadata.sqlite_metadata_connection_config(
          os.path.join(output, "metadata.sqlite")))


def _executions(output, node_id):
  store = _store(output)
  context = store.get_context_by_type_and_name("node",
                                               f"cowclip-criteo.{node_id}")
  return store.get_executions_by_context(context.id) if context else []


def _latest_input_uris(output, node_id):
  """Input key -> URI of the latest completed execution of a node."""
  store = _store(output)
  execution = max((e for e in _executions(output, node_id) if
                   e.last_known_state == metadata_store_pb2.Execution.COMPLETE),
                  key=lambda e: e.id)
  events = [e for e in store.get_events_by_execution_ids([execution.id])
            if e.type == metadata_store_pb2.Event.INPUT]
  uris = {a.id: a.uri for a in store.get_artifacts_by_id(
      [e.artifact_id for e in events])}
  return {e.path.steps[0].key: uris[e.artifact_id] for e in events}


def _training_record(model_uri):
  with open(os.path.join(model_uri, "Format-Serving", "training.json")) as f:
    return json.load(f)


@pytest.fixture(scope="module")
def tuned_run(tmp_path_factory):
  """The run's config, exit code, Tuner outputs and Trainer record."""
  root = tmp_path_factory.mktemp("tuned")
  data = root / "data"
  data.mkdir()
  generate.write_synthetic("criteo", 4000, 1, str(data / "train.txt"))
  argv = ["run", *RUN_ARGS, "--data", str(data), "--output",
          str(root / "out"), "--tune", "--trials", "2"]
  code = cli.main(argv)
  config = _parse(*argv)
  trainer_outputs = tune.latest_outputs(config, "Trainer")
  return {"config": config, "code": code,
          "tuner": tune.latest_outputs(config, tune.TUNER_NODE),
          "trainer_inputs": _latest_input_uris(config.output, "Trainer"),
          "record": _training_record(trainer_outputs["model"])}


def _best_values(best_hparams_dir):
  with open(os.path.join(best_hparams_dir, tune.BEST_FILE)) as f:
    return json.load(f)


@pytest.mark.slow
def test_tuner_ran_and_fed_the_trainer(tuned_run):
  assert tuned_run["code"] in (0, progress.EXIT_NOT_PUSHED)
  states = [e.last_known_state for e in _executions(
      tuned_run["config"].output, tune.TUNER_NODE)]
  assert states == [metadata_store_pb2.Execution.COMPLETE]
  assert tuned_run["trainer_inputs"]["hyperparameters"] == (
      tuned_run["tuner"]["best_hyperparameters"])


@pytest.mark.slow
def test_best_values_lie_in_the_declared_space(tuned_run):
  best = _best_values(tuned_run["tuner"]["best_hyperparameters"])
  declared = {p["config"]["name"]: p["config"] for p in best["space"]}
  assert set(best["values"]) == set(declared) == set(tuner.search_space(
      "criteo"))
  for name, value in best["values"].items():
    assert declared[name]["min_value"] <= value <= declared[name]["max_value"]
  assert declared["dense_lr"]["sampling"] == "log"
  assert declared["r"]["sampling"] == "linear"
  # Centered on the run's auto base (4k rows: far above the published
  # values), the values the run would train with untuned.
  published = features.CRITEO.base_hparams
  for name in ("embed_lr", "l2"):
    high = hparams.BY_NAME[name].search_factors[1]
    assert declared[name]["default"] > published[name] * high, name
  for name in scaling.AUTO_KEYS:
    low, high = hparams.BY_NAME[name].search_factors
    center = declared[name]["default"]
    assert (declared[name]["min_value"], declared[name]["max_value"]) == (
        pytest.approx(center * low), pytest.approx(center * high))


@pytest.mark.slow
def test_trainer_used_the_tuned_values_after_scaling(tuned_run):
  best = _best_values(tuned_run["tuner"]["best_hyperparameters"])["values"]
  record = tuned_run["record"]
  assert record["base"] == best
  assert record["scaled"] == scaling.scale_hparams("cowclip", best, 1024, 256)
  assert record["batch_size"] == 256
  # The trials probed --precision auto and kept their choice; the Trainer
  # trained in it.
  kept = record["precision"]
  assert not kept["probed_now"] and os.path.dirname(kept["kept_at"]) == (
      os.path.join(tuned_run["config"].output, "pipeline",
                   contract.PRECISION_DIR))


@pytest.mark.slow
def test_trial_table_is_in_the_tuner_results(tuned_run):
  rows = tuner_component.read_trials(tuned_run["tuner"]["tuner_results"])
  assert [r["trial_id"] for r in rows] == ["0", "1"]
  completed = [r for r in rows if r["status"] == "COMPLETED"]
  assert completed, rows
  for row in completed:
    assert 0 <= row["val_auc"] <= 1 and row["val_loss"] > 0
    assert row["epochs_run"] == 1
  best = _best_values(tuned_run["tuner"]["best_hyperparameters"])["values"]
  winner = max(completed, key=lambda r: r["val_auc"])
  assert {k: winner[k] for k in best} == best
  batch = tuner_component.read_batch(tuned_run["tuner"]["tuner_results"])
  assert (batch["batch_size"], batch["batch_size_reason"]) == (
      256, "--batch-size")


@pytest.fixture(scope="module")
def tuning_job(tuned_run):
  """`tune` with the run's settings and output: (exit code, config)."""
  config = tuned_run["config"]
  argv = ["tune", *RUN_ARGS, "--data", config.data, "--output",
          config.output, "--trials", "2"]
  return cli.main(argv), _parse(*argv)


@pytest.mark.slow
def test_tuning_job_reuses_the_run_and_writes_results(tuned_run, tuning_job):
  code, config = tuning_job
  assert code == 0
  output = config.output
  states = [e.last_known_state for e in _executions(output,
                                                    tune.TUNER_NODE)]
  assert states.count(metadata_store_pb2.Execution.COMPLETE) == 1
  assert metadata_store_pb2.Execution.CACHED in states
  artifact = os.path.join(tuned_run["tuner"]["best_hyperparameters"],
                          tune.BEST_FILE)
  with open(artifact, "rb") as a, open(os.path.join(
      output, tune.BEST_DIR, tune.BEST_FILE), "rb") as b:
    assert a.read() == b.read()
  best = _best_values(tuned_run["tuner"]["best_hyperparameters"])["values"]
  with open(os.path.join(output, tune.BEST_JSON)) as f:
    summary = json.load(f)
  assert summary["values"] == best
  assert (summary["dataset"], summary["trials"]) == ("criteo", 2)
  assert summary["tuned_at_batch_size"] == 256
  assert summary["batch_size_reason"] == "--batch-size"
  assert summary["scaled_at_tuned_batch_size"] == scaling.scale_hparams(
      "cowclip", best, 1024, 256)
  with open(os.path.join(output, tuner_component.TRIALS_CSV), newline="") as f:
    table = list(csv.DictReader(f))
  assert [r["trial_id"] for r in table] == ["0", "1"]
  assert {"dense_lr", "val_auc", "val_loss", "status", "epochs_run"} <= set(
      table[0])
  with open(os.path.join(output, tune.PLOT), "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_hparams_from_the_tuning_job_trains_without_tuning(tuned_run,
                                                          tuning_job):
  _, job = tuning_job
  argv = ["run", *RUN_ARGS, "--data", job.data, "--output", job.output,
          "--hparams-from", job.output]
  argv[argv.index("--batch-size") + 1] = "512"
  code = cli.main(argv)
  assert code in (0, progress.EXIT_NOT_PUSHED)
  config = _parse(*argv)
  tuner_states = [e.last_known_state for e in _executions(job.output,
                                                          tune.TUNER_NODE)]
  assert metadata_store_pb2.Execution.RUNNING not in tuner_states
  assert tuner_states.count(metadata_store_pb2.Execution.COMPLETE) == 1
  assert _latest_input_uris(job.output, "Trainer")["hyperparameters"] == (
      tune.latest_outputs(config, "HyperParametersImporter")["result"])
  best = _best_values(tuned_run["tuner"]["best_hyperparameters"])["values"]
  record = _training_record(tune.latest_outputs(config, "Trainer")["model"])
  assert record["base"] == best
  assert record["scaled"] == scaling.scale_hparams("cowclip", best, 1024, 512)
