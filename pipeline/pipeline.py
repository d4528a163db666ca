"""`create_pipeline`: the one pipeline definition every runner uses.

raw files -> RawCtrExampleGen -> StatisticsGen -> ImportSchemaGen ->
StrictExampleValidator -> Transform -> Trainer -> Evaluator (against the
model being served) -> Pusher.
With tuning, a Tuner (or an Importer of an earlier tuning result) sits
between Transform and the Trainer and feeds it the best hyperparameters.
With daily data ({SPAN}), a SpanWindow gives Transform, the Tuner and the
Trainer the day ingested, or a window of days (`--span rolling:K`, `A-B`).
Functions are referenced by dotted path (no module_file), so the same
definition runs locally and in a container that has this package installed.
"""

import os
from typing import List, Optional, Tuple

from kfp.pipeline_spec import pipeline_spec_pb2
import tensorflow_data_validation as tfdv
import tensorflow_model_analysis as tfma
from tfx import v1 as tfx
from tfx.dsl.compiler import compiler
from tfx.dsl.components.base import base_component
from tfx.proto.orchestration import pipeline_pb2 as ir_pb2

from components import gate_metrics
from components import prediction_difference
from components.evaluator import Evaluator
from components.baseline import LatestPushedModel
from components.pusher import Pusher
from components.raw_example_gen import spans
from components.raw_example_gen.component import RawCtrExampleGen
from components.span_window import SpanWindow
from components.statistics_gen import StatisticsGen
from components.strict_example_validator import StrictExampleValidator
from components.trainer import Trainer
from components.transform import Transform
from components.tuner import CtrTuner
from pipeline.code_fingerprint import add_code_fingerprint
from pipeline.config import DIRECT_BEAM_ARGS
from pipeline.config import PipelineConfig
from trainer_module.contract import ID_FREQUENCY
from trainer_module.contract import LR_OUTPUT
from trainer_module.contract import PREDICTION_KEY
from trainer_module.contract import SLICING_SIGNATURE
from trainer_module.contract import replica_output

# The functions TFX calls by dotted path (code_fingerprint reads their
# modules' imports into the components' cache keys).
PREPROCESSING_FN = "trainer_module.preprocessing.preprocessing_fn"
RUN_FN = "trainer_module.trainer.run_fn"
TUNER_FN = "trainer_module.tuner.tuner_fn"

BASELINE_ID = "latest_pushed_model"
# The Trainer's warm start: the model served when this data was first
# trained on (cached per examples: components/baseline.py).
WARM_START_ID = "warm_start_model"
EXAMPLE_GEN_ID = "RawCtrExampleGen"
# Daily data: the spans Transform and the Trainer read
# (components/span_window.py).
SPAN_WINDOW_ID = "span_window"
# Nodes that read state outside ML Metadata (the serving directory): a cached
# result would be stale, so no runner may reuse one. TFX caches per pipeline;
# `local_ir` and kubeflow.compiler switch these nodes off one by one.
UNCACHED_NODES = (BASELINE_ID,)

# StatisticsGen reads about this many rows of a bigger input (see
# create_stats_options).
STATISTICS_SAMPLE_ROWS = 1_000_000
# From this many input rows on, the local StatisticsGen runs one Beam worker
# process per core (multiprocess_beam_args).
MULTIPROCESS_MIN_ROWS = 500_000
# Fixed-width buckets (width 1/N) of TFMA's calibration plot: fine enough
# that the report's deciles of predicted CTR, merged from them, stay close
# to equal size at click rates of a few percent (TFMA's default).
CALIBRATION_PLOT_BUCKETS = 1000

_RESOURCE_SPEC = (
    pipeline_spec_pb2.PipelineDeploymentConfig.PipelineContainerSpec
    .ResourceSpec)


def split_input(path: str) -> Tuple[str, str]:
  """(input_base, file pattern) for a file or a directory of raw files.

  With TFX's {SPAN} in it: the folder above the span's (spans.py).
  A URI (gs://...) cannot be looked at offline, so it names a directory only
  when it ends with '/' (or is a bare bucket); otherwise its last part is the
  file name or glob.
  """
  if spans.has_span(path):  # Daily data: the span's folder or files.
    base, pattern = spans.split_span_path(path)
    return (base if "://" in path else os.path.abspath(base)), pattern
  if "://" in path:
    head, _, tail = path.rpartition("/")
    if path.endswith("/") or head.endswith(":/"):
      return path.rstrip("/"), "*"
    return head, tail
  path = os.path.abspath(path)
  if os.path.isdir(path):
    return path, "*"
  return os.path.dirname(path), os.path.basename(path)


def create_stats_options(rows: Optional[int]) -> tfdv.StatsOptions:
  """StatisticsGen's TFDV options: bounded cost and memory at any size.

  The statistics feed only the schema gate, whose checks (each feature's
  type, presence, value count, the label's domain) hold on a sample: above
  STATISTICS_SAMPLE_ROWS input `rows` (None: unknown) StatisticsGen keeps a
  hash sample of about STATISTICS_SAMPLE_ROWS records, before decoding them
  (components.statistics_gen). Top-k and unique counts of the 26
  high-cardinality string fields come from sketches (Misra-Gries, KMV)
  instead of exact counts of every distinct id: docs/benchmark_data.md.
  """
  rate = (STATISTICS_SAMPLE_ROWS / rows
          if rows and rows > STATISTICS_SAMPLE_ROWS else None)
  return tfdv.StatsOptions(sample_rate=rate,
                           use_sketch_based_topk_uniques=True)


def multiprocess_beam_args(beam_args: Tuple[str, ...], rows: Optional[int],
                           cores: int) -> List[str]:
  """StatisticsGen's own Beam arguments, added to the pipeline's
  `beam_args`.

  StatisticsGen reads and hashes every input record, on one core in the
  in-memory runner. With the default local runner (DIRECT_BEAM_ARGS) and at
  least MULTIPROCESS_MIN_ROWS input `rows`, it runs one worker process per
  core: 1.4x faster at 1M rows and 1.7x at 10M on 2 cores, measured when it
  read with Beam's Python reader (docs/benchmark_data.md; its tf.data reader
  was measured with two workers only). Its counts (what the schema gate
  checks) are the same; its means and sketches differ in summation and
  merge order. Transform keeps one worker: two were 1.7x faster at 10M rows
  but took its process tree from 2.3 to 4.3 GiB, past the 4 GiB bound (each
  worker loads TensorFlow and holds its own counts). The Evaluator keeps
  one: it was slower with two at 20k eval rows. Other runners, unknown
  sizes and one core: none.
  """
  if (tuple(beam_args) != DIRECT_BEAM_ARGS or cores < 2 or not rows or
      rows < MULTIPROCESS_MIN_ROWS):
    return []
  return ["--direct_running_mode=multi_processing",
          f"--direct_num_workers={cores}"]


def create_eval_config(config: PipelineConfig) -> tfma.EvalConfig:
  """TFMA config: CTR metrics through the serving signature, and the gate.

  Slices: overall, each of config.eval_slice_features, and the id-frequency
  bucket that the model's SLICING_SIGNATURE computes from the Transform
  vocabularies. The gate applies to the overall slice only (a threshold on
  every slice would let one small slice block every push): the AUC floor,
  the calibration band and, when the Evaluator has a baseline (the latest
  served model), no AUC drop / log-loss rise beyond the tolerances. The
  thresholds sit on the MetricConfigs: MetricsSpec-level thresholds only
  reach metrics computed in the model graph, not TFMA's own.

  Every check reads a confidence bound of components.gate_metrics, not the
  point estimate: it fails only when the difference is beyond its margin
  and beyond the eval rows' noise. The margins keep their meaning: the AUC
  floor is on auc_upper, the band on calibration_upper (>= low) and
  calibration_lower (<= high), the change checks on the paired candidate-
  minus-served auc_change_upper and log_loss_change_lower.

  The logistic-regression baseline the Trainer exports beside the model
  (output LR_OUTPUT of the same signature) gets the same metrics on the
  same slices, with its AUC and calibration intervals, from the candidate
  only (the latest blessed model is compared
  on the model's output). The gate's check against it is
  gate_metrics.AUCOverLogisticRegression, model AUC minus LR AUC paired on
  the same rows, its upper bound at least -config.gate.max_auc_below_lr.

  Small slices are computed and left out of the report (min_slice_size)
  rather than dropped with TFMA's Options.min_slice_size: TFMA 0.47 then
  reports every gated metric of a dropped slice as a failed threshold
  ("Metric not found"), even though the threshold is for the overall slice.
  """
  overall = [tfma.SlicingSpec()]

  def on_overall(**threshold) -> List[tfma.PerSliceMetricThreshold]:
    return [tfma.PerSliceMetricThreshold(
        slicing_specs=overall, threshold=tfma.MetricThreshold(**threshold))]

  def bounds(**values) -> tfma.GenericValueThreshold:
    return tfma.GenericValueThreshold(
        **{k: {"value": v} for k, v in values.items()})

  def gate(metric, bound: str, **threshold) -> tfma.MetricConfig:
    return tfma.MetricConfig(
        class_name=metric.__name__, module=gate_metrics.__name__,
        config=f'"bound": "{bound}"',
        per_slice_thresholds=on_overall(**threshold) if threshold else [])

  def change(direction, value: float) -> tfma.GenericChangeThreshold:
    return tfma.GenericChangeThreshold(direction=direction,
                                       absolute={"value": value})

  low, high = config.gate.calibration_band
  metrics = [tfma.MetricConfig(class_name=name) for name in (
      "ExampleCount", "MeanLabel", "MeanPrediction")]
  # Fine fixed-width buckets: the report merges them by example count into
  # deciles of predicted CTR and the reliability figure's points.
  metrics.append(tfma.MetricConfig(
      class_name="CalibrationPlot",
      config=f'"num_buckets": {CALIBRATION_PLOT_BUCKETS}'))
  # The baseline's own AUC and calibration intervals: shown, not checked.
  lr_metrics = [tfma.MetricConfig(class_name=m.class_name, config=m.config)
                for m in metrics] + [tfma.MetricConfig(class_name=name) for name
                                     in ("AUC", "BinaryCrossEntropy",
                                         "Calibration")] + [
      gate(gate_metrics.AUCInterval, gate_metrics.UPPER),
      gate(gate_metrics.CalibrationInterval, gate_metrics.UPPER)]
  lr_check = gate(
      gate_metrics.AUCOverLogisticRegression, gate_metrics.UPPER,
      **({} if config.gate.max_auc_below_lr is None else {
          "value_threshold": bounds(
              lower_bound=-config.gate.max_auc_below_lr)}))
  metrics += [tfma.MetricConfig(class_name=name) for name in (
      "AUC", "BinaryCrossEntropy", "Calibration")] + [
      gate(gate_metrics.AUCInterval, gate_metrics.UPPER,
           value_threshold=bounds(lower_bound=config.gate.min_auc)),
      gate(gate_metrics.CalibrationInterval, gate_metrics.UPPER,
           value_threshold=bounds(lower_bound=low)),
      gate(gate_metrics.CalibrationInterval, gate_metrics.LOWER,
           value_threshold=bounds(upper_bound=high))]
  served_checks = [
      gate(gate_metrics.AUCChange, gate_metrics.UPPER, change_threshold=change(
          tfma.MetricDirection.HIGHER_IS_BETTER, -config.gate.max_auc_drop)),
      gate(gate_metrics.LogLossChange, gate_metrics.LOWER,
           change_threshold=change(tfma.MetricDirection.LOWER_IS_BETTER,
                                   config.gate.max_logloss_increase))]
  slices = overall + [tfma.SlicingSpec(feature_keys=[name]) for name in
                      config.eval_slice_features + (ID_FREQUENCY,)]
  # One spec: the Evaluator adds the baseline's as a copy when there is a
  # baseline, so both models must have SLICING_SIGNATURE (every model this
  # pipeline exports does). TFMA 0.47 does not slice on the candidate's
  # transformed features alone when the baseline has none.
  metrics_specs = [
      tfma.MetricsSpec(metrics=metrics),
      # The candidate only: the baseline model may predate the output.
      tfma.MetricsSpec(metrics=lr_metrics, output_names=[LR_OUTPUT],
                       model_names=[tfma.CANDIDATE_KEY]),
      tfma.MetricsSpec(metrics=[lr_check] + served_checks,
                       model_names=[tfma.CANDIDATE_KEY])]
  metrics_specs += _prediction_difference_specs(config, on_overall, bounds)
  return tfma.EvalConfig(
      model_specs=[tfma.ModelSpec(
          signature_name="serving_default",
          preprocessing_function_names=[SLICING_SIGNATURE],
          label_key=config.spec.label,
          prediction_key=PREDICTION_KEY,
          model_type=tfma.TF_GENERIC)],
      slicing_specs=slices,
      metrics_specs=metrics_specs)


def metric_modules(eval_config: tfma.EvalConfig) -> List[str]:
  """The modules of the custom TFMA metrics `eval_config` names: the
  Evaluator loads them by name."""
  return sorted({metric.module for spec in eval_config.metrics_specs
                 for metric in spec.metrics if metric.module})


def _prediction_difference_specs(config: PipelineConfig, on_overall, bounds
                                 ) -> List[tfma.MetricsSpec]:
  """Prediction Difference (components.prediction_difference): against the
  baseline model (churn, when there is one) always; with replicas, between
  them (bounded by config.gate.max_pd on the overall slice when set) and each
  replica output's AUC (only AUC: TFMA's cost is per output and combiner,
  docs/benchmark_eval.md). The candidate only: the baseline model has no
  replica outputs."""
  churn = tfma.MetricConfig(
      class_name=prediction_difference.PredictionDifferenceVsBaseline.__name__,
      module=prediction_difference.__name__)
  specs = [tfma.MetricsSpec(metrics=[churn])]
  if config.trainer.served_replicas > 1:
    replica_pd = tfma.MetricConfig(
        class_name=prediction_difference.ReplicaPredictionDifference.__name__,
        module=prediction_difference.__name__,
        config=f'"replicas": {config.trainer.served_replicas}',
        per_slice_thresholds=(
            on_overall(value_threshold=bounds(upper_bound=config.gate.max_pd))
            if config.gate.max_pd is not None else []))
    specs += [
        tfma.MetricsSpec(metrics=[replica_pd],
                         model_names=[tfma.CANDIDATE_KEY]),
        tfma.MetricsSpec(
            metrics=[tfma.MetricConfig(class_name="AUC")],
            output_names=[replica_output(i)
                          for i in range(config.trainer.served_replicas)],
            model_names=[tfma.CANDIDATE_KEY])]
  return specs


def create_pipeline(config: PipelineConfig,
                    until_transform: bool = False) -> tfx.dsl.Pipeline:
  """The TFX pipeline for `config`, runner-agnostic.

  until_transform=True ends it at Transform: tools that train many models on
  one transformed dataset (commands.experiments.study) run the same ingestion/Transform.
  """
  input_base, pattern = split_input(config.data)
  example_gen = RawCtrExampleGen(
      input_base=input_base,
      input_pattern=pattern,
      range_config=spans.range_config(config.ingestion.span),
      dataset=config.dataset,
      split=config.ingestion.split,
      eval_fraction=config.eval_fraction,
      max_bad_fraction=config.ingestion.max_bad_fraction,
      skip_foreign_files=config.ingestion.skip_foreign_files
  ).with_id(EXAMPLE_GEN_ID)
  statistics_gen = StatisticsGen(
      examples=example_gen.outputs["examples"],
      stats_options=create_stats_options(config.estimated_rows))
  multiprocess = multiprocess_beam_args(
      config.runner.beam_args, config.estimated_rows, os.cpu_count() or 1)
  if multiprocess:
    statistics_gen.with_beam_pipeline_args(multiprocess)
  schema_gen = tfx.components.ImportSchemaGen(schema_file=config.schema_path)
  example_validator = StrictExampleValidator(
      examples=example_gen.outputs["examples"],
      statistics=statistics_gen.outputs["statistics"],
      schema=schema_gen.outputs["schema"],
      label_feature=config.spec.label)
  # What Transform, the Tuner and the Trainer read: the day ingested, or
  # with daily data its window of spans, which every daily run records.
  window = SpanWindow(
      examples=example_gen.outputs["examples"],
      days=spans.window_days(config.ingestion.span),
      registry=config.span_registry_dir).with_id(SPAN_WINDOW_ID) if (
          spans.has_span(config.data)) else None
  training_examples = (window.outputs["window"] if window else
                       example_gen.outputs["examples"])
  transform = Transform(
      examples=training_examples,
      schema=schema_gen.outputs["schema"],
      preprocessing_fn=PREPROCESSING_FN,
      custom_config=config.transform_config,
      # StatisticsGen already describes the raw data and nothing reads TFDV
      # statistics of the transformed data; computing them made Beam buffer
      # every transformed example in memory (docs/benchmark_data.md).
      disable_statistics=True,
      # Transform only analyses: the Trainer applies its graph to
      # ExampleGen's raw examples in tf.data, as serving does. Writing
      # transformed examples through Beam's per-record Python was half of
      # Transform's time (docs/benchmark_data.md).
      materialize=False,
      # Nothing feeds the cache back (no analyzer_cache input), and writing
      # it made the analysis 27% slower per row (docs/benchmark_data.md).
      disable_analyzer_cache=True)
  # Transform must not run on data the validator rejected.
  transform.add_upstream_node(example_validator)
  # The Trainer's base hyperparameters: tuned here, imported from an earlier
  # tuning, or (neither) the config's. run_fn applies the scaling rule.
  hparams_source, hyperparameters = None, None
  if config.tuning.tune:
    hparams_source = CtrTuner(
        tuner_fn=TUNER_FN,
        examples=training_examples,
        transform_graph=transform.outputs["transform_graph"],
        schema=schema_gen.outputs["schema"],
        custom_config=config.tuner_config)
    hyperparameters = hparams_source.outputs["best_hyperparameters"]
  elif config.tuning.hparams_from:
    hparams_source = tfx.dsl.Importer(
        source_uri=config.tuning.hparams_from,
        artifact_type=tfx.types.standard_artifacts.HyperParameters
    ).with_id("HyperParametersImporter")
    hyperparameters = hparams_source.outputs["result"]
  push_destination = tfx.proto.PushDestination(
      filesystem=tfx.proto.PushDestination.Filesystem(
          base_directory=config.serving_dir))
  warm_start = LatestPushedModel(
      push_destination=push_destination,
      examples=example_gen.outputs["examples"]).with_id(WARM_START_ID) if (
          config.trainer.warm_start) else None
  trainer = Trainer(
      run_fn=RUN_FN,
      examples=training_examples,
      transform_graph=transform.outputs["transform_graph"],
      schema=schema_gen.outputs["schema"],
      hyperparameters=hyperparameters,
      base_model=warm_start.outputs["model"] if warm_start else None,
      custom_config=config.trainer_config)
  if config.runner.gpus:
    # KubeflowV2DagRunner turns this into the Trainer pod's resource limits
    # (and the Tuner's: its trials train the same model); the local runners
    # ignore it.
    for node in [trainer] + ([hparams_source] if config.tuning.tune else []):
      node.with_platform_config(_RESOURCE_SPEC(
          accelerator=_RESOURCE_SPEC.AcceleratorConfig(
              type=config.runner.gpu_type, count=config.runner.gpus)))
  # The baseline of the no-regression checks: the model being served (none
  # on the first run: absolute checks alone). A container step, so it runs
  # on open-source Kubeflow too (see components/baseline.py).
  baseline = LatestPushedModel(
      push_destination=push_destination).with_id(BASELINE_ID)
  eval_config = create_eval_config(config)
  evaluator = Evaluator(
      examples=example_gen.outputs["examples"],
      model=trainer.outputs["model"],
      baseline_model=baseline.outputs["model"],
      schema=schema_gen.outputs["schema"],
      eval_config=eval_config)
  pusher = Pusher(
      model=trainer.outputs["model"],
      model_blessing=evaluator.outputs["blessing"],
      push_destination=push_destination)
  components: List = [example_gen, statistics_gen, schema_gen,
                      example_validator, transform, trainer, baseline,
                      evaluator, pusher]
  if hparams_source:
    components.insert(components.index(trainer), hparams_source)
  if warm_start:
    components.insert(components.index(trainer), warm_start)
  if window:
    components.insert(components.index(transform), window)
  for component in components:
    if isinstance(component, base_component.BaseComponent):  # Not Importer.
      add_code_fingerprint(component, metric_modules(eval_config)
                           if component is evaluator else ())
  if until_transform:
    components = components[:components.index(transform) + 1]
  if config.tuning.stop_after_tuner:
    components = components[:components.index(hparams_source) + 1]
  return tfx.dsl.Pipeline(
      pipeline_name=config.pipeline_name,
      pipeline_root=config.pipeline_root,
      components=components,
      enable_cache=True,
      metadata_connection_config=(
          tfx.orchestration.metadata.sqlite_metadata_connection_config(
              config.metadata_path) if config.runner.local_metadata else None),
      beam_pipeline_args=list(config.runner.beam_args))


def local_ir(pipeline: tfx.dsl.Pipeline) -> ir_pb2.Pipeline:
  """`pipeline` compiled for the local runners' `run_with_ir`, with caching
  off for UNCACHED_NODES (the rest as `pipeline.enable_cache` says)."""
  ir = compiler.Compiler().compile(pipeline)
  for node in ir.nodes:
    if node.pipeline_node.node_info.id in UNCACHED_NODES:
      node.pipeline_node.execution_options.caching_options.enable_cache = (
          False)
  return ir
