"""The rolling window of spans: --span rolling:K parsed, each run's span
registered (the newest ingestion of a span wins), the window ending at this
run's span with its gaps recorded, and expanded for Transform, the Tuner
and the Trainer into the days' Examples."""

import json
import os

import pytest
from tfx.types import artifact_utils
from tfx.types import standard_artifacts

from commands.experiments import study_data
from commands.synthetic import generate
from components import span_window
from components.raw_example_gen import spans
from pipeline import config as config_lib


def _examples(root, span, name=None):
  """An ExampleGen-like Examples artifact of `span`, with its split
  directories."""
  examples = standard_artifacts.Examples()
  examples.uri = str(root / (name or f"examples-{span}"))
  # As TFX's driver records it: a custom property only.
  examples.set_int_custom_property("span", span)
  examples.split_names = artifact_utils.encode_split_names(["train", "eval"])
  examples.set_string_custom_property("payload_format", "FORMAT_TF_EXAMPLE")
  for split in ("train", "eval"):
    os.makedirs(os.path.join(examples.uri, f"Split-{split}"))
  return examples


def _window(tmp_path, day, days, registry):
  window = standard_artifacts.Examples()
  window.uri = str(tmp_path / f"window-{span_window.span_of(day)}-{days}")
  span_window.Executor().Do(
      {span_window.EXAMPLES_KEY: [day]}, {span_window.WINDOW_KEY: [window]},
      {span_window.DAYS_KEY: days, span_window.REGISTRY_KEY: registry})
  return window


def test_span_choices():
  for choice in (None, "latest", "0", "12", "rolling:1", "rolling:7", "3-3",
                 "2-4"):
    spans.parse_span_choice(choice)
  for choice in ("soon", "-1", "rolling:0", "rolling:", "rolling:x",
                 "rolling:-2", "rolling", "4-2", "2-", "-4", "2-4-6"):
    with pytest.raises(ValueError, match="a range 'A-B'"):
      spans.parse_span_choice(choice)
  assert [spans.parse_span_choice(c) for c in (
      None, "latest", "3", "rolling:1", "rolling:7", "2-4")] == [
          spans.SpanChoice(None, 1), spans.SpanChoice(None, 1),
          spans.SpanChoice(3, 1), spans.SpanChoice(None, 1),
          spans.SpanChoice(None, 7), spans.SpanChoice(4, 3)]
  assert spans.window_days("2-4") == 3
  # A rolling window ingests the latest span, as --span latest does; a
  # range ingests its last.
  assert spans.range_config("rolling:7") is None
  assert spans.range_config("3").static_range.start_span_number == 3
  assert spans.range_config("2-4").static_range == spans.range_config(
      "4").static_range


def test_the_window_ends_at_this_runs_span_and_the_newest_ingestion_wins(
    tmp_path):
  registry = str(tmp_path / "registry")
  days = {span: _examples(tmp_path, span) for span in (1, 2, 3, 4)}
  for span in (1, 2, 3, 4):
    _window(tmp_path, days[span], 1, registry)
  (tmp_path / "registry" / "span-x.json").write_text("{}")  # Not an entry.
  assert span_window.registered_spans(registry) == [1, 2, 3, 4]
  # Day 3 ingested again (its files changed): the newer one replaces it.
  again = _examples(tmp_path, 3, "examples-3-again")
  _window(tmp_path, again, 1, registry)
  # A backfill of day 3 with rolling:2 reads days 2 and 3, not the later 4.
  window = _window(tmp_path, again, 2, registry)
  assert window.span == span_window.span_of(window) == 3
  assert window.split_names == days[1].split_names
  assert window.get_string_custom_property(
      span_window.WINDOW_SPANS_PROPERTY) == "2,3"
  assert window.get_string_custom_property(
      span_window.MISSING_SPANS_PROPERTY) == ""
  assert window.get_int_custom_property(span_window.WINDOW_DAYS_PROPERTY) == 2
  expanded = span_window.expand_examples([window])
  assert [(span_window.span_of(e), e.uri) for e in expanded] == [
      (2, days[2].uri), (3, again.uri)]
  assert all(e.split_names == window.split_names and
             e.get_string_custom_property("payload_format") ==
             "FORMAT_TF_EXAMPLE" for e in expanded)
  assert artifact_utils.get_split_uris(expanded, "train") == [
      os.path.join(days[2].uri, "Split-train"),
      os.path.join(again.uri, "Split-train")]
  # Not a window: kept as it is.
  assert span_window.expand_examples([days[4]]) == [days[4]]
  inputs = {"examples": [window], "schema": ["kept"]}
  assert span_window.expand_input(inputs)["examples"][1].uri == again.uri
  assert span_window.expand_input(inputs)["schema"] == ["kept"]


def test_spans_before_the_first_ingested_are_not_gaps_and_gaps_are_recorded(
    tmp_path, caplog):
  registry = str(tmp_path / "registry")
  # The first day of a rolling:7: spans 0-4 were never this DIR's.
  first = _window(tmp_path, _examples(tmp_path, 5), 7, registry)
  assert first.get_string_custom_property(
      span_window.WINDOW_SPANS_PROPERTY) == "5"
  assert first.get_string_custom_property(
      span_window.MISSING_SPANS_PROPERTY) == ""
  # Day 6 was skipped and day 7's Examples were deleted: both are gaps.
  seventh = _examples(tmp_path, 7)
  _window(tmp_path, seventh, 1, registry)
  os.rename(os.path.join(seventh.uri, "Split-eval"),
            os.path.join(seventh.uri, "moved"))
  window = _window(tmp_path, _examples(tmp_path, 8), 7, registry)
  assert window.get_string_custom_property(
      span_window.WINDOW_SPANS_PROPERTY) == "5,8"
  assert window.get_string_custom_property(
      span_window.MISSING_SPANS_PROPERTY) == "6,7"
  assert f"its Examples at {seventh.uri} are gone (eval)" in caplog.text
  assert "spans 6,7 were not ingested by a run" in caplog.text
  with open(os.path.join(window.uri, span_window.MANIFEST)) as f:
    manifest = json.load(f)
  assert manifest["last_span"] == 8 and manifest["missing_spans"] == [6, 7]
  with pytest.raises(ValueError, match="at least one"):
    span_window.SpanWindow(examples=None, days=0, registry=registry)


def test_the_vocabulary_threshold_is_sized_by_the_window_on_disk(tmp_path):
  generate.write_days("criteo", 400, 3, 0, str(tmp_path / "logs"))
  daily = str(tmp_path / "logs") + "/day-{SPAN}/"
  assert len(spans.window_files(daily, "rolling:2")) == 2
  assert spans.window_files(daily, "rolling:9") == tuple(
      f for span in ("1", "2", "3") for f in spans.span_files(daily, span)[1])
  one = config_lib.PipelineConfig.from_fields("criteo", daily, "o")
  three = config_lib.PipelineConfig.from_fields("criteo", daily, "o",
                                                span="rolling:3")
  assert three.estimated_rows == one.estimated_rows  # Day 3 ingested.
  assert three.estimated_window_rows == pytest.approx(
      3 * one.estimated_rows, rel=0.1)
  assert one.estimated_window_rows == one.estimated_rows
  assert three.span_registry_dir == os.path.join("o", "examples_by_span")
  # Days 1-2, ingesting day 2.
  backfill = config_lib.PipelineConfig.from_fields("criteo", daily, "o",
                                                   span="1-2")
  assert spans.window_files(daily, "1-2") == tuple(
      f for span in ("1", "2") for f in spans.span_files(daily, span)[1])
  assert backfill.estimated_window_rows == pytest.approx(
      2 * one.estimated_rows, rel=0.1)


def test_a_study_trains_on_one_day_of_daily_data(tmp_path):
  """The study and the benchmark train on one Examples artifact: a window
  of several days is refused before anything runs, a day's window is read
  as its day."""
  daily = str(tmp_path / "logs") + "/day-{SPAN}/"
  config = config_lib.PipelineConfig.from_fields(
      "criteo", daily, str(tmp_path / "out"), span="rolling:2")
  with pytest.raises(ValueError, match="--span rolling:2: the study and the "
                     "benchmark train on one day of daily data"):
    study_data.transform_once(config)
  assert not (tmp_path / "out").exists()
  registry = str(tmp_path / "registry")
  day = _examples(tmp_path, 4)
  window = _window(tmp_path, day, 1, registry)
  assert span_window.day_uris(window.uri) == [day.uri]
  assert span_window.day_uris(day.uri) == [day.uri]
