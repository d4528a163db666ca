"""TFX's Transform, reading its examples with TensorFlow.

TFX's Transform reads the train split with Beam's Python TFRecord reader
and decodes it with tfx_bsl: 15.6 + 16.9 s of its ~56 s per 1M rows
(docs/benchmark_data.md). This one is TFX's executor with one change: its
datasets come through components.tf_example_reader, which reads with
tf.data and decodes with tf.io.parse_example into the same Arrow layout.
Everything else (the splits, the preprocessing_fn, tf.Transform's analysis,
the graph and vocabulary files it writes) is TFX's and tf.Transform's own,
and the outputs are the same (tests/components/test_transform.py). Its
examples may be a rolling window of days (components/span_window.py).
"""

import contextlib
from typing import Any, Dict, Iterator, List

from tensorflow_metadata.proto.v0 import schema_pb2
from tfx import types
from tfx.components.transform import component as transform_component
from tfx.components.transform import executor as transform_executor
from tfx.dsl.components.base import executor_spec
from tfx_bsl.tfxio import tf_example_record
from tfx_bsl.tfxio import tfxio as tfxio_module

from components import span_window
from components.tf_example_reader import TensorFlowExampleRecord


class TensorFlowReadProcessor(transform_executor.TransformProcessor):
  """TFX's TransformProcessor, whose datasets read through
  TensorFlowExampleRecord."""

  def _CreateTFXIO(self, dataset: transform_executor._Dataset,  # pylint: disable=protected-access
                   schema: schema_pb2.Schema) -> tfxio_module.TFXIO:
    tfxio = super()._CreateTFXIO(dataset, schema)
    if not isinstance(tfxio, tf_example_record.TFExampleRecord):
      raise ValueError(
          f"Transform reads tf.Examples in TFRecord files; "
          f"{dataset.file_pattern} gives a {type(tfxio).__name__}")
    return TensorFlowExampleRecord(
        file_pattern=dataset.file_pattern, schema=schema,
        raw_record_column_name=tfxio.raw_record_column_name,
        telemetry_descriptors=tfxio.telemetry_descriptors)


@contextlib.contextmanager
def _processor(processor: type) -> Iterator[None]:
  """TFX 1.16's Do creates its TransformProcessor by the module's name, and
  nothing in its arguments chooses the reader: the name is swapped for the
  length of one Do."""
  tfx_processor = transform_executor.TransformProcessor
  transform_executor.TransformProcessor = processor
  try:
    yield
  finally:
    transform_executor.TransformProcessor = tfx_processor


class Executor(transform_executor.Executor):
  """TFX's Transform executor with TensorFlowReadProcessor, reading each
  day of a window of spans."""

  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]],
         exec_properties: Dict[str, Any]) -> None:
    with _processor(TensorFlowReadProcessor):
      super().Do(span_window.expand_input(input_dict), output_dict,
                 exec_properties)


class Transform(transform_component.Transform):
  """TFX's Transform component, reading with TensorFlow."""
  EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(Executor)
