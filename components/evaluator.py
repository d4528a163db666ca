"""The Evaluator: TFMA's evaluation and gate, with the metrics computed in
batches (components.sliced_metrics).

TFX's Evaluator executor runs TFMA's default evaluator, whose per-example
metric combiners cost ~6.5 ms of CPU per example here; its Do has no way to
pass another evaluator. This executor does what TFX's does for this
pipeline's configuration, with TFMA's own extractors, writers and
validation:
* the eval config completed as TFX completes it (a baseline model when
  LatestPushedModel found one, rubber stamp otherwise);
* the eval split read and parsed by TensorFlow
  (components.tf_example_reader): batches of EVAL_BATCH_SIZE serialized
  examples, of which only the labels and slicing features are decoded;
* the candidate and baseline models' serving signatures, through TFMA's
  extractors;
* the metrics, slices and diffs by the batched evaluator;
* TFMA's writers: the evaluation artifact has TFMA's files and keys;
* the blessing, written as TFX writes it.
"""

import os
from typing import Any, Dict, List

from absl import logging
import apache_beam as beam
from tensorflow_metadata.proto.v0 import schema_pb2
import tensorflow_model_analysis as tfma
from tensorflow_model_analysis.extractors import extractor as tfma_extractor
from tensorflow_model_analysis.extractors import slice_key_extractor
from tensorflow_model_analysis.extractors import unbatch_extractor
from tfx import types
from tfx.components.evaluator import component as evaluator_component
from tfx.components.evaluator import constants
from tfx.dsl.components.base import base_beam_executor
from tfx.dsl.components.base import executor_spec
from tfx.types import artifact_utils
from tfx.types import standard_component_specs as specs
from tfx.utils import io_utils
from tfx.utils import json_utils
from tfx.utils import path_utils
from tfx.utils import proto_utils
from tfx_bsl.tfxio import tensor_adapter

from components import baseline
from components import sliced_metrics
from components import tf_example_reader

# Serialized examples per batch: the models' signatures and the metrics run
# once per batch, so their fixed costs vanish at this size
# (docs/benchmark_eval.md).
EVAL_BATCH_SIZE = tf_example_reader.DEFAULT_BATCH_SIZE
# TFMA's extractors that unbatch and slice per example: the batched
# evaluator slices the batches itself.
_PER_EXAMPLE_STAGES = (unbatch_extractor.UNBATCH_EXTRACTOR_STAGE_NAME,
                       slice_key_extractor.SLICE_KEY_EXTRACTOR_STAGE_NAME)


def batched_evaluation(eval_shared_model, eval_config: tfma.EvalConfig,
                       tensor_adapter_config=None) -> Dict[str, Any]:
  """The extractors and evaluators of tfma.ExtractEvaluateAndWriteResults
  (and run_model_analysis) that compute eval_config in batches: TFMA's
  default extractors up to the predictions, then the batched evaluator.
  eval_config must be completed (tfma.utils.update_eval_config_with_defaults)
  as TFMA's own run completes it."""
  extractors = tfma.default_extractors(
      eval_shared_model=eval_shared_model, eval_config=eval_config,
      tensor_adapter_config=tensor_adapter_config)
  return {
      "extractors": [x for x in extractors
                     if x.stage_name not in _PER_EXAMPLE_STAGES],
      "evaluators": [sliced_metrics.BatchedMetricsEvaluator(
          eval_config, tfma_extractor.LAST_EXTRACTOR_STAGE_NAME)]}


def read_features(eval_config: tfma.EvalConfig,
                  schema: schema_pb2.Schema) -> List[str]:
  """The features the evaluation reads from the examples: the labels and the
  slicing features the schema has. The models read the serialized examples,
  so the other columns need no decoding (per 91,519 Criteo examples the
  reader takes 0.56 CPU s for these 5 columns, 0.97 s for all 40)."""
  wanted = {spec.label_key for spec in eval_config.model_specs}
  wanted.update(k for spec in eval_config.model_specs
                for k in spec.label_keys.values())
  wanted.update(k for spec in eval_config.slicing_specs
                for k in spec.feature_keys)
  return sorted(f.name for f in schema.feature if f.name in wanted)


def evaluate_examples(pipeline: beam.Pipeline, eval_shared_model,
                      eval_config: tfma.EvalConfig, patterns: List[str],
                      schema: schema_pb2.Schema, output_path: str) -> None:
  """Adds to `pipeline` TFMA's evaluation of the examples in `patterns`,
  its results written to output_path: read in batches of EVAL_BATCH_SIZE
  by TensorFlow, only the labels and slicing features decoded
  (read_features), the metrics computed in batches (batched_evaluation).
  eval_config must be completed (tfma.utils.update_eval_config_with_defaults).
  """
  reader = tf_example_reader.TensorFlowExampleRecord(
      file_pattern=patterns, schema=schema,
      raw_record_column_name=tfma.ARROW_INPUT_COLUMN,
      telemetry_descriptors=["Evaluator"]).Project(
          read_features(eval_config, schema))
  tensor_adapter_config = tensor_adapter.TensorAdapterConfig(
      arrow_schema=reader.ArrowSchema(),
      tensor_representations=reader.TensorRepresentations())
  _ = (pipeline | "ReadEvalSplits" >> reader.BeamSource(EVAL_BATCH_SIZE)
       | "ExtractEvaluateAndWriteResults" >>
       tfma.ExtractEvaluateAndWriteResults(
           eval_shared_model=eval_shared_model, eval_config=eval_config,
           output_path=output_path,
           tensor_adapter_config=tensor_adapter_config,
           **batched_evaluation(eval_shared_model, eval_config,
                                tensor_adapter_config)))


class EvaluatorExecutor(base_beam_executor.BaseBeamExecutor):
  """TFMA on the eval split, metrics in batches; blesses per the gate."""

  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]],
         exec_properties: Dict[str, Any]) -> None:
    self._log_startup(input_dict, output_dict, exec_properties)
    candidate = artifact_utils.get_single_instance(
        input_dict[specs.MODEL_KEY])
    baselines = [m for m in input_dict.get(specs.BASELINE_MODEL_KEY, [])
                 if baseline.is_found(m)]
    eval_config = tfma.EvalConfig()
    proto_utils.json_to_proto(exec_properties[specs.EVAL_CONFIG_KEY],
                              eval_config)
    eval_config = tfma.utils.update_eval_config_with_defaults(
        eval_config, has_baseline=bool(baselines), rubber_stamp=True)
    tfma.utils.verify_eval_config(eval_config)
    models = []
    for spec in eval_config.model_specs:
      model = baselines[0] if spec.is_baseline else candidate
      path = path_utils.serving_model_path(
          model.uri, path_utils.is_old_model_artifact(model))
      logging.info("Using %s as %s model.", path, spec.name)
      models.append(tfma.default_eval_shared_model(
          eval_saved_model_path=path, model_name=spec.name,
          eval_config=eval_config))
    eval_shared_model = models[0] if len(models) == 1 else models
    examples = input_dict[specs.EXAMPLES_KEY]
    splits = json_utils.loads(
        exec_properties.get(specs.EXAMPLE_SPLITS_KEY) or "null") or ["eval"]
    output_uri = artifact_utils.get_single_uri(
        output_dict[specs.EVALUATION_KEY])
    if not input_dict.get(specs.SCHEMA_KEY):
      raise ValueError("the Evaluator decodes the labels and slicing "
                       "features by the schema: give it the schema input")
    schema = io_utils.SchemaReader().read(io_utils.get_only_uri_in_dir(
        artifact_utils.get_single_uri(input_dict[specs.SCHEMA_KEY])))
    patterns = [io_utils.all_files_pattern(uri) for split in splits
                for uri in artifact_utils.get_split_uris(examples, split)]
    with self._make_beam_pipeline() as pipeline:
      evaluate_examples(pipeline, eval_shared_model, eval_config, patterns,
                        schema, output_uri)
    logging.info("Evaluation complete. Results written to %s.", output_uri)
    if not tfma.metrics.metric_thresholds_from_metrics_specs(
        eval_config.metrics_specs, eval_config=eval_config):
      logging.info("No threshold configured: the model is not validated.")
      return
    _bless(output_dict, candidate, baselines, output_uri)


def _bless(output_dict, candidate, baselines, output_uri) -> None:
  """BLESSED or NOT_BLESSED and their properties, as TFX's Evaluator."""
  blessing = artifact_utils.get_single_instance(
      output_dict[specs.BLESSING_KEY])
  blessing.set_string_custom_property(
      constants.ARTIFACT_PROPERTY_CURRENT_MODEL_URI_KEY, candidate.uri)
  blessing.set_int_custom_property(
      constants.ARTIFACT_PROPERTY_CURRENT_MODEL_ID_KEY, candidate.id)
  if baselines:
    blessing.set_string_custom_property(
        constants.ARTIFACT_PROPERTY_BASELINE_MODEL_URI_KEY, baselines[0].uri)
    blessing.set_int_custom_property(
        constants.ARTIFACT_PROPERTY_BASELINE_MODEL_ID_KEY, baselines[0].id)
  blessed = tfma.load_validation_result(output_uri).validation_ok
  io_utils.write_string_file(os.path.join(
      blessing.uri, constants.BLESSED_FILE_NAME if blessed
      else constants.NOT_BLESSED_FILE_NAME), "")
  blessing.set_int_custom_property(
      constants.ARTIFACT_PROPERTY_BLESSED_KEY,
      constants.BLESSED_VALUE if blessed else constants.NOT_BLESSED_VALUE)
  logging.info("Blessing result %s written to %s.", blessed, blessing.uri)


class Evaluator(evaluator_component.Evaluator):
  """TFX's Evaluator component with the batched executor. Its baseline may
  be LatestPushedModel's empty first-run output (then there is none).

  Only what the executor reads can be set: the other arguments of TFX's
  Evaluator (feature_slicing_spec, fairness thresholds, module files)
  would be ignored, so they are not accepted.
  """
  EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(EvaluatorExecutor)

  def __init__(self, examples: types.BaseChannel, model: types.BaseChannel,
               baseline_model: types.BaseChannel, schema: types.BaseChannel,
               eval_config: tfma.EvalConfig):
    sliced_metrics.check_supported(eval_config)
    super().__init__(examples=examples, model=model,
                     baseline_model=baseline_model, schema=schema,
                     eval_config=eval_config)
