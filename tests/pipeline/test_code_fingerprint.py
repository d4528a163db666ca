"""Every component's cache key covers the code it runs (code_fingerprint)."""

import shutil

import ml_metadata as mlmd
from ml_metadata.proto import metadata_store_pb2
import pytest
from tfx.dsl.components.base import base_component
from tfx.orchestration import metadata
from tfx.orchestration import pipeline as tfx_pipeline
from tfx.orchestration.local import local_dag_runner

from components.raw_example_gen.component import RawCtrExampleGen
from pipeline import code_fingerprint as fingerprint
from pipeline import config as config_lib
from pipeline import pipeline as pipeline_lib

SAMPLE = fingerprint.os.path.join(fingerprint.REPO_ROOT, "data", "samples",
                                  "criteo_sample.txt")


@pytest.fixture
def code_copy(tmp_path, monkeypatch):
  """A copy of the project's packages that the fingerprint reads instead."""
  for package in fingerprint.PROJECT_PACKAGES:
    shutil.copytree(fingerprint.os.path.join(fingerprint.REPO_ROOT, package),
                    tmp_path / package,
                    ignore=shutil.ignore_patterns("__pycache__"))
  monkeypatch.setattr(fingerprint, "REPO_ROOT", str(tmp_path))
  return tmp_path


def _edit(path):
  with open(path, "a", encoding="utf-8") as f:
    f.write("\n# changed\n")


def _fingerprints(**fields):
  """{component id: fingerprint} of create_pipeline, Tuner included."""
  config = config_lib.PipelineConfig.from_fields(
      **{"dataset": "criteo", "data": "d", "output": "o", "tune": True,
         **fields})
  pipeline = pipeline_lib.create_pipeline(config)
  return {c.id: c.exec_properties[fingerprint.CODE_FINGERPRINT]
          for c in pipeline.components
          if isinstance(c, base_component.BaseComponent)}


def _components():
  config = config_lib.PipelineConfig.from_fields(
      dataset="criteo", data="d", output="o", tune=True)
  return pipeline_lib.create_pipeline(config).components


def test_every_component_carries_a_fingerprint():
  components = _components()
  assert {c.id for c in components} == {
      "RawCtrExampleGen", "StatisticsGen", "ImportSchemaGen",
      "StrictExampleValidator", "Transform", "CtrTuner", "Trainer",
      "latest_pushed_model", "warm_start_model", "Evaluator", "Pusher"}
  for component in components:
    assert fingerprint.CODE_FINGERPRINT in component.exec_properties


@pytest.mark.parametrize("component_id", [
    "RawCtrExampleGen", "StatisticsGen", "StrictExampleValidator",
    "Transform", "CtrTuner", "Trainer", "latest_pushed_model", "Evaluator",
    "Pusher"])
def test_a_change_to_any_module_a_component_runs_changes_its_key(
    code_copy, component_id):
  """Each source file of the component's import closure, edited in turn,
  changes its fingerprint (ImportSchemaGen runs TFX's code only)."""
  (component,) = [c for c in _components() if c.id == component_id]
  files = fingerprint.source_files(fingerprint.entry_modules(component))
  assert files
  before = _fingerprints()[component_id]
  for path in files:
    _edit(code_copy / path)
    after = _fingerprints()[component_id]
    assert after != before, path
    before = after


def test_a_helper_of_example_gen_reruns_example_gen(code_copy):
  before = _fingerprints()
  _edit(code_copy / "components" / "raw_example_gen" / "columnar.py")
  after = _fingerprints()
  changed = {name for name in before if before[name] != after[name]}
  assert changed == {"RawCtrExampleGen"}


def test_the_reader_reruns_statistics_transform_and_evaluator(code_copy):
  before = _fingerprints()
  _edit(code_copy / "components" / "tf_example_reader.py")
  after = _fingerprints()
  changed = {name for name in before if before[name] != after[name]}
  assert changed == {"StatisticsGen", "Transform", "Evaluator"}


def test_a_metric_loaded_by_name_reruns_the_evaluator(code_copy):
  before = _fingerprints()
  _edit(code_copy / "components" / "gate_metrics.py")
  after = _fingerprints()
  assert before["Evaluator"] != after["Evaluator"]


def test_model_change_reruns_the_trainer_only(code_copy):
  before = _fingerprints()
  _edit(code_copy / "trainer_module" / "models.py")
  after = _fingerprints()
  assert after["Transform"] == before["Transform"]
  assert after["Trainer"] != before["Trainer"]
  assert after["CtrTuner"] != before["CtrTuner"]


def test_transform_sources_are_what_preprocessing_fn_imports():
  # features.py reads the base hyperparameters' definition (hparams.py):
  # the walk follows that import too.
  assert fingerprint.source_files(["trainer_module.preprocessing"]) == [
      "trainer_module/__init__.py", "trainer_module/features.py",
      "trainer_module/hparams.py", "trainer_module/preprocessing.py"]


@pytest.mark.parametrize("name", ["features.py", "hparams.py",
                                  "preprocessing.py"])
def test_preprocessing_change_reruns_transform_and_trainer(code_copy, name):
  before = _fingerprints()
  _edit(code_copy / "trainer_module" / name)
  after = _fingerprints()
  assert after["Transform"] != before["Transform"]
  assert after["Trainer"] != before["Trainer"]


def test_a_new_module_preprocessing_imports_is_in_the_transform_key(
    code_copy):
  """No list to keep: a helper preprocessing_fn starts to import (even
  inside a function) joins the key, and so do its own edits."""
  preprocessing = code_copy / "trainer_module" / "preprocessing.py"
  before = _fingerprints()["Transform"]
  (code_copy / "trainer_module" / "buckets.py").write_text("EDGES = (1, 2)\n")
  assert _fingerprints()["Transform"] == before  # Not imported yet.
  source = preprocessing.read_text(encoding="utf-8")
  preprocessing.write_text(
      source + "\n\ndef _edges():\n"
      "  from trainer_module import buckets\n  return buckets.EDGES\n",
      encoding="utf-8")
  assert "trainer_module/buckets.py" in fingerprint.source_files(
      ["trainer_module.preprocessing"])
  imported = _fingerprints()["Transform"]
  assert imported != before
  _edit(code_copy / "trainer_module" / "buckets.py")
  assert _fingerprints()["Transform"] != imported


def _example_gen_executions(root, input_base):
  """Runs a pipeline of RawCtrExampleGen alone (fingerprinted as
  create_pipeline does) and returns the states of its executions."""
  gen = RawCtrExampleGen(input_base=str(input_base), dataset="criteo")
  fingerprint.add_code_fingerprint(gen)
  local_dag_runner.LocalDagRunner().run(tfx_pipeline.Pipeline(
      pipeline_name="fingerprint-test", pipeline_root=str(root),
      components=[gen], enable_cache=True,
      metadata_connection_config=metadata.sqlite_metadata_connection_config(
          str(root / "mlmd.db"))))
  store = mlmd.MetadataStore(
      metadata.sqlite_metadata_connection_config(str(root / "mlmd.db")))
  return [e.last_known_state for e in store.get_executions()]


@pytest.mark.slow
def test_a_rerun_after_a_code_change_misses_the_cache(tmp_path, code_copy):
  data = tmp_path / "data"
  data.mkdir()
  shutil.copy(SAMPLE, data)
  root = tmp_path / "root"
  state = metadata_store_pb2.Execution
  assert _example_gen_executions(root, data) == [state.COMPLETE]
  assert _example_gen_executions(root, data) == [state.COMPLETE,
                                                 state.CACHED]
  _edit(code_copy / "components" / "raw_example_gen" / "columnar.py")
  assert _example_gen_executions(root, data) == [
      state.COMPLETE, state.CACHED, state.COMPLETE]
