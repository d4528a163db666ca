"""LatestPushedModel: the served model as the Evaluator's baseline."""

import json
import os

from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2
from google.protobuf import struct_pb2
from kfp.pipeline_spec import pipeline_spec_pb2
from tfx.orchestration.kubeflow.v2.container import (
    kubeflow_v2_entrypoint_utils)
from tfx.types import standard_artifacts

from components import baseline
from pipeline import config as config_lib
from pipeline import metadata
from pipeline import pipeline as pipeline_lib


def _version(serving, name, with_model=True):
  path = serving / name
  path.mkdir(parents=True)
  if with_model:
    (path / "saved_model.pb").write_text(name)
  (path / "variables").mkdir()
  (path / "variables" / "variables.index").write_text(name)
  return path


def _resolve(tmp_path, serving):
  model = standard_artifacts.Model()
  model.uri = str(tmp_path / "baseline")
  os.makedirs(model.uri)
  destination = {"filesystem": {"base_directory": str(serving)}}
  baseline.Executor().Do(
      {}, {baseline.MODEL_KEY: [model]},
      {baseline.PUSH_DESTINATION_KEY: json.dumps(destination)})
  return model


def test_latest_is_the_largest_numeric_version_with_a_saved_model(tmp_path):
  serving = tmp_path / "serving"
  assert baseline.latest_pushed_version(str(serving)) is None
  serving.mkdir()
  assert baseline.latest_pushed_version(str(serving)) is None
  _version(serving, "20")
  _version(serving, "100")
  _version(serving, "300", with_model=False)  # An interrupted push.
  _version(serving, "999-old")  # Not a version TF Serving would load.
  assert baseline.latest_pushed_version(str(serving)) == str(serving / "100")


def test_first_run_gives_an_empty_model_marked_not_found(tmp_path):
  model = _resolve(tmp_path, tmp_path / "serving")
  assert model.get_int_custom_property(baseline.FOUND_PROPERTY) == 0
  assert not baseline.is_found(model)
  assert os.listdir(model.uri) == []


def test_the_served_model_is_copied_as_a_serving_model(tmp_path):
  serving = tmp_path / "serving"
  _version(serving, "1700000000")
  latest = _version(serving, "1700000100")
  model = _resolve(tmp_path, serving)
  assert baseline.is_found(model)
  assert model.get_string_custom_property(
      baseline.VERSION_PROPERTY) == "1700000100"
  assert model.get_string_custom_property(
      baseline.SOURCE_PROPERTY) == str(latest)
  copied = os.path.join(model.uri, "Format-Serving")
  with open(os.path.join(copied, "saved_model.pb")) as f:
    assert f.read() == "1700000100"
  assert os.path.exists(os.path.join(copied, "variables", "variables.index"))


def test_kubeflow_custom_properties_are_read_too():
  """On Kubeflow the property comes back as artifact metadata, a JSON
  number (1.0), parsed by TFX's container entrypoint."""
  for value, found in ((1.0, True), (0.0, False)):
    runtime = pipeline_spec_pb2.ArtifactList(artifacts=[
        pipeline_spec_pb2.RuntimeArtifact(
            name="7", uri="gs://b/model",
            type=pipeline_spec_pb2.ArtifactTypeSchema(
                instance_schema="title: tfx.Model\ntype: object\n"),
            metadata=struct_pb2.Struct(
                fields={baseline.FOUND_PROPERTY: struct_pb2.Value(
                    number_value=value)}))])
    model, = kubeflow_v2_entrypoint_utils.parse_raw_artifact_dict(
        {"model": runtime})["model"]
    assert baseline.is_found(model) is found


def test_outcome_and_report_skip_baseline_copies():
  store = metadata_store.MetadataStore(
      metadata_store_pb2.ConnectionConfig(
          fake_database=metadata_store_pb2.FakeDatabaseConfig()))
  type_id = store.put_artifact_type(metadata_store_pb2.ArtifactType(
      name="Model"))
  trained = metadata_store_pb2.Artifact(
      type_id=type_id, uri="trainer/model",
      state=metadata_store_pb2.Artifact.LIVE)
  copy = metadata_store_pb2.Artifact(
      type_id=type_id, uri="baseline/model",
      state=metadata_store_pb2.Artifact.LIVE)
  copy.custom_properties[baseline.FOUND_PROPERTY].int_value = 1
  store.put_artifacts([trained, copy])  # The copy is the newer one.
  assert metadata.latest_artifact(store, "Model").uri == "trainer/model"


def test_local_runners_never_cache_the_baseline(tmp_path):
  config = config_lib.PipelineConfig.from_fields(dataset="criteo", data=str(tmp_path),
                                     output=str(tmp_path / "out"))
  ir = pipeline_lib.local_ir(pipeline_lib.create_pipeline(config))
  caching = {node.pipeline_node.node_info.id:
             node.pipeline_node.execution_options.caching_options.enable_cache
             for node in ir.nodes}
  assert caching.pop(pipeline_lib.BASELINE_ID) is False
  assert "Trainer" in caching and all(caching.values())
