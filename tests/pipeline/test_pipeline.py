"""What create_pipeline builds, checked on the pipeline object (no run)."""

import os

from components import transform as transform_lib
from pipeline import config as config_lib
from pipeline import pipeline as pipeline_lib


def test_transform_computes_no_statistics_of_its_own(tmp_path):
  # StatisticsGen describes the raw data; TFX's pre- and post-transform
  # statistics were unread and made Beam hold every transformed example in
  # memory (Transform at 1M rows: 4.17 GB with them, 1.45 GB without;
  # docs/benchmark_data.md).
  config = config_lib.PipelineConfig.from_fields(
      dataset="criteo", data=str(tmp_path), output=str(tmp_path / "out"))
  pipeline = pipeline_lib.create_pipeline(config)
  (transform,) = [c for c in pipeline.components if c.id == "Transform"]
  assert transform.exec_properties["disable_statistics"] == 1
  assert not any("transform_stats" in key for key in transform.outputs)


def test_trainer_reads_raw_examples_through_the_transform_graph(tmp_path):
  # Transform only analyses (materialize=False): writing every transformed
  # example through Beam was about half of its time
  # (docs/benchmark_data.md). The Trainer and the Evaluator read the same
  # raw examples, and the Transform graph maps them, as serving does.
  config = config_lib.PipelineConfig.from_fields(
      dataset="criteo", data=str(tmp_path), output=str(tmp_path / "out"))
  components = {c.id: c for c in
                pipeline_lib.create_pipeline(config).components}
  transform = components["Transform"]
  assert "transformed_examples" not in transform.outputs
  raw = components["RawCtrExampleGen"].outputs["examples"]
  assert components["Trainer"].inputs["examples"] is raw
  assert components["Evaluator"].inputs["examples"] is raw
  assert (components["Trainer"].inputs["transform_graph"] is
          transform.outputs["transform_graph"])


def test_transform_writes_no_analyzer_cache(tmp_path):
  # Nothing reads it back, and writing it cost 27% of the analysis at 1M
  # rows (docs/benchmark_data.md).
  config = config_lib.PipelineConfig.from_fields(
      dataset="criteo", data=str(tmp_path), output=str(tmp_path / "out"))
  (transform,) = [c for c in pipeline_lib.create_pipeline(config).components
                  if c.id == "Transform"]
  assert "updated_analyzer_cache" not in transform.outputs
  assert "analyzer_cache" not in transform.inputs


def test_transform_reads_with_tensorflow(tmp_path):
  # TFX's Transform with TensorFlow's reader: the same outputs
  # (tests/components/test_transform.py) at about half the CPU per row
  # (docs/benchmark_data.md).
  config = config_lib.PipelineConfig.from_fields(
      dataset="criteo", data=str(tmp_path), output=str(tmp_path / "out"))
  (transform,) = [c for c in pipeline_lib.create_pipeline(config).components
                  if c.id == "Transform"]
  assert transform.executor_spec.executor_class is transform_lib.Executor


def test_a_worker_per_core_only_on_big_local_inputs():
  big = pipeline_lib.MULTIPROCESS_MIN_ROWS
  local = config_lib.DIRECT_BEAM_ARGS
  assert pipeline_lib.multiprocess_beam_args(local, big, 2) == [
      "--direct_running_mode=multi_processing", "--direct_num_workers=2"]
  # Small or unknown inputs, one core, another runner: the pipeline's args.
  for args, rows, cores in ((local, big - 1, 2), (local, None, 2),
                            (local, big, 1),
                            (("--runner=DataflowRunner",), big, 2)):
    assert pipeline_lib.multiprocess_beam_args(args, rows, cores) == []


def test_big_local_inputs_give_statistics_its_workers(tmp_path):
  data = tmp_path / "train.txt"
  # Only the row estimate (bytes over line length) reads the file here.
  data.write_bytes(b"0\n" * (pipeline_lib.MULTIPROCESS_MIN_ROWS + 1000))
  config = config_lib.PipelineConfig.from_fields(
      dataset="criteo", data=str(data), output=str(tmp_path / "out"))
  assert config.estimated_rows >= pipeline_lib.MULTIPROCESS_MIN_ROWS
  components = {c.id: c for c in
                pipeline_lib.create_pipeline(config).components}
  # TFX puts the pipeline's args first: the component's own come last and
  # win. The other Beam components keep the pipeline's.
  workers = pipeline_lib.multiprocess_beam_args(
      config.runner.beam_args, config.estimated_rows, os.cpu_count())
  assert components["StatisticsGen"].executor_spec.beam_pipeline_args == (
      list(config.runner.beam_args) + workers)
  # Transform: two workers took its peak past 4 GiB at 10M rows.
  for name in ("RawCtrExampleGen", "Transform", "Evaluator"):
    assert components[name].executor_spec.beam_pipeline_args == list(
        config.runner.beam_args)


def test_daily_data_trains_on_the_window_and_gates_on_the_day(tmp_path):
  # With {SPAN}: Transform, the Tuner and the Trainer read the span
  # window's days; the statistics, the validator, the warm start and the
  # Evaluator the day ingested (components/span_window.py).
  daily = str(tmp_path / "logs") + "/day-{SPAN}/"
  config = config_lib.PipelineConfig.from_fields(
      dataset="criteo", data=daily, output=str(tmp_path / "out"),
      span="rolling:3", tune=True)
  components = {c.id: c for c in
                pipeline_lib.create_pipeline(config).components}
  window = components[pipeline_lib.SPAN_WINDOW_ID]
  day = components["RawCtrExampleGen"].outputs["examples"]
  assert window.inputs["examples"] is day
  assert (window.exec_properties["days"],
          window.exec_properties["registry"]) == (
              3, str(tmp_path / "out" / "examples_by_span"))
  for name in ("Transform", "CtrTuner", "Trainer"):
    assert components[name].inputs["examples"] is window.outputs["window"]
  for name in ("StatisticsGen", "StrictExampleValidator", "Evaluator",
               pipeline_lib.WARM_START_ID):
    assert components[name].inputs["examples"] is day
  # A day, or data without {SPAN}: a window of one day, or none.
  one_day = config_lib.PipelineConfig.from_fields(
      dataset="criteo", data=daily, output=str(tmp_path / "out"), span="4")
  assert {c.id: c for c in pipeline_lib.create_pipeline(one_day).components}[
      pipeline_lib.SPAN_WINDOW_ID].exec_properties["days"] == 1
  plain = config_lib.PipelineConfig.from_fields(
      dataset="criteo", data=str(tmp_path), output=str(tmp_path / "out"))
  assert pipeline_lib.SPAN_WINDOW_ID not in {
      c.id for c in pipeline_lib.create_pipeline(plain).components}
