"""StatisticsGen sampling serialized records before decoding them."""

import json
import os
import zlib

import pytest
import tensorflow_data_validation as tfdv
from tfx.components.statistics_gen import executor as tfx_executor
from tfx.types import standard_artifacts

from components import statistics_gen
from conftest import CRITEO_EXAMPLE_ROWS as ROWS
from conftest import split_records


@pytest.fixture(name="examples")
def _examples(criteo_examples):
  return criteo_examples


def _statistics(executor_class, examples, tmp_path, options):
  """{split: DatasetFeatureStatistics} that executor_class computes."""
  output = standard_artifacts.ExampleStatistics()
  output.uri = str(tmp_path / executor_class.__module__)
  executor_class().Do(
      {"examples": [examples]}, {"statistics": [output]},
      {"stats_options_json": options.to_json(), "exclude_splits": "[]"})
  return {split: tfdv.load_stats_binary(os.path.join(
      output.uri, f"Split-{split}", tfx_executor.DEFAULT_FILE_NAME)).datasets[0]
          for split in ("train", "eval")}, output


def test_keep_record_keeps_its_share_the_same_each_time():
  records = [b"%d" % i for i in range(20000)]
  kept = [r for r in records if statistics_gen.keep_record(r, 0.1)]
  assert 0.09 < len(kept) / len(records) < 0.11
  assert kept == [r for r in records if statistics_gen.keep_record(r, 0.1)]
  assert all(statistics_gen.keep_record(r, 1.0) for r in records)


def _gate_view(dataset):
  """What the schema gate reads of each feature: type, presence, counts.
  (Quantiles and sketches depend on the order Beam merges batches in.)"""
  view = {"num_examples": dataset.num_examples}
  for feature in dataset.features:
    stats = feature.WhichOneof("stats")
    common = getattr(feature, stats).common_stats
    view[feature.path.step[0]] = (
        feature.type, common.num_non_missing, common.num_missing,
        common.min_num_values, common.max_num_values, common.tot_num_values,
        feature.num_stats.min, feature.num_stats.max)
  return view


@pytest.mark.slow
def test_unsampled_statistics_equal_tfx_statistics_gen(examples, tmp_path):
  options = tfdv.StatsOptions(use_sketch_based_topk_uniques=True)
  ours, output = _statistics(statistics_gen.Executor, examples, tmp_path,
                             options)
  theirs, _ = _statistics(tfx_executor.Executor, examples, tmp_path, options)
  for split in ("train", "eval"):
    assert _gate_view(ours[split]) == _gate_view(theirs[split])
  assert ours["train"].num_examples + ours["eval"].num_examples == ROWS
  assert output.split_names == '["train", "eval"]'


@pytest.mark.slow
def test_sampled_statistics_count_exactly_the_hashed_records(examples,
                                                             tmp_path):
  """The sample is the records whose hash falls in the rate's share."""
  rate = 0.3
  options = tfdv.StatsOptions(sample_rate=rate,
                              use_sketch_based_topk_uniques=True)
  ours, output = _statistics(statistics_gen.Executor, examples, tmp_path,
                             options)
  for split in ("train", "eval"):
    records = split_records(examples, split)
    expected = sum(zlib.crc32(r) < rate * 2**32 for r in records)
    assert ours[split].num_examples == expected
    assert 0.2 * len(records) < expected < 0.4 * len(records)
  assert json.loads(output.get_json_value_custom_property(
      tfx_executor.SAMPLE_RATE_BY_SPLIT_PROPERTY_NAME)) == {
          "train": rate, "eval": rate}
