"""TFXIO's tf.Example reader with TensorFlow's own reading and parsing.

TFXIO's TFExampleRecord reads TFRecord files with Beam's Python reader and
decodes them with tfx_bsl's decoder, which parses every example whole,
whatever the columns. The Evaluator reads five columns of each eval
example: tf.data and tf.io.parse_example give them in the same Arrow layout
in about a tenth of the time (docs/benchmark_eval.md). Everything else (the
schema, projection, Arrow schema, tensor representations) is TFXIO's own,
so TFMA sees no difference.

Transform reads its train split through it too (components.transform):
TFXIO's read and decode were 15.6 + 16.9 s of its ~56 s per 1M rows, and
this reader does all 40 Criteo columns in ~10 s. StatisticsGen reads its
records with serialized_batches.
"""

from typing import Iterable, Iterator, List, Optional

import apache_beam as beam
import numpy as np
import pyarrow as pa
import tensorflow as tf
from tensorflow_metadata.proto.v0 import schema_pb2
from tfx.dsl.io import fileio
from tfx_bsl.tfxio import tensor_representation_util
from tfx_bsl.tfxio import tf_example_record

# Examples per RecordBatch when the caller asks for no size: large enough
# that the per-batch costs of the readers and models vanish.
DEFAULT_BATCH_SIZE = 4096
_DTYPES = {schema_pb2.INT: tf.int64, schema_pb2.FLOAT: tf.float32,
           schema_pb2.BYTES: tf.string}


def serialized_batches(paths: List[str], batch_size: int
                       ) -> Iterator[tf.Tensor]:
  """The records of the TFRecord files `paths` (gzipped if named .gz), in
  order, as string tensors of batch_size records (the last one shorter):
  tf.data reads them, with no Python per record."""
  compressed = {path.endswith(".gz") for path in paths}
  if len(compressed) > 1:
    raise ValueError(f"files both gzipped and not: {paths}")
  records = tf.data.TFRecordDataset(
      paths, compression_type="GZIP" if compressed.pop() else "")
  return iter(records.batch(batch_size))


class ExamplesToRecordBatches(beam.DoFn):
  """Files of serialized tf.Examples -> Arrow RecordBatches of batch_size
  rows with the columns of arrow_schema, as TFXIO's decoder gives them: a
  list per feature (null where an example has none) and, if
  raw_record_column is set, each serialized record."""

  def __init__(self, schema: schema_pb2.Schema, arrow_schema: pa.Schema,
               batch_size: int, raw_record_column: Optional[str]):
    self._schema = schema
    self._arrow_schema = arrow_schema
    self._batch_size = batch_size
    self._raw_record_column = raw_record_column
    self._spec = None

  def setup(self):
    dtypes = {f.name: _DTYPES[f.type] for f in self._schema.feature}
    self._spec = {field.name: tf.io.VarLenFeature(dtypes[field.name])
                  for field in self._arrow_schema
                  if field.name != self._raw_record_column}

  def process(self, paths: List[str]) -> Iterable[pa.RecordBatch]:
    """All files in one stream: ExampleGen writes a file per split and
    input chunk (167 eval files of ~550 examples at full size), and batches
    must be large."""
    for serialized in serialized_batches(paths, self._batch_size):
      parsed = tf.io.parse_example(serialized, self._spec)
      size = int(serialized.shape[0])
      columns = []
      for field in self._arrow_schema:
        if field.name == self._raw_record_column:
          rows, values = np.arange(size), serialized.numpy()
        else:
          rows = parsed[field.name].indices[:, 0].numpy()
          values = parsed[field.name].values.numpy()
        counts = np.bincount(rows, minlength=size)
        columns.append(pa.LargeListArray.from_arrays(
            pa.array(np.concatenate([[0], np.cumsum(counts)]), pa.int64()),
            pa.array(values, field.type.value_type),
            mask=pa.array(counts == 0)))
      yield pa.RecordBatch.from_arrays(columns, schema=self._arrow_schema)


class TensorFlowExampleRecord(tf_example_record.TFExampleRecord):
  """TFExampleRecord whose BeamSource reads with tf.data and decodes with
  tf.io.parse_example (ExamplesToRecordBatches). It needs a schema: the
  parser needs each column's type."""

  def __init__(self, file_pattern, schema: schema_pb2.Schema, **kwargs):
    if schema is None:
      raise ValueError("TensorFlowExampleRecord decodes by the schema; got "
                       "none")
    super().__init__(file_pattern=file_pattern, schema=schema, **kwargs)
    self._patterns = ([file_pattern] if isinstance(file_pattern, str)
                      else list(file_pattern))

  def _ProjectImpl(self, tensor_names: List[str]
                  ) -> "TensorFlowExampleRecord":
    return TensorFlowExampleRecord(
        file_pattern=self._patterns,
        schema=tensor_representation_util.ProjectTensorRepresentationsInSchema(
            self._schema, tensor_names),
        raw_record_column_name=self.raw_record_column_name,
        telemetry_descriptors=self.telemetry_descriptors)

  def BeamSource(self, batch_size: Optional[int] = None) -> beam.PTransform:
    files = sorted(path for pattern in self._patterns
                   for path in fileio.glob(pattern))
    if not files:
      raise ValueError(f"no files match {self._patterns}")
    reader = ExamplesToRecordBatches(
        self._schema, self.ArrowSchema(), batch_size or DEFAULT_BATCH_SIZE,
        self.raw_record_column_name)

    @beam.ptransform_fn
    def _ReadAndDecode(pipeline):  # pylint: disable=invalid-name
      return (pipeline | "Files" >> beam.Create([files])
              | "ReadAndDecode" >> beam.ParDo(reader))

    return _ReadAndDecode()  # pylint: disable=no-value-for-parameter
