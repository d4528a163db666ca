"""StrictExampleValidator: passes clean statistics, stops on anomalies."""

import os

import pandas as pd
import pytest
import tensorflow_data_validation as tfdv
from tfx.types import artifact_utils
from tfx.types import standard_artifacts
from tfx.types import standard_component_specs
from tfx.utils import io_utils

from components import strict_example_validator
from trainer_module import features
from pipeline import config as config_lib


def _run_validator(tmp_path, frame: pd.DataFrame,
                   split_counts=(("train", 20, 10),)) -> None:
  """The executor on `frame`'s statistics (one split, 'train') and Examples
  whose ExampleGen counts are `split_counts` (split, rows, clicks)."""
  stats = standard_artifacts.ExampleStatistics()
  stats.uri = str(tmp_path / "stats")
  stats.split_names = artifact_utils.encode_split_names(["train"])
  split_dir = os.path.join(stats.uri, "Split-train")
  os.makedirs(split_dir)
  io_utils.write_bytes_file(
      os.path.join(split_dir, "FeatureStats.pb"),
      tfdv.generate_statistics_from_dataframe(frame).SerializeToString())
  examples = standard_artifacts.Examples()
  examples.split_names = artifact_utils.encode_split_names(
      [split for split, _, _ in split_counts])
  for split, rows, clicks in split_counts:
    examples.set_int_custom_property(f"{split}_rows", rows)
    examples.set_int_custom_property(f"{split}_clicks", clicks)
  schema = standard_artifacts.Schema()
  schema.uri = os.path.join(config_lib.SCHEMA_ROOT, "avazu")
  anomalies = standard_artifacts.ExampleAnomalies()
  anomalies.uri = str(tmp_path / "anomalies")
  strict_example_validator.Executor().Do(
      {standard_component_specs.EXAMPLES_KEY: [examples],
       standard_component_specs.STATISTICS_KEY: [stats],
       standard_component_specs.SCHEMA_KEY: [schema]},
      {standard_component_specs.ANOMALIES_KEY: [anomalies]},
      {standard_component_specs.EXCLUDE_SPLITS_KEY: "[]",
       strict_example_validator.LABEL_KEY: features.AVAZU.label})


def _avazu_frame(rows: int = 20) -> pd.DataFrame:
  spec = features.AVAZU
  return pd.DataFrame({
      name: ([i % 2 for i in range(rows)] if name == spec.label else
             [14102100 + i % 24 for i in range(rows)]
             if name == spec.time_field else
             [i % 3 for i in range(rows)] if spec.raw_dtype(name) == "int"
             else [f"{i % 5:08x}" for i in range(rows)])
      for name in spec.raw_features})


def test_clean_statistics_pass(tmp_path):
  _run_validator(tmp_path, _avazu_frame())
  assert os.path.exists(tmp_path / "anomalies" / "Split-train" /
                        "SchemaDiff.pb")


def test_string_in_int_column_and_missing_column_stop_the_run(tmp_path):
  frame = _avazu_frame()
  frame["banner_pos"] = "top"
  frame = frame.drop(columns=["device_type"])
  with pytest.raises(strict_example_validator.DataAnomaliesError) as error:
    _run_validator(tmp_path, frame)
  message = str(error.value)
  assert "'banner_pos'" in message and "'device_type'" in message
  assert "[train]" in message
  assert str(tmp_path / "anomalies") in message


def test_a_label_out_of_the_schema_domain_stops_the_run(tmp_path):
  frame = _avazu_frame()
  frame[features.AVAZU.label] = [i % 7 for i in range(20)]
  with pytest.raises(strict_example_validator.DataAnomaliesError,
                     match=r"\[train\] feature 'click': Out-of-range values"):
    _run_validator(tmp_path, frame)


@pytest.mark.parametrize("rows,clicks,words", [
    (1787, 0, "the eval split has 1,787 examples, all with label 0"),
    (1787, 1787, "the eval split has 1,787 examples, all with label 1"),
    (1787, 4, "the eval split has 1,787 examples, 4 with label 1 and 1,783 "
     "with label 0"),
    (7, 3, "the eval split has 7 examples, 3 with label 1 and 4 with label 0"),
    (0, 0, "the eval split has no examples"),
])
def test_label_problem_names_the_split_and_its_labels(rows, clicks, words):
  message = strict_example_validator.label_problem(
      {"train": (20000, 5000), "eval": (rows, clicks)}, "label")
  assert message == (
      f"{words}: each split needs at least 5 examples with label 1 and 5 "
      "with label 0; check that column 'label' holds the clicks and that "
      "the input has rows of both (the pipeline stops before Transform)")


def test_label_problem_names_every_short_split_and_passes_five_of_each():
  both = strict_example_validator.label_problem(
      {"train": (100, 0), "eval": (10, 10)}, "click")
  assert both.startswith("the train split has 100 examples, all with label "
                         "0; the eval split has 10 examples, all with label "
                         "1: ")
  assert strict_example_validator.label_problem(
      {"train": (10, 5), "eval": (10, 5)}, "click") is None


def test_example_gen_counts_without_both_labels_stop_before_validation(
    tmp_path):
  """The counts are ExampleGen's (every row), not the statistics' (a
  sample above a million rows): here the statistics have both labels."""
  with pytest.raises(strict_example_validator.DataAnomaliesError) as error:
    _run_validator(tmp_path, _avazu_frame(),
                   (("train", 20, 10), ("eval", 1787, 0)))
  assert str(error.value).startswith(
      "the eval split has 1,787 examples, all with label 0: ")
  assert "\n" not in str(error.value)
  assert not (tmp_path / "anomalies").exists()
