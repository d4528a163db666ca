"""RawCtrExampleGen inside TFX pipelines: runners, downstream, Kubeflow V2."""

import json
import os
import pathlib
import shutil

import ml_metadata as mlmd
import pytest
from tensorflow_metadata.proto.v0 import statistics_pb2
from tfx.components import StatisticsGen
from tfx.orchestration import metadata
from tfx.orchestration import pipeline as tfx_pipeline
from tfx.orchestration.beam import beam_dag_runner
from tfx.orchestration.local import local_dag_runner
from tfx.utils import io_utils

from components.raw_example_gen.component import RawCtrExampleGen
from components.raw_example_gen.executor import SUMMARY_FILE_NAME
from trainer_module import features

SAMPLES = pathlib.Path(__file__).resolve().parents[2] / "data" / "samples"


def _pipeline(root: pathlib.Path, input_base: pathlib.Path):
  gen = RawCtrExampleGen(input_base=str(input_base), dataset="criteo",
                         split="sequential")
  stats = StatisticsGen(examples=gen.outputs["examples"])
  return tfx_pipeline.Pipeline(
      pipeline_name="raw-example-gen-test", pipeline_root=str(root),
      components=[gen, stats],
      metadata_connection_config=metadata.sqlite_metadata_connection_config(
          str(root / "mlmd.db")))


@pytest.mark.parametrize("runner", [
    local_dag_runner.LocalDagRunner,
    pytest.param(beam_dag_runner.BeamDagRunner, marks=pytest.mark.slow),
])
def test_statistics_gen_reads_the_examples(tmp_path, runner):
  shutil.copy(SAMPLES / "criteo_sample.txt", tmp_path / "criteo_sample.txt")
  root = tmp_path / "root"
  runner().run(_pipeline(root, tmp_path))

  store = mlmd.MetadataStore(
      metadata.sqlite_metadata_connection_config(str(root / "mlmd.db")))
  (examples,) = store.get_artifacts_by_type("Examples")
  props = examples.custom_properties
  assert props["rows_read"].int_value == 200
  assert props["bad_rows"].int_value == 0
  assert props["train_rows"].int_value + props["eval_rows"].int_value == 200
  with open(os.path.join(examples.uri, SUMMARY_FILE_NAME)) as f:
    assert json.load(f)["split_rows"]["eval"] == props["eval_rows"].int_value

  (statistics,) = store.get_artifacts_by_type("ExampleStatistics")
  stats = io_utils.read_bytes_file(
      os.path.join(statistics.uri, "Split-train", "FeatureStats.pb"))
  dataset = statistics_pb2.DatasetFeatureStatisticsList.FromString(
      stats).datasets[0]
  types = {f.path.step[0]: f.type for f in dataset.features}
  spec = features.CRITEO
  assert set(types) == set(spec.raw_features)
  assert {types[c] for c in spec.int_features} == {
      statistics_pb2.FeatureNameStatistics.INT}
  assert {types[c] for c in spec.str_categorical} == {
      statistics_pb2.FeatureNameStatistics.STRING}


def test_kubeflow_v2_compiles_with_the_file_based_driver(tmp_path):
  pytest.importorskip("kfp.pipeline_spec")
  # Imported here: it needs kfp-pipeline-spec, which importorskip checks.
  from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner  # pylint: disable=g-import-not-at-top,line-too-long
  runner = kubeflow_v2_dag_runner.KubeflowV2DagRunner(
      config=kubeflow_v2_dag_runner.KubeflowV2DagRunnerConfig(
          default_image="gcr.io/project/image:tag"),
      output_dir=str(tmp_path), output_filename="pipeline.json")
  runner.run(_pipeline(tmp_path / "root", tmp_path), write_out=True)
  spec = json.loads((tmp_path / "pipeline.json").read_text())
  executors = spec["pipelineSpec"]["deploymentSpec"]["executors"]
  container = executors["RawCtrExampleGen_executor"]["container"]
  assert ("components.raw_example_gen.executor.Executor"
          in container["args"])
  assert "preCacheCheck" in container["lifecycle"]
