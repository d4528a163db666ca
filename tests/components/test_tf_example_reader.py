"""TFXIO's tf.Example reader with TensorFlow's reading and parsing decodes
what TFXIO's decoder decodes."""

import os

import pyarrow as pa
import pytest
import tensorflow as tf
from tfx.types import artifact_utils
from tfx.utils import io_utils
from tfx_bsl.coders import example_coder

from components import tf_example_reader
from pipeline.config import REPO_ROOT


@pytest.fixture(name="examples")
def _examples(criteo_examples):
  return criteo_examples


@pytest.mark.slow
def test_the_reader_decodes_as_tfxio(examples):
  """Every column of every example as TFXIO's decoder gives it (null where
  an example lacks the feature), and the serialized records."""
  schema = io_utils.SchemaReader().read(os.path.join(
      REPO_ROOT, "schema", "criteo", "schema.pbtxt"))
  files = sorted(tf.io.gfile.glob(os.path.join(
      artifact_utils.get_split_uri([examples], "train"), "*")))
  arrow_schema = tf_example_reader.TensorFlowExampleRecord(
      files, schema=schema, raw_record_column_name="raw").ArrowSchema()
  reader = tf_example_reader.ExamplesToRecordBatches(schema, arrow_schema,
                                                     700, "raw")
  reader.setup()
  ours = pa.Table.from_batches(list(reader.process(files)))
  records = [r.numpy() for r in tf.data.TFRecordDataset(
      files, compression_type="GZIP")]
  theirs = example_coder.ExamplesToRecordBatchDecoder(
      schema.SerializeToString()).DecodeBatch(records)
  assert ours.num_rows == len(records) > 2000
  assert ours.column("raw").to_pylist() == [[r] for r in records]
  assert theirs.schema.names == [n for n in ours.column_names if n != "raw"]
  for name in theirs.schema.names:
    assert ours.column(name).to_pylist() == theirs.column(name).to_pylist(), (
        name)
  assert any(None in ours.column(name).to_pylist()
             for name in theirs.schema.names)
