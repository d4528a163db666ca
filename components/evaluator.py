"""The Evaluator: TFMA's evaluation and gate, with the metrics computed in
batches (components.sliced_metrics).

TFX's Evaluator executor runs TFMA's default evaluator, whose per-example
metric combiners cost ~6.5 ms of CPU per example here; its Do has no way to
pass another evaluator. This executor does what TFX's does for this
pipeline's configuration, with TFMA's own extractors, writers and
validation:
* the eval config completed as TFX completes it (a baseline model when
  LatestPushedModel found one, rubber stamp otherwise);
* the eval split read and parsed by TensorFlow (ExamplesToRecordBatches):
  batches of EVAL_BATCH_SIZE serialized examples, of which only the labels
  and slicing features are decoded, by the schema;
* the candidate and baseline models' serving signatures, through TFMA's
  extractors;
* the metrics, slices and diffs by the batched evaluator;
* TFMA's writers: the evaluation artifact has TFMA's files and keys;
* the blessing, written as TFX writes it.
"""

import os
from typing import Any, Dict, Iterable, List

from absl import logging
import apache_beam as beam
import numpy as np
import pyarrow as pa
import tensorflow as tf
from tensorflow_metadata.proto.v0 import schema_pb2
import tensorflow_model_analysis as tfma
from tensorflow_model_analysis.extractors import extractor as tfma_extractor
from tfx import types
from tfx.components.evaluator import component as evaluator_component
from tfx.components.evaluator import constants
from tfx.components.util import tfxio_utils
from tfx.dsl.components.base import base_beam_executor
from tfx.dsl.components.base import executor_spec
from tfx.dsl.io import fileio
from tfx.types import artifact_utils
from tfx.types import standard_component_specs as specs
from tfx.utils import io_utils
from tfx.utils import json_utils
from tfx.utils import path_utils
from tfx.utils import proto_utils
from tfx_bsl.tfxio import tensor_adapter

from components import baseline
from components import sliced_metrics

# Serialized examples per batch: the models' signatures and the metrics run
# once per batch, so their fixed costs vanish at this size
# (docs/benchmark_eval.md).
EVAL_BATCH_SIZE = 4096
# TFMA's extractors that unbatch and slice per example: the batched
# evaluator slices the batches itself.
_PER_EXAMPLE_STAGES = ("ExtractUnbatchedInputs", "ExtractSliceKeys")


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
  so decoding the other columns would be wasted (a third of the time)."""
  wanted = {spec.label_key for spec in eval_config.model_specs}
  wanted.update(k for spec in eval_config.model_specs
                for k in spec.label_keys.values())
  wanted.update(k for spec in eval_config.slicing_specs
                for k in spec.feature_keys)
  return sorted(f.name for f in schema.feature if f.name in wanted)


class ExamplesToRecordBatches(beam.DoFn):
  """Files of serialized tf.Examples -> Arrow RecordBatches of batch_size
  rows: the serialized records (the models read them) and the columns of
  arrow_schema, as TFXIO's BeamSource would give them.

  TensorFlow reads and parses here: tf.data's reader and tf.io.parse_example
  of the few columns the evaluation reads take ~2 us per example, where
  Beam's Python TFRecord reader and tfx_bsl's decoder took ~35 us, half of
  the Evaluator's time (docs/benchmark_eval.md). The values are the same.
  """

  def __init__(self, schema: schema_pb2.Schema, arrow_schema: pa.Schema,
               batch_size: int):
    self._schema = schema
    self._arrow_schema = arrow_schema
    self._batch_size = batch_size
    self._spec = None

  def setup(self):
    kinds = {schema_pb2.INT: tf.int64, schema_pb2.FLOAT: tf.float32,
             schema_pb2.BYTES: tf.string}
    types_by_name = {f.name: kinds[f.type] for f in self._schema.feature}
    self._spec = {field.name: tf.io.VarLenFeature(types_by_name[field.name])
                  for field in self._arrow_schema
                  if field.name != tfma.ARROW_INPUT_COLUMN}

  def process(self, paths: List[str]) -> Iterable[pa.RecordBatch]:
    """All files in one stream: ExampleGen writes an eval file per input
    chunk (167 of ~550 examples at full size), and batches must be large."""
    compressed = {path.endswith(".gz") for path in paths}
    if len(compressed) > 1:
      raise ValueError(f"eval files both gzipped and not: {paths}")
    records = tf.data.TFRecordDataset(
        paths, compression_type="GZIP" if compressed.pop() else "")
    for serialized in records.batch(self._batch_size):
      parsed = tf.io.parse_example(serialized, self._spec)
      size = int(serialized.shape[0])
      columns = []
      for field in self._arrow_schema:
        if field.name == tfma.ARROW_INPUT_COLUMN:
          rows, values = np.arange(size), serialized.numpy()
        else:
          rows = parsed[field.name].indices[:, 0].numpy()
          values = parsed[field.name].values.numpy()
        offsets = np.concatenate(
            [[0], np.cumsum(np.bincount(rows, minlength=size))])
        columns.append(pa.LargeListArray.from_arrays(
            pa.array(offsets, pa.int64()),
            pa.array(values, field.type.value_type)))
      yield pa.RecordBatch.from_arrays(columns, schema=self._arrow_schema)


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
    # TFXIO's view of the read columns: the Arrow types and tensor
    # representations TFMA's FeaturesExtractor expects.
    view = tfxio_utils.get_tfxio_factory_from_artifact(
        examples=examples, telemetry_descriptors=["Evaluator"],
        schema=schema, raw_record_column_name=tfma.ARROW_INPUT_COLUMN)(
            "").Project(read_features(eval_config, schema))
    tensor_adapter_config = tensor_adapter.TensorAdapterConfig(
        arrow_schema=view.ArrowSchema(),
        tensor_representations=view.TensorRepresentations())
    files = sorted(path for split in splits
                   for uri in artifact_utils.get_split_uris(examples, split)
                   for path in fileio.glob(io_utils.all_files_pattern(uri)))
    if not files:
      raise ValueError(f"no eval examples: the splits {splits} of "
                       f"{examples[0].uri} hold no files")
    with self._make_beam_pipeline() as pipeline:
      _ = (pipeline | "Files" >> beam.Create([files])
           | "ReadAndDecode" >> beam.ParDo(ExamplesToRecordBatches(
               schema, view.ArrowSchema(), EVAL_BATCH_SIZE))
           | "ExtractEvaluateAndWriteResults" >>
           tfma.ExtractEvaluateAndWriteResults(
               eval_shared_model=eval_shared_model, eval_config=eval_config,
               output_path=output_uri,
               tensor_adapter_config=tensor_adapter_config,
               **batched_evaluation(eval_shared_model, eval_config,
                                    tensor_adapter_config)))
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
