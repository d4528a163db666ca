"""RawCtrExampleGen: a FileBasedExampleGen for raw Criteo/Avazu text files.

CsvExampleGen cannot read Criteo's header-less tab-separated train.txt and
infers types per column; this component reads both raw layouts (and header
re-encodings in any column order) with the types of trainer_module.features.
Being a FileBasedExampleGen, it keeps TFX's file driver (span/version
resolution and the input fingerprint that invalidates the cache when the files
change) on every runner, Kubeflow V2 included.
"""

from typing import Optional

from tfx.components.example_gen import component
from tfx.components.example_gen import utils
from tfx.dsl.components.base import executor_spec
from tfx.proto import example_gen_pb2
from tfx.proto import range_config_pb2

from components.raw_example_gen import executor
from trainer_module import features

# eval_fraction is stored as hash_buckets out of this many (0.0001 steps).
_TOTAL_BUCKETS = 10000


def make_output_config(eval_fraction: float) -> example_gen_pb2.Output:
  """'train' and 'eval' splits whose hash_buckets give `eval_fraction`."""
  eval_buckets = round(eval_fraction * _TOTAL_BUCKETS)
  if not 0 < eval_buckets < _TOTAL_BUCKETS:
    raise ValueError(f"eval_fraction must be in [{1 / _TOTAL_BUCKETS}, "
                     f"{1 - 1 / _TOTAL_BUCKETS}], got {eval_fraction}")
  return example_gen_pb2.Output(
      split_config=example_gen_pb2.SplitConfig(splits=[
          example_gen_pb2.SplitConfig.Split(
              name="train", hash_buckets=_TOTAL_BUCKETS - eval_buckets),
          example_gen_pb2.SplitConfig.Split(
              name="eval", hash_buckets=eval_buckets),
      ]))


class RawCtrExampleGen(component.FileBasedExampleGen):
  """Ingests raw CTR files into an Examples artifact with train/eval splits.

  Output `examples`: gzipped TFRecords of tf.Examples (as CsvExampleGen
  writes), one feature per raw feature of the dataset spec: int64 for ints,
  bytes for strings, absent when the field is empty. Bad rows are dropped and
  counted; the counts are the artifact's `rows_read`, `bad_rows`,
  `train_rows`, `eval_rows`, `train_clicks` and `eval_clicks` (rows
  labelled 1) custom properties and are in executor.SUMMARY_FILE_NAME in the
  artifact's directory.
  """

  EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(executor.Executor)

  def __init__(self,
               input_base: str,
               dataset: str,
               input_pattern: str = "*",
               split: str = "hash",
               eval_fraction: Optional[float] = None,
               max_bad_fraction: float = (
                   features.DEFAULT_MAX_BAD_FRACTION),
               skip_foreign_files: bool = False,
               range_config: Optional[range_config_pb2.RangeConfig] = None):
    """Constructs a RawCtrExampleGen.

    Args:
      input_base: directory of the input files.
      dataset: 'criteo' or 'avazu' (trainer_module.features).
      input_pattern: glob of the files under input_base (TFX {SPAN} and
        {VERSION} placeholders work); files are read in natural name order.
      split: 'hash' (a stable hash of each line picks its split) or
        'sequential' (the last eval_fraction of the input, by byte position,
        is eval: the most recent rows of time-ordered data).
      eval_fraction: share of rows in 'eval'; defaults to the dataset's.
      max_bad_fraction: the run fails if more than this share of the rows
        is bad; below it, bad rows are dropped and reported.
      skip_foreign_files: skip (and log) files that are not the dataset's
        training data, e.g. Criteo's unlabelled test.txt and readme.txt,
        instead of failing (input_files.foreign_reason).
      range_config: with {SPAN} in input_pattern, the span to read (None:
        the latest; spans.range_config).
    """
    spec = features.get_spec(dataset)
    options = executor.IngestOptions(dataset=dataset, split=split,
                                     max_bad_fraction=max_bad_fraction,
                                     skip_foreign_files=skip_foreign_files)
    super().__init__(
        input_base=input_base,
        input_config=utils.make_default_input_config(input_pattern),
        output_config=make_output_config(
            spec.eval_fraction if eval_fraction is None else eval_fraction),
        custom_config=options.to_custom_config(),
        range_config=range_config)
