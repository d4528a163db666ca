"""`create_pipeline`: the one pipeline definition every runner uses.

raw files -> RawCtrExampleGen -> StatisticsGen -> ImportSchemaGen ->
ExampleValidator -> Transform -> Trainer -> Evaluator -> Pusher.
Functions are referenced by dotted path (no module_file), so the same
definition runs locally and in a container that has this package installed.
"""

import os
from typing import List, Tuple

from kfp.pipeline_spec import pipeline_spec_pb2
import tensorflow_model_analysis as tfma
from tfx import v1 as tfx

from components.raw_example_gen import RawCtrExampleGen
from components.strict_example_validator import StrictExampleValidator
from pipeline.config import PipelineConfig
from trainer_module.trainer import PREDICTION_KEY

PREPROCESSING_FN = "trainer_module.preprocessing.preprocessing_fn"
RUN_FN = "trainer_module.trainer.run_fn"

_RESOURCE_SPEC = (
    pipeline_spec_pb2.PipelineDeploymentConfig.PipelineContainerSpec
    .ResourceSpec)


def split_input(path: str) -> Tuple[str, str]:
  """(input_base, file pattern) for a file or a directory of raw files.

  A URI (gs://...) cannot be looked at offline, so it names a directory only
  when it ends with '/' (or is a bare bucket); otherwise its last part is the
  file name or glob.
  """
  if "://" in path:
    head, _, tail = path.rpartition("/")
    if path.endswith("/") or head.endswith(":/"):
      return path.rstrip("/"), "*"
    return head, tail
  path = os.path.abspath(path)
  if os.path.isdir(path):
    return path, "*"
  return os.path.dirname(path), os.path.basename(path)


def create_eval_config(config: PipelineConfig) -> tfma.EvalConfig:
  """TFMA config: CTR metrics through the serving signature, gated overall.

  Thresholds live in per_slice_thresholds restricted to the overall slice:
  a plain threshold would apply to every slice and one small slice could
  block every push.
  """
  overall = [tfma.SlicingSpec()]
  return tfma.EvalConfig(
      model_specs=[tfma.ModelSpec(signature_name="serving_default",
                                  label_key=config.spec.label,
                                  prediction_key=PREDICTION_KEY,
                                  model_type=tfma.TF_GENERIC)],
      slicing_specs=overall,
      metrics_specs=[tfma.MetricsSpec(
          metrics=[tfma.MetricConfig(class_name=name) for name in (
              "ExampleCount", "AUC", "BinaryCrossEntropy", "MeanLabel",
              "MeanPrediction", "Calibration")],
          per_slice_thresholds={
              "auc": tfma.PerSliceMetricThresholds(thresholds=[
                  tfma.PerSliceMetricThreshold(
                      slicing_specs=overall,
                      threshold=tfma.MetricThreshold(
                          value_threshold=tfma.GenericValueThreshold(
                              lower_bound={"value": config.min_auc})))])})])


def create_pipeline(config: PipelineConfig) -> tfx.dsl.Pipeline:
  """The TFX pipeline for `config`, runner-agnostic."""
  input_base, pattern = split_input(config.data)
  example_gen = RawCtrExampleGen(
      input_base=input_base,
      input_pattern=pattern,
      dataset=config.dataset,
      split=config.split,
      eval_fraction=(config.spec.eval_fraction if config.eval_fraction is None
                     else config.eval_fraction),
      max_bad_fraction=config.max_bad_fraction)
  statistics_gen = tfx.components.StatisticsGen(
      examples=example_gen.outputs["examples"])
  schema_gen = tfx.components.ImportSchemaGen(schema_file=config.schema_path)
  example_validator = StrictExampleValidator(
      statistics=statistics_gen.outputs["statistics"],
      schema=schema_gen.outputs["schema"])
  transform = tfx.components.Transform(
      examples=example_gen.outputs["examples"],
      schema=schema_gen.outputs["schema"],
      preprocessing_fn=PREPROCESSING_FN,
      custom_config=config.transform_config)
  # Transform must not run on data the validator rejected.
  transform.add_upstream_node(example_validator)
  trainer = tfx.components.Trainer(
      run_fn=RUN_FN,
      examples=transform.outputs["transformed_examples"],
      transform_graph=transform.outputs["transform_graph"],
      schema=schema_gen.outputs["schema"],
      custom_config=config.trainer_config)
  if config.trainer_gpus:
    # KubeflowV2DagRunner turns this into the Trainer pod's resource limits;
    # the local runners ignore it.
    trainer.with_platform_config(_RESOURCE_SPEC(
        accelerator=_RESOURCE_SPEC.AcceleratorConfig(
            type=config.trainer_accelerator, count=config.trainer_gpus)))
  evaluator = tfx.components.Evaluator(
      examples=example_gen.outputs["examples"],
      model=trainer.outputs["model"],
      eval_config=create_eval_config(config))
  pusher = tfx.components.Pusher(
      model=trainer.outputs["model"],
      model_blessing=evaluator.outputs["blessing"],
      push_destination=tfx.proto.PushDestination(
          filesystem=tfx.proto.PushDestination.Filesystem(
              base_directory=config.serving_dir)))
  components: List = [example_gen, statistics_gen, schema_gen,
                      example_validator, transform, trainer, evaluator,
                      pusher]
  return tfx.dsl.Pipeline(
      pipeline_name=config.pipeline_name,
      pipeline_root=config.pipeline_root,
      components=components,
      enable_cache=True,
      metadata_connection_config=(
          tfx.orchestration.metadata.sqlite_metadata_connection_config(
              config.metadata_path) if config.local_metadata else None),
      beam_pipeline_args=list(config.beam_args))
