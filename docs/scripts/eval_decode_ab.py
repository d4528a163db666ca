"""CPU seconds to decode an eval split, the ways the Evaluator could.

  PYTHONPATH=. .venv/bin/python docs/scripts/eval_decode_ab.py EXAMPLEGEN_OUT

tfx_bsl's decoder with no schema, the Criteo schema and the five columns
the evaluation reads; tf.io.parse_example of those five; and the
Evaluator's reader (components.tf_example_reader.ExamplesToRecordBatches),
which also reads the files.
"""

import glob
import os
import sys
import time

from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import schema_pb2
import tensorflow as tf
import tensorflow_model_analysis as tfma
from tfx_bsl.coders import example_coder
from tfx_bsl.public import tfxio

from components.evaluator import EVAL_BATCH_SIZE
from components.tf_example_reader import ExamplesToRecordBatches

_COLUMNS = ("label", "C6", "C9", "C17", "C20")


def main(examples_uri: str) -> None:
  files = sorted(glob.glob(os.path.join(examples_uri, "Split-eval", "*")))
  records = [r.numpy() for r in tf.data.TFRecordDataset(
      files, compression_type="GZIP")]
  with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                         "..", "schema", "criteo", "schema.pbtxt")) as f:
    schema = text_format.Parse(f.read(), schema_pb2.Schema())
  five = schema_pb2.Schema()
  five.feature.extend(f for f in schema.feature if f.name in _COLUMNS)

  def timed(name, run):
    start = time.process_time()
    run()
    print(f"{name}: {time.process_time() - start:.2f} CPU s for "
          f"{len(records)} examples")

  for name, decoder_schema in (("tfx_bsl, no schema", None),
                               ("tfx_bsl, schema", schema),
                               ("tfx_bsl, 5 columns", five)):
    decoder = (example_coder.ExamplesToRecordBatchDecoder(
        decoder_schema.SerializeToString()) if decoder_schema
               else example_coder.ExamplesToRecordBatchDecoder())
    timed(name, lambda d=decoder: [
        d.DecodeBatch(records[i:i + EVAL_BATCH_SIZE])
        for i in range(0, len(records), EVAL_BATCH_SIZE)])
  spec = {c: tf.io.VarLenFeature(tf.int64 if c == "label" else tf.string)
          for c in _COLUMNS}
  timed("tf.io.parse_example, 5 columns", lambda: [
      tf.io.parse_example(records[i:i + EVAL_BATCH_SIZE], spec)
      for i in range(0, len(records), EVAL_BATCH_SIZE)])
  view = tfxio.TFExampleRecord(
      file_pattern=files, schema=schema,
      raw_record_column_name=tfma.ARROW_INPUT_COLUMN).Project(list(_COLUMNS))
  reader = ExamplesToRecordBatches(schema, view.ArrowSchema(),
                                   EVAL_BATCH_SIZE, tfma.ARROW_INPUT_COLUMN)
  reader.setup()
  timed("the Evaluator's reader (files read too)",
        lambda: list(reader.process(files)))
  everything = ExamplesToRecordBatches(
      schema, tfxio.TFExampleRecord(file_pattern=files,
                                    schema=schema).ArrowSchema(),
      EVAL_BATCH_SIZE, None)
  everything.setup()
  timed("the same reader, every column of the schema",
        lambda: list(everything.process(files)))


if __name__ == "__main__":
  main(sys.argv[1])
