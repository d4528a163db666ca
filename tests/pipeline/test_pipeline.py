"""What create_pipeline builds, checked on the pipeline object (no run)."""

from pipeline import config as config_lib
from pipeline import pipeline as pipeline_lib


def test_transform_computes_no_statistics_of_its_own(tmp_path):
  # StatisticsGen describes the raw data; TFX's pre- and post-transform
  # statistics were unread and made Beam hold every transformed example in
  # memory (Transform at 1M rows: 4.17 GB with them, 1.45 GB without;
  # docs/benchmark_data.md).
  config = config_lib.PipelineConfig(dataset="criteo", data=str(tmp_path),
                                     output=str(tmp_path / "out"))
  pipeline = pipeline_lib.create_pipeline(config)
  (transform,) = [c for c in pipeline.components if c.id == "Transform"]
  assert transform.exec_properties["disable_statistics"] == 1
  assert not any("transform_stats" in key for key in transform.outputs)
