"""commands.report.pages: the run report shows TFMA's numbers and the run's fate.

The evaluations are real: tiny SavedModels with the trainer's signatures,
evaluated by tfma.run_model_analysis with the pipeline's own eval config
(with and without a baseline, as the TFX Evaluator prepares it). ML Metadata
is a real sqlite store holding the artifacts a pipeline run records.
"""

import json
import os
from typing import Any, Dict, Mapping, Sequence, Tuple

from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_model_analysis as tfma
from tfx import v1 as tfx
from tfx.orchestration.portable.mlmd import execution_lib
from tfx.proto.orchestration import execution_result_pb2

from commands.cli import main as cli
from commands.report import pages as report
from commands.report import reading as report_reading
from commands.report import text as report_text
from components import gate_metrics
from components import tuner as tuner_component
from pipeline import progress
from pipeline.config import PipelineConfig
from pipeline.pipeline import create_eval_config
from trainer_module import contract
from trainer_module import plan as plan_lib

EXAMPLES = 600
HISTORY = {"loss": [0.61, 0.52], "val_loss": [0.58, 0.55],
           "auc": [0.66, 0.74], "val_auc": [0.65, 0.71],
           "examples_per_second": [1200.0, 1500.0],
           "clipped_fraction": [0.031, 0.0042]}

# (artifact type, uri, custom properties)
Output = Tuple[str, str, Mapping[str, Any]]
# (node id, execution state, failure message, outputs)
Component = Tuple[str, str, str, Sequence[Output]]


def _config(output_dir: str, **overrides) -> PipelineConfig:
  return PipelineConfig.from_fields(
      dataset="criteo", data=output_dir, output=output_dir, **overrides)


def _write_examples(config: PipelineConfig, path: str, seed: int) -> None:
  """Eval tf.Examples: a label driven by one dense feature, slice fields."""
  spec = config.spec
  rng = np.random.default_rng(seed)
  with tf.io.TFRecordWriter(path) as writer:
    for _ in range(EXAMPLES):
      x = rng.normal()
      feature = {
          spec.label: tf.train.Feature(int64_list=tf.train.Int64List(
              value=[int(rng.random() < 1 / (1 + np.exp(-2 * x)))])),
          spec.dense[0]: tf.train.Feature(
              float_list=tf.train.FloatList(value=[x]))}
      for name in config.eval_slice_features:
        value = rng.integers(3)
        feature[name] = (
            tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))
            if name in spec.int_categorical else
            tf.train.Feature(bytes_list=tf.train.BytesList(
                value=[f"v{value}".encode()])))
      writer.write(tf.train.Example(features=tf.train.Features(
          feature=feature)).SerializeToString())


class _TinyModel(tf.Module):
  """probability = sigmoid(weight * x (or x^2)), and the id-frequency slicer.

  x^2 ranks examples differently from the label, so such a model's AUC
  differs from the other's.
  """

  def __init__(self, feature: str, weight: float, squared: bool):
    super().__init__()
    self._spec = {feature: tf.io.FixedLenFeature([], tf.float32)}
    self._feature = feature
    self._squared = squared
    self.weight = tf.Variable(weight)

  def _x(self, examples):
    return tf.io.parse_example(examples, self._spec)[self._feature]

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
  def serve(self, examples):
    x = self._x(examples)
    score = x * x if self._squared else x
    # Every model the Trainer exports also serves its logistic-regression
    # baseline, which the eval config evaluates beside it.
    return {contract.PREDICTION_KEY: tf.sigmoid(self.weight * score),
            contract.LR_OUTPUT: tf.sigmoid(0.5 * self.weight * x)}

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
  def slicing_features(self, examples):
    x = self._x(examples)
    rare, medium, frequent = contract.FREQUENCY_BUCKETS
    return {contract.ID_FREQUENCY: tf.where(
        x < -0.5, rare, tf.where(x < 0.5, medium, frequent))}


def _save_model(config: PipelineConfig, uri: str, weight: float,
                squared: bool = False) -> None:
  """A Trainer model artifact: Format-Serving SavedModel + training.json."""
  serving = os.path.join(uri, "Format-Serving")
  model = _TinyModel(config.spec.dense[0], weight, squared)
  tf.saved_model.save(model, serving, signatures={
      "serving_default": model.serve,
      contract.SLICING_SIGNATURE: model.slicing_features})
  record = plan_lib.training_hparams(config.trainer, {},
                                     config.trainer.base_batch_size)
  record.update(train_examples=EXAMPLES, steps_per_epoch=1, history=HISTORY)
  with open(os.path.join(serving, contract.TRAINING_RECORD), "w") as f:
    json.dump(record, f)


def _evaluate(config: PipelineConfig, models: Mapping[str, str],
              examples: str, uri: str) -> None:
  """What the Evaluator writes: TFMA on the candidate (and baseline)."""
  eval_config = tfma.utils.update_eval_config_with_defaults(
      create_eval_config(config), has_baseline="baseline" in models,
      rubber_stamp=True)
  shared = [tfma.default_eval_shared_model(
      eval_saved_model_path=os.path.join(models[spec.name or "candidate"],
                                         "Format-Serving"),
      model_name=spec.name, eval_config=eval_config)
            for spec in eval_config.model_specs]
  tfma.run_model_analysis(eval_shared_model=shared, eval_config=eval_config,
                          data_location=examples, file_format="tfrecords",
                          output_path=uri)


def _record_run(output_dir: str, components: Sequence[Component]) -> None:
  """ML Metadata as a pipeline run leaves it: run, nodes, executions."""
  store = metadata_store.MetadataStore(
      tfx.orchestration.metadata.sqlite_metadata_connection_config(
          os.path.join(output_dir, "metadata.sqlite")))
  run_type = store.put_context_type(
      metadata_store_pb2.ContextType(name="pipeline_run"))
  node_type = store.put_context_type(
      metadata_store_pb2.ContextType(name="node"))
  run = metadata_store_pb2.Context(type_id=run_type,
                                   name="20260101-000000.000000")
  [run.id] = store.put_contexts([run])
  for node, state, message, outputs in components:
    execution_type = store.put_execution_type(
        metadata_store_pb2.ExecutionType(name=f"tfx.components.{node}"))
    execution = metadata_store_pb2.Execution(
        type_id=execution_type,
        last_known_state=metadata_store_pb2.Execution.State.Value(state))
    if message:
      execution_lib.set_execution_result(execution_result_pb2.ExecutionResult(
          code=1, result_message=message), execution)
    context = metadata_store_pb2.Context(type_id=node_type,
                                         name=f"cowclip-criteo.{node}")
    [context.id] = store.put_contexts([context])
    artifacts = []
    for type_name, uri, properties in outputs:
      artifact = metadata_store_pb2.Artifact(
          type_id=store.put_artifact_type(
              metadata_store_pb2.ArtifactType(name=type_name)),
          uri=uri, state=metadata_store_pb2.Artifact.LIVE)
      for key, value in properties.items():
        if isinstance(value, int):
          artifact.custom_properties[key].int_value = value
        else:
          artifact.custom_properties[key].string_value = value
      artifacts.append((artifact, metadata_store_pb2.Event(
          type=metadata_store_pb2.Event.OUTPUT)))
    store.put_execution(execution, artifacts, [run, context])


def _make_run(output_dir: str, seed: int, with_baseline: bool,
              **config_overrides) -> Dict[str, str]:
  """A finished run laid out like the pipeline's: evaluated, maybe pushed."""
  os.makedirs(output_dir)
  config = _config(output_dir, **config_overrides)
  root = config.pipeline_root
  uris = {"model": os.path.join(root, "Trainer", "model", "6"),
          "evaluation": os.path.join(root, "Evaluator", "evaluation", "7"),
          "blessing": os.path.join(root, "Evaluator", "blessing", "7"),
          "pushed": os.path.join(root, "Pusher", "pushed_model", "8"),
          "serving": os.path.join(config.serving_dir, "1767225600")}
  models = {"candidate": uris["model"]}
  _save_model(config, uris["model"], 2.0)
  if with_baseline:
    models["baseline"] = os.path.join(root, "Trainer", "model", "2")
    _save_model(config, models["baseline"], 0.5, squared=True)
  examples = os.path.join(output_dir, "eval.tfrecord")
  _write_examples(config, examples, seed)
  _evaluate(config, models, examples, uris["evaluation"])
  blessed = int(tfma.load_validation_result(uris["evaluation"]).validation_ok)
  blessing = {"blessed": blessed, "current_model": uris["model"]}
  if with_baseline:
    blessing["baseline_model"] = models["baseline"]
  pushed = {"pushed": blessed}
  if blessed:
    pushed["pushed_destination"] = uris["serving"]
  _record_run(output_dir, [
      ("Trainer", "COMPLETE", "", [("Model", uris["model"], {})]),
      ("Evaluator", "COMPLETE", "", [
          ("ModelEvaluation", uris["evaluation"], {}),
          ("ModelBlessing", uris["blessing"], blessing)]),
      ("Pusher", "COMPLETE", "", [("PushedModel", uris["pushed"], pushed)])])
  return uris


def _overall(evaluation_uri: str, model_name: str) -> Dict[str, float]:
  """The overall slice's metrics, straight from TFMA's metrics records."""
  [overall] = [m for m in tfma.load_metrics(evaluation_uri)
               if not m.slice_key.single_slice_keys]
  return {kv.key.name + ("_diff" if kv.key.is_diff else ""):
          kv.value.double_value.value
          for kv in overall.metric_keys_and_values
          if kv.key.model_name in (model_name, "")}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Dict[str, Tuple[str, Dict[str, str]]]:
  """Two evaluated runs: blessed against a baseline; failing its AUC floor."""
  root = tmp_path_factory.mktemp("runs")
  made = {}
  for name, seed, with_baseline, overrides in (
      ("with_baseline", 0, True, {}),
      ("not_blessed", 1, False, {"min_auc": 0.99})):
    output_dir = str(root / name)
    made[name] = (output_dir, _make_run(output_dir, seed, with_baseline,
                                        **overrides))
  return made


def _png(path: str) -> bool:
  with open(path, "rb") as f:
    return f.read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_report_shows_candidate_baseline_and_diff_from_tfma(runs):
  output_dir, uris = runs["with_baseline"]
  page_path = report.write_report(output_dir)
  assert page_path == os.path.join(output_dir, "report", "index.html")
  page = open(page_path, encoding="utf-8").read()
  candidate = _overall(uris["evaluation"], "candidate")
  baseline = _overall(uris["evaluation"], "baseline")
  assert f"{candidate['auc']:.4f}" in page
  assert f"{baseline['auc']:.4f}" in page
  # The change column: the gate's paired change and its interval.
  assert candidate["auc_change_diff"] == pytest.approx(candidate["auc_diff"],
                                                       abs=1e-3)
  assert gate_metrics.interval_text(candidate, gate_metrics.AUC_CHANGE,
                                    "_diff", signed=True) in page
  assert f"{candidate['binary_crossentropy']:.4f}" in page
  assert f"{baseline['calibration']:.4f}" in page
  assert candidate["auc"] != baseline["auc"]  # Else the check proves little.
  assert "pushed to " + uris["serving"] in page
  assert "Components of pipeline run" in page and "Evaluator" in page
  assert "CowClip clipped 0.42% of the embedding-row updates" in page
  for feature in _config(output_dir).eval_slice_features:
    assert f"<h3>{feature}</h3>" in page
  for bucket in contract.FREQUENCY_BUCKETS:
    assert f"<td>{bucket}</td>" in page
  # The hyperparameters actually used, from training.json.
  trainer_settings = _config(output_dir).trainer
  record = plan_lib.training_hparams(trainer_settings, {},
                                     trainer_settings.base_batch_size)
  assert f"<td>{record['rule']}</td>" in page
  assert f"{record['scaled']['embed_lr']:g}" in page
  for figure in (report.RELIABILITY_FIGURE, report.ID_FREQUENCY_FIGURE,
                 report.TRAINING_FIGURE):
    assert f"src='{figure}'" in page
    assert _png(os.path.join(output_dir, "report", figure))

  summary = report_text.describe(report_reading.read_run(output_dir))
  assert f"{candidate['auc']:.4f}" in summary
  assert f"{baseline['auc']:.4f}" in summary
  assert "pushed:    yes" in summary
  assert uris["blessing"] not in summary
  assert os.path.join("Trainer", "model", "2") in summary  # The baseline.


@pytest.mark.slow
def test_not_blessed_run_says_which_check_failed(runs):
  output_dir, uris = runs["not_blessed"]
  run = report_reading.read_run(output_dir)
  assert run.problems == ()
  auc = _overall(uris["evaluation"], "")["auc"]
  assert run.evaluation.baseline_overall is None
  assert "auc_diff" not in run.evaluation.overall
  verdict = report_text.push_verdict(run)
  assert verdict.startswith("no: the Evaluator did not bless the model")
  assert f"auc {auc:.4f} [" in verdict
  assert "its 95% interval is entirely below the minimum 0.9900" in verdict
  page = open(report.write_run_page(run), encoding="utf-8").read()
  assert f"{auc:.4f}" in page and "No baseline" in page
  assert "baseline auc" not in page


@pytest.mark.slow
def test_compare_puts_both_runs_side_by_side(runs):
  first, second = runs["with_baseline"][0], runs["not_blessed"][0]
  assert cli.main(["report", first, "--compare", second]) == 0
  page = open(os.path.join(first, "report", report.COMPARE_PAGE),
              encoding="utf-8").read()
  for output_dir, uris in (runs["with_baseline"], runs["not_blessed"]):
    auc = _overall(uris["evaluation"], "candidate")["auc"]
    assert f">{auc:.4f} [" in page
    assert os.path.abspath(output_dir) in page
  for figure in (report.COMPARE_ID_FREQUENCY_FIGURE,
                 report.COMPARE_TRAINING_FIGURE):
    assert _png(os.path.join(first, "report", figure))
  assert os.path.exists(os.path.join(first, "report", report.INDEX_PAGE))


def test_run_failed_before_the_evaluator_still_gets_a_report(tmp_path,
                                                             capsys):
  """Tuner done, Trainer failed: tuning shown, no evaluation, the error."""
  output_dir = str(tmp_path / "out")
  os.makedirs(output_dir)
  hparams = os.path.join(output_dir, "pipeline", "CtrTuner",
                         "best_hyperparameters", "5")
  results = os.path.join(output_dir, "pipeline", "CtrTuner", "tuner_results",
                         "5")
  os.makedirs(hparams)
  with open(os.path.join(hparams, "best_hyperparameters.txt"), "w") as f:
    json.dump({"space": [], "values": {"embed_lr": 0.0123, "r": 1.5}}, f)
  tuner_component.write_trials(
      [{"trial_id": "0", "status": "COMPLETED", "embed_lr": 0.0123,
        "val_auc": 0.7345, "error": None},
       {"trial_id": "1", "status": "FAILED", "embed_lr": 0.5,
        "val_auc": None, "error": "ValueError: NaN loss"}], results)
  _record_run(output_dir, [
      ("Transform", "COMPLETE", "", []),
      ("CtrTuner", "COMPLETE", "", [("HyperParameters", hparams, {}),
                                    ("TunerResults", results, {})]),
      ("Trainer", "FAILED", "ResourceExhaustedError: out of memory", [])])

  assert cli.main(["report", output_dir]) == 0
  out = capsys.readouterr().out
  assert "failed:    Trainer: ResourceExhaustedError: out of memory" in out
  assert "the run did not reach the Evaluator" in out
  page = open(os.path.join(output_dir, "report", "index.html"),
              encoding="utf-8").read()
  assert "<td>FAILED</td>" in page and "out of memory" in page
  assert "No evaluation" in page and "No training record" in page
  assert ">0.0123</td>" in page and ">0.7345</td>" in page
  assert "NaN loss" in page
  assert not [f for f in os.listdir(os.path.join(output_dir, "report"))
              if f.endswith(".png")]


def test_directory_without_a_run(tmp_path, capsys):
  run = report_reading.read_run(str(tmp_path))
  assert "no ML Metadata store" in run.problems[0]
  assert not os.path.exists(tmp_path / "metadata.sqlite")
  assert "no ML Metadata store" in open(report.write_run_page(run)).read()
  assert cli.main(["report", str(tmp_path / "missing")]) == progress.EXIT_FAILED
  assert "missing is not a directory" in capsys.readouterr().err


def test_metric_formatting():
  assert report_text.format_metric("auc", 0.712345) == "0.7123"
  assert report_text.format_metric("auc_diff", 0.00123) == "+0.0012"
  assert report_text.format_metric("example_count", 4904.0) == "4,904"
  assert report_text.format_metric("example_count_diff", 0.0) == "+0"
  assert report_text.format_metric("auc", None) == "-"
