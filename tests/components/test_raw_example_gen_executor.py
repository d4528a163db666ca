"""RawCtrExampleGen end to end: the executor on generated and real files."""

import glob
import gzip
import json
import os
import pathlib
import random
import shutil

import pytest
import tensorflow as tf
from tfx.types import standard_artifacts

from components.raw_example_gen import component
from components.raw_example_gen import executor
from components.raw_example_gen import spans
from trainer_module import features

SAMPLES = pathlib.Path(__file__).resolve().parents[2] / "data" / "samples"
CRITEO = features.CRITEO


def _criteo_rows(n, seed):
  """n random Criteo rows as {column: text}; C26 is a unique row id."""
  rng = random.Random(seed)
  result = []
  for i in range(n):
    row = {c: ("" if rng.random() < 0.2 else str(rng.randint(-3, 5000)))
           for c in CRITEO.dense}
    row.update({c: ("" if rng.random() < 0.1 else f"{rng.getrandbits(32):08x}")
                for c in CRITEO.str_categorical})
    row[CRITEO.label] = str(int(rng.random() < 0.25))
    row[CRITEO.str_categorical[-1]] = f"{i:08x}"
    result.append(row)
  return result


def _write_criteo(path, rows_, bad_lines=None):
  """Writes raw Criteo text; bad_lines maps 1-based line number -> text."""
  lines = ["\t".join(r[c] for c in CRITEO.columns) for r in rows_]
  for number, text in sorted((bad_lines or {}).items()):
    lines.insert(number - 1, text)
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text("\n".join(lines) + "\n")


def _run(tmp_path, input_base, **kwargs):
  """Runs the executor with the component's own exec_properties."""
  gen = component.RawCtrExampleGen(input_base=str(input_base), **kwargs)
  examples = standard_artifacts.Examples()
  examples.uri = str(tmp_path / "output")
  executor.Executor().Do({}, {"examples": [examples]},
                         dict(gen.exec_properties))
  return examples


def _read_split(examples, split):
  files = sorted(glob.glob(os.path.join(examples.uri, f"Split-{split}",
                                        "*.gz")))
  assert files, f"no TFRecords in split {split}"
  return [tf.train.Example.FromString(r.numpy())
          for r in tf.data.TFRecordDataset(files, compression_type="GZIP")]


def _as_row(example):
  """A tf.Example back as {column: text} in the generator's format."""
  row = {c: "" for c in CRITEO.raw_features}
  for name, feature in example.features.feature.items():
    if feature.HasField("int64_list"):
      row[name] = str(feature.int64_list.value[0])
    else:
      row[name] = feature.bytes_list.value[0].decode()
  return row


def _row_id(example):
  return int(example.features.feature[CRITEO.str_categorical[-1]]
             .bytes_list.value[0], 16)


def test_hash_split_reads_every_good_row_over_many_ranges(tmp_path,
                                                          monkeypatch):
  monkeypatch.setattr(executor, "RANGE_BYTES", 4096)  # ~25 ranges.
  generated = _criteo_rows(600, seed=1)
  bad = {17: "1\t2\t3", 100: "2" + "\t" * 39, 300: "0\tabc" + "\t" * 38}
  _write_criteo(tmp_path / "in" / "train.txt", generated, bad)

  examples = _run(tmp_path, tmp_path / "in", dataset="criteo",
                  max_bad_fraction=0.01)

  train, evaluation = (_read_split(examples, s) for s in ("train", "eval"))
  assert len(train) + len(evaluation) == 600
  assert 0.05 < len(evaluation) / 600 < 0.15
  by_id = {_row_id(e): _as_row(e) for e in train + evaluation}
  assert by_id == dict(enumerate(generated))
  for example in train[:20]:
    feature = example.features.feature
    assert feature[CRITEO.label].WhichOneof("kind") == "int64_list"
    assert all(feature[c].WhichOneof("kind") == "bytes_list"
               for c in CRITEO.str_categorical if c in feature)

  props = examples.mlmd_artifact.custom_properties
  assert props["rows_read"].int_value == 603
  assert props["bad_rows"].int_value == 3
  assert props["eval_rows"].int_value == len(evaluation)
  clicks = {split: sum(e.features.feature[CRITEO.label].int64_list.value[0]
                       for e in records)
            for split, records in (("train", train), ("eval", evaluation))}
  assert 0 < clicks["eval"] < len(evaluation)
  assert props["train_clicks"].int_value == clicks["train"]
  assert props["eval_clicks"].int_value == clicks["eval"]
  summary = json.loads(
      (tmp_path / "output" / executor.SUMMARY_FILE_NAME).read_text())
  assert summary["split_rows"] == {"train": len(train),
                                   "eval": len(evaluation)}
  assert summary["split_clicks"] == clicks
  (per_file,) = summary["files"]
  assert per_file["bad_rows"] == 3
  assert per_file["first_bad_reason"] == "expected 40 fields, got 3"
  assert examples.split_names == '["train", "eval"]'


def test_hash_split_is_reproducible(tmp_path):
  _write_criteo(tmp_path / "in" / "train.txt", _criteo_rows(300, seed=2))
  ids = []
  for run in ("a", "b"):
    examples = _run(tmp_path / run, tmp_path / "in", dataset="criteo")
    ids.append(sorted(_row_id(e) for e in _read_split(examples, "eval")))
  assert ids[0] == ids[1]


def test_too_many_bad_rows_fail_naming_the_first_bad_line(tmp_path):
  bad = {17: "1\t2\t3", 40: "0\tabc" + "\t" * 38}
  _write_criteo(tmp_path / "in" / "train.txt", _criteo_rows(200, seed=3),
                bad)
  with pytest.raises(ValueError) as error:
    _run(tmp_path, tmp_path / "in", dataset="criteo", max_bad_fraction=0.001)
  message = str(error.value)
  assert "train.txt line 17: expected 40 fields, got 3" in message
  assert "2 of 202 rows" in message


def test_bad_int_is_reported_with_field_and_line(tmp_path):
  rows_ = _criteo_rows(50, seed=4)
  rows_[4]["I3"] = "abc"
  _write_criteo(tmp_path / "in" / "train.txt", rows_)
  with pytest.raises(ValueError,
                     match=r"train.txt line 5: field I3 = 'abc' is not an "
                     r"integer"):
    _run(tmp_path, tmp_path / "in", dataset="criteo")


def test_sequential_split_puts_the_tail_of_the_last_file_in_eval(tmp_path):
  generated = _criteo_rows(400, seed=5)
  # Natural order: day_2 (rows 0-199) before day_10 (rows 200-399).
  _write_criteo(tmp_path / "in" / "day_2.txt", generated[:200])
  _write_criteo(tmp_path / "in" / "day_10.txt", generated[200:])

  examples = _run(tmp_path, tmp_path / "in", dataset="criteo",
                  split="sequential", eval_fraction=0.25)

  train_ids = {_row_id(e) for e in _read_split(examples, "train")}
  eval_ids = {_row_id(e) for e in _read_split(examples, "eval")}
  assert train_ids | eval_ids == set(range(400))
  assert max(train_ids) < min(eval_ids)
  assert 80 < len(eval_ids) < 120


def test_real_criteo_sample(tmp_path):
  shutil.copy(SAMPLES / "criteo_sample.txt", tmp_path / "criteo_sample.txt")
  examples = _run(tmp_path, tmp_path, dataset="criteo",
                  input_pattern="criteo_sample.txt")
  records = _read_split(examples, "train") + _read_split(examples, "eval")
  assert len(records) == 200
  assert sum(e.features.feature["label"].int64_list.value[0]
             for e in records) == 49
  # Its '260.0' ints are parsed row by row: the clicks are counted there too.
  assert (examples.get_int_custom_property("train_clicks") +
          examples.get_int_custom_property("eval_clicks")) == 49
  assert all(e.features.feature["I5"].WhichOneof("kind") == "int64_list"
             for e in records if "I5" in e.features.feature)
  assert examples.get_int_custom_property("bad_rows") == 0


def test_real_avazu_sample(tmp_path):
  shutil.copy(SAMPLES / "avazu_sample.txt", tmp_path / "train")
  examples = _run(tmp_path, tmp_path, dataset="avazu")
  train, evaluation = (_read_split(examples, s) for s in ("train", "eval"))
  assert len(train) + len(evaluation) == 100
  assert 10 <= len(evaluation) <= 30
  for example in train + evaluation:
    assert "id" not in example.features.feature
    assert set(example.features.feature) <= set(features.AVAZU.raw_features)
    assert example.features.feature["hour"].int64_list.value[0] == 14102100


def test_input_without_data_rows_fails(tmp_path):
  (tmp_path / "in").mkdir()
  (tmp_path / "in" / "train.csv").write_text(",".join(CRITEO.columns) + "\n")
  with pytest.raises(ValueError, match=f"no data rows .*{tmp_path}/in/\\*"):
    _run(tmp_path, tmp_path / "in", dataset="criteo")
  with pytest.raises(FileNotFoundError, match="no input files match"):
    _run(tmp_path, tmp_path / "in", dataset="criteo", input_pattern="*.txt")


def _gzip(path):
  """path.gz with path's bytes; path removed."""
  compressed = path.with_name(path.name + ".gz")
  with open(path, "rb") as plain, gzip.open(compressed, "wb") as out:
    shutil.copyfileobj(plain, out)
  path.unlink()
  return compressed


def test_gzipped_files_read_as_one_stream_each(tmp_path):
  generated = _criteo_rows(400, seed=6)
  _write_criteo(tmp_path / "in" / "day_0.txt", generated[:250],
                {7: "1\t2\t3"})
  _write_criteo(tmp_path / "in" / "day_1.txt", generated[250:])
  _gzip(tmp_path / "in" / "day_0.txt")  # One gzipped, one plain file.

  examples = _run(tmp_path, tmp_path / "in", dataset="criteo",
                  max_bad_fraction=0.01)

  rows_ = _read_split(examples, "train") + _read_split(examples, "eval")
  assert {_row_id(e): _as_row(e) for e in rows_} == dict(
      enumerate(generated))
  summary = json.loads(
      (tmp_path / "output" / executor.SUMMARY_FILE_NAME).read_text())
  assert summary["files"][0]["path"].endswith("day_0.txt.gz")
  assert summary["files"][0]["bad_rows"] == 1
  with pytest.raises(ValueError, match=r"day_0.txt.gz line 7: expected 40"):
    _run(tmp_path / "strict", tmp_path / "in", dataset="criteo",
         max_bad_fraction=0.001)
  with pytest.raises(ValueError, match="day_0.txt.gz: the sequential split"):
    _run(tmp_path / "seq", tmp_path / "in", dataset="criteo",
         split="sequential")


def test_foreign_files_are_refused_or_skipped(tmp_path):
  """Criteo's dac.tar.gz extracted: train.txt, test.txt (no label), readme."""
  generated = _criteo_rows(100, seed=7)
  _write_criteo(tmp_path / "in" / "train.txt", generated)
  (tmp_path / "in" / "test.txt").write_text("".join(
      "\t".join(r[c] for c in CRITEO.columns[1:]) + "\n"
      for r in generated[:20]))
  (tmp_path / "in" / "readme.txt").write_text("Criteo dataset\n\nterms\n")
  with pytest.raises(ValueError, match="test.txt: Criteo's unlabelled"):
    _run(tmp_path, tmp_path / "in", dataset="criteo")
  examples = _run(tmp_path, tmp_path / "in", dataset="criteo",
                  skip_foreign_files=True)
  summary = json.loads(
      (tmp_path / "output" / executor.SUMMARY_FILE_NAME).read_text())
  assert [os.path.basename(f["path"]) for f in summary["files"]] == [
      "train.txt"]
  assert summary["rows_read"] == 100 and summary["bad_rows"] == 0
  assert examples.mlmd_artifact.custom_properties["rows_read"].int_value == (
      100)


def test_without_a_driver_the_executor_reads_the_span_tfxs_driver_picks(
    tmp_path):
  """Daily folders (--data 'logs/day-{SPAN}/'): where no driver resolved
  the span (a compiled spec on open-source Kubeflow), the executor reads
  the latest span, or the range's, and records it on the Examples as TFX's
  driver does; a span that is not there is named with those that are."""
  logs = tmp_path / "logs"
  for day in (1, 2, 10):
    _write_criteo(logs / f"day-{day}" / "train.txt",
                  _criteo_rows(40 * day, seed=day))
  base, pattern = spans.split_span_path(str(logs) + "/day-{SPAN}/")
  assert (base, pattern) == (str(logs), "day-{SPAN}/*")
  for choice, day in ((None, 10), ("latest", 10), ("2", 2)):
    examples = _run(tmp_path / (choice or "none"), base, dataset="criteo",
                    input_pattern=pattern,
                    range_config=spans.range_config(choice))
    assert examples.span == day
    assert examples.get_int_custom_property("span") == day
    rows = _read_split(examples, "train") + _read_split(examples, "eval")
    assert len(rows) == 40 * day
  with pytest.raises(ValueError, match=r"span 7 of .*day-\{SPAN\}/\* is not "
                     "there: spans found: 1, 2, 10"):
    _run(tmp_path / "seven", base, dataset="criteo", input_pattern=pattern,
         range_config=spans.range_config("7"))
  with pytest.raises(ValueError, match="span must be 'latest', a span "
                     r"number, .* got 'yesterday'"):
    spans.range_config("yesterday")
