"""The input check of a run, and the daily pattern it resolves: a {SPAN}
folder means its files, with or without the trailing slash."""

import pytest
from tfx.components.example_gen import utils

from commands.synthetic import generate
from components.raw_example_gen import spans
from pipeline import input_check
from pipeline import pipeline as pipeline_lib
from pipeline.config import PipelineConfig
from trainer_module import options


def _config(data, span=None):
  return options.from_values(PipelineConfig, {"span": span},
                             dataset="criteo", data=str(data), output="o")


def test_span_is_tfx_own_pattern():
  """Written out in spans.py so that the pattern checks import no TFX."""
  assert spans.SPAN == utils.SPAN_SPEC


@pytest.mark.parametrize("slash", ["/", ""])
def test_a_daily_folder_pattern_reads_its_files_with_or_without_slash(
    tmp_path, slash):
  logs = tmp_path / "logs"
  generate.write_days("criteo", 20, 2, 0, str(logs))
  daily = f"{logs}/day-{{SPAN}}{slash}"
  assert spans.split_span_path(daily) == (str(logs), "day-{SPAN}/*")
  assert pipeline_lib.split_input(daily) == (str(logs), "day-{SPAN}/*")
  for span in ("1", None):
    input_check.check_input(_config(daily, span))
  where, files = spans.span_files(daily, "1")
  assert where == f"{logs}/day-1/*"
  assert files == tuple(str(f) for f in sorted((logs / "day-1").iterdir()))


def test_a_pattern_without_slash_can_still_name_files(tmp_path):
  generate.write_synthetic("criteo", 20, 0, str(tmp_path / "day-1.txt"))
  daily = f"{tmp_path}/day-{{SPAN}}.txt"
  assert spans.split_span_path(daily) == (str(tmp_path), "day-{SPAN}.txt")
  input_check.check_input(_config(daily, "1"))
  assert spans.span_files(daily, "1")[1] == (str(tmp_path / "day-1.txt"),)


def test_a_missing_path_and_a_span_without_pattern_are_refused(tmp_path):
  with pytest.raises(input_check.InputError, match="does not exist"):
    input_check.check_input(_config(tmp_path / "nope"))
  (tmp_path / "train.txt").write_text("x\n")
  with pytest.raises(input_check.InputError, match="has no {SPAN} in it"):
    input_check.check_input(_config(tmp_path / "train.txt", "1"))
