"""StatisticsGen that samples serialized examples before decoding them.

TFX's StatisticsGen decodes every example to Arrow and only then lets TFDV
keep its `sample_rate` share. At 45.8M rows that decoding was about 60% of
the component's CPU (docs/benchmark_data.md). This one keeps the share of
the serialized records first, decodes only those, and hands them to TFDV's
own GenerateStatistics (with the same options, sampling aside). The sample
is a hash of each record's bytes, so the same input gives the same
statistics on every run and runner (TFDV's own sampling is random). The
records are read by tf.data, a file per Beam element, so the workers share
the files.

It does what the pipeline asks of StatisticsGen, and takes only those
arguments: the examples and the TFDV options; every split, one
FeatureStats.pb per split.
"""

import os
import zlib
from typing import Any, Dict, Iterable, List, Optional

from absl import logging
import apache_beam as beam
import pyarrow as pa
import tensorflow_data_validation as tfdv
from tfx import types
from tfx.components.statistics_gen import component as statistics_gen
from tfx.components.statistics_gen import executor as statistics_executor
from tfx.dsl.components.base import base_beam_executor
from tfx.dsl.components.base import executor_spec
from tfx.dsl.io import fileio
from tfx.types import artifact_utils
from tfx.types import standard_component_specs as specs
from tfx.utils import io_utils
from tfx.utils import json_utils
from tfx_bsl.coders import example_coder

from components import tf_example_reader

_HASH_RANGE = 1 << 32
# Records read per tf.data batch; below 1M rows (no sampling) also the
# RecordBatch size TFDV gets.
_READ_BATCH = 8192


def keep_record(record: bytes, rate: float) -> bool:
  """Whether `record` is in the sample of this share of records."""
  return zlib.crc32(record) < rate * _HASH_RANGE


class ReadSampleDecode(beam.DoFn):
  """A TFRecord file of tf.Examples -> RecordBatches of its records in the
  sample (all of them if rate is None), decoded without a schema as TFX's
  StatisticsGen decodes them. tf.data reads the records a batch at a time
  (tf_example_reader.serialized_batches): Beam's Python reader cost more
  than the statistics of the sample (docs/benchmark_data.md)."""

  def __init__(self, rate: Optional[float]):
    self._rate = rate
    self._decoder = None

  def setup(self):
    self._decoder = example_coder.ExamplesToRecordBatchDecoder()

  def process(self, path: str) -> Iterable[pa.RecordBatch]:
    for batch in tf_example_reader.serialized_batches([path], _READ_BATCH):
      records = batch.numpy().tolist()
      if self._rate:
        records = [r for r in records if keep_record(r, self._rate)]
      if records:
        yield self._decoder.DecodeBatch(records)


class Executor(base_beam_executor.BaseBeamExecutor):
  """Statistics of a hash sample of each split, drawn before decoding."""

  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]],
         exec_properties: Dict[str, Any]) -> None:
    examples = artifact_utils.get_single_instance(
        input_dict[specs.EXAMPLES_KEY])
    statistics = artifact_utils.get_single_instance(
        output_dict[specs.STATISTICS_KEY])
    splits = artifact_utils.decode_split_names(examples.split_names)
    statistics.split_names = artifact_utils.encode_split_names(splits)
    statistics.span = examples.span
    options = tfdv.StatsOptions.from_json(
        exec_properties[specs.STATS_OPTIONS_JSON_KEY])
    rate, options.sample_rate = options.sample_rate, None
    statistics.set_json_value_custom_property(
        statistics_executor.SAMPLE_RATE_BY_SPLIT_PROPERTY_NAME,
        json_utils.dumps({split: rate or 1.0 for split in splits}))
    with self._make_beam_pipeline() as p:
      for split in splits:
        logging.info("StatisticsGen: split %s, sample rate %s", split,
                     rate or 1.0)
        files = sorted(fileio.glob(io_utils.all_files_pattern(
            artifact_utils.get_split_uri([examples], split))))
        _ = (p
             | f"Files[{split}]" >> beam.Create(files)
             # One file per element, spread over the workers.
             | f"Spread[{split}]" >> beam.Reshuffle()
             | f"ReadSampleDecode[{split}]" >> beam.ParDo(
                 ReadSampleDecode(rate))
             | f"GenerateStatistics[{split}]" >> tfdv.GenerateStatistics(
                 options)
             | f"WriteStatistics[{split}]" >> tfdv.WriteStatisticsToBinaryFile(
                 os.path.join(artifact_utils.get_split_uri([statistics], split),
                              statistics_executor.DEFAULT_FILE_NAME)))


class StatisticsGen(statistics_gen.StatisticsGen):
  """TFX's StatisticsGen, sampling records before decoding them."""
  EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(Executor)

  def __init__(self, examples: types.BaseChannel,
               stats_options: tfdv.StatsOptions):
    super().__init__(examples=examples, stats_options=stats_options)
