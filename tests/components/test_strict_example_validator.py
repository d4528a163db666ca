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


def _run_validator(tmp_path, frame: pd.DataFrame) -> None:
  stats = standard_artifacts.ExampleStatistics()
  stats.uri = str(tmp_path / "stats")
  stats.split_names = artifact_utils.encode_split_names(["train"])
  split_dir = os.path.join(stats.uri, "Split-train")
  os.makedirs(split_dir)
  io_utils.write_bytes_file(
      os.path.join(split_dir, "FeatureStats.pb"),
      tfdv.generate_statistics_from_dataframe(frame).SerializeToString())
  schema = standard_artifacts.Schema()
  schema.uri = os.path.join(config_lib.SCHEMA_ROOT, "avazu")
  anomalies = standard_artifacts.ExampleAnomalies()
  anomalies.uri = str(tmp_path / "anomalies")
  strict_example_validator.Executor().Do(
      {standard_component_specs.STATISTICS_KEY: [stats],
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


@pytest.mark.parametrize("labels,message", [
    ([0] * 20, "fewer than 5 clicks or 5 non-clicks (20 examples in the "
     "statistics: 0 labelled 1, 20 labelled 0, values 0 to 0"),
    ([1] * 4 + [0] * 16, "fewer than 5 clicks or 5 non-clicks (20 examples "
     "in the statistics: 4 labelled 1, 16 labelled 0"),
    ([i % 7 for i in range(20)], "Out-of-range values"),
])
def test_a_split_without_both_labels_stops_the_run(tmp_path, labels, message):
  frame = _avazu_frame()
  frame[features.AVAZU.label] = labels
  with pytest.raises(strict_example_validator.DataAnomaliesError) as error:
    _run_validator(tmp_path, frame)
  assert f"[train] feature 'click': {message}" in str(error.value)


def test_five_of_each_label_pass(tmp_path):
  frame = _avazu_frame()
  frame[features.AVAZU.label] = [1] * 5 + [0] * 15
  _run_validator(tmp_path, frame)
