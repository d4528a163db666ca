"""Unit tests of RawCtrExampleGen's parts: layouts, rows, splits, ranges."""

import pathlib
import random

import pytest
import tensorflow as tf
from tfx.proto import example_gen_pb2
from tfx.utils import proto_utils

from components.raw_example_gen import component
from components.raw_example_gen import example_encoding
from components.raw_example_gen import executor
from components.raw_example_gen import rows
from trainer_module import features

SAMPLES = pathlib.Path(__file__).resolve().parents[2] / "data" / "samples"
CRITEO = features.CRITEO
AVAZU = features.AVAZU


def _criteo_values(label="1"):
  """A full Criteo row as {column: text}: ints I*, hex ids C*."""
  values = {c: str(i * 7 - 3) for i, c in enumerate(CRITEO.dense)}
  values.update({c: f"{i:08x}" for i, c in enumerate(CRITEO.str_categorical)})
  values[CRITEO.label] = label
  return values


def _line(values, columns, delimiter):
  return delimiter.join(values[c] for c in columns).encode()


def _parse(line, layout):
  return tf.train.Example.FromString(rows.encode_row(line, layout))


def _feature_values(example):
  """{name: python value} of a single-valued tf.Example."""
  out = {}
  for name, feature in example.features.feature.items():
    kind = feature.WhichOneof("kind")
    assert kind in ("int64_list", "bytes_list"), name
    (value,) = getattr(feature, kind).value
    out[name] = value
  return out


class TestDetectLayout:

  def test_raw_criteo_line_is_headerless_tab_separated(self):
    line = _line(_criteo_values(), CRITEO.columns, "\t")
    layout = rows.detect_layout(line, CRITEO, "train.txt")
    assert layout.delimiter == b"\t"
    assert not layout.has_header
    assert layout.num_fields == len(CRITEO.columns)
    assert layout.label[:2] == (0, CRITEO.label)

  def test_comma_header_in_any_order_maps_columns_by_name(self):
    columns = list(CRITEO.columns)
    random.Random(0).shuffle(columns)
    header = ",".join(columns).encode()
    layout = rows.detect_layout(header, CRITEO, "f.csv")
    assert layout.has_header and layout.delimiter == b","
    values = _criteo_values()
    got = _feature_values(_parse(_line(values, columns, ","), layout))
    want = {c: int(values[c]) for c in CRITEO.int_features}
    want.update({c: values[c].encode() for c in CRITEO.str_categorical})
    assert got == want

  def test_tab_header_is_detected(self):
    layout = rows.detect_layout("\t".join(CRITEO.columns).encode(), CRITEO, "f")
    assert layout.has_header and layout.delimiter == b"\t"

  def test_avazu_raw_header_drops_id(self):
    with open(SAMPLES / "avazu_sample.txt", "rb") as f:
      header = f.readline().rstrip(b"\n")
    layout = rows.detect_layout(header, AVAZU, "train")
    assert layout.has_header and layout.delimiter == b","
    mapped = {name for _, name, _ in layout.int_columns + layout.str_columns}
    mapped.add(layout.label[1])
    assert mapped == set(AVAZU.raw_features)
    assert "id" not in mapped

  def test_header_without_dropped_column_is_accepted(self):
    header = ",".join(AVAZU.raw_features).encode()
    layout = rows.detect_layout(header, AVAZU, "f")
    assert layout.num_fields == len(AVAZU.raw_features)

  def test_header_missing_and_unknown_columns_fail_naming_them(self):
    names = [c for c in CRITEO.columns if c != "I5"] + ["extra"]
    with pytest.raises(rows.HeaderError,
                       match=r"day_0.csv: .*missing columns \['I5'\]; "
                       r"unknown columns \['extra'\]"):
      rows.detect_layout(",".join(names).encode(), CRITEO, "day_0.csv")

  def test_repeated_header_column_fails(self):
    names = list(CRITEO.columns) + ["C1"]
    with pytest.raises(rows.HeaderError, match=r"repeated columns \['C1'\]"):
      rows.detect_layout(",".join(names).encode(), CRITEO, "f")

  def test_header_of_other_dataset_fails(self):
    header = ",".join(AVAZU.columns).encode()
    with pytest.raises(rows.HeaderError, match="missing columns.*'label'"):
      rows.detect_layout(header, CRITEO, "avazu.csv")


class TestParseRow:

  layout = rows.detect_layout(b"1\t2", CRITEO, "train.txt")

  def test_criteo_raw_row_types(self):
    values = _criteo_values(label="0")
    example = _parse(_line(values, CRITEO.columns, "\t"), self.layout)
    feature = example.features.feature
    assert set(feature) == set(CRITEO.raw_features)
    for name in CRITEO.int_features:
      assert list(feature[name].int64_list.value) == [int(values[name])]
    for name in CRITEO.str_categorical:
      assert list(feature[name].bytes_list.value) == [values[name].encode()]
    assert feature["I1"].int64_list.value[0] == -3

  def test_empty_fields_are_absent_features(self):
    values = _criteo_values()
    values["I3"] = values["C7"] = values["C26"] = ""
    example = _parse(_line(values, CRITEO.columns, "\t"), self.layout)
    feature = example.features.feature
    assert not {"I3", "C7", "C26"} & set(feature)
    assert len(feature) == len(CRITEO.raw_features) - 3

  def test_integral_floats_are_ints(self):
    values = _criteo_values()
    values["I2"], values["I4"], values[CRITEO.label] = "260.0", "-1.0", "1.0"
    got = _feature_values(
        _parse(_line(values, CRITEO.columns, "\t"), self.layout))
    assert (got["I2"], got["I4"], got["label"]) == (260, -1, 1)

  @pytest.mark.parametrize("value", ["2.5", "abc", "nan", "inf", "1e400"])
  def test_non_integers_are_bad_rows(self, value):
    values = _criteo_values()
    values["I3"] = value
    with pytest.raises(rows.BadRowError,
                       match=f"^field I3 = '{value}' is not an integer$"):
      _parse(_line(values, CRITEO.columns, "\t"), self.layout)

  def test_int64_overflow_is_a_bad_row(self):
    values = _criteo_values()
    values["I1"] = str(1 << 63)
    with pytest.raises(rows.BadRowError, match="I1 .* out of int64 range"):
      _parse(_line(values, CRITEO.columns, "\t"), self.layout)

  def test_wrong_field_count_is_a_bad_row(self):
    line = _line(_criteo_values(), CRITEO.columns[:-1], "\t")
    with pytest.raises(rows.BadRowError,
                       match="^expected 40 fields, got 39$"):
      _parse(line, self.layout)

  @pytest.mark.parametrize("label,message", [
      ("2", "label label = '2' is not 0 or 1"),
      ("-1", "label label = '-1' is not 0 or 1"),
      ("", "label label is empty"),
      ("yes", "field label = 'yes' is not an integer"),
  ])
  def test_bad_labels(self, label, message):
    line = _line(_criteo_values(label=label), CRITEO.columns, "\t")
    with pytest.raises(rows.BadRowError, match=f"^{message}$"):
      _parse(line, self.layout)

  def test_long_bad_value_is_cut_in_message(self):
    values = _criteo_values()
    values["I1"] = "x" * 500
    with pytest.raises(rows.BadRowError) as error:
      _parse(_line(values, CRITEO.columns, "\t"), self.layout)
    assert len(str(error.value)) < 100

  def test_real_avazu_sample_rows(self):
    lines = (SAMPLES / "avazu_sample.txt").read_bytes().splitlines()
    layout = rows.detect_layout(lines[0], AVAZU, "avazu_sample.txt")
    header = lines[0].decode().split(",")
    examples = [_parse(line, layout) for line in lines[1:]]
    assert len(examples) == 100
    assert sum(e.features.feature["click"].int64_list.value[0]
               for e in examples) == 20
    first = examples[0].features.feature
    raw = dict(zip(header, lines[1].decode().split(",")))
    assert "id" not in first
    assert first["hour"].int64_list.value[0] == int(raw["hour"]) == 14102100
    assert first["site_id"].bytes_list.value[0] == raw["site_id"].encode()
    assert first["C14"].int64_list.value[0] == int(raw["C14"])

  def test_real_criteo_sample_rows(self):
    lines = (SAMPLES / "criteo_sample.txt").read_bytes().splitlines()
    layout = rows.detect_layout(lines[0], CRITEO, "criteo_sample.txt")
    assert layout.has_header and layout.delimiter == b","
    examples = [_parse(line, layout) for line in lines[1:]]
    assert len(examples) == 200
    assert sum(e.features.feature["label"].int64_list.value[0]
               for e in examples) == 49
    # Row 5 is '0,0.0,0,104.0,...,,27.0,05db9164,...': I12 empty, floats ints.
    row = examples[4].features.feature
    assert row["I3"].int64_list.value[0] == 104
    assert "I12" not in row
    assert row["C1"].bytes_list.value[0] == b"05db9164"


class TestExampleEncoding:

  @pytest.mark.parametrize("value", [
      0, 1, 127, 128, 16383, 16384, -1, -2, 14102100, (1 << 63) - 1,
      -(1 << 63)])
  def test_int64_feature_matches_the_proto_library(self, value):
    want = tf.train.Example()
    want.features.feature["I1"].int64_list.value.append(value)
    got = tf.train.Example.FromString(example_encoding.example(
        [example_encoding.int64_feature(example_encoding.feature_key("I1"),
                                        value)]))
    assert got == want

  @pytest.mark.parametrize("length", [0, 1, 100, 127, 128, 20000])
  def test_bytes_feature_matches_the_proto_library(self, length):
    value = bytes(range(256)) * (length // 256) + bytes(range(length % 256))
    name = "n" * length  # Long keys need multi-byte lengths too.
    want = tf.train.Example()
    want.features.feature[name].bytes_list.value.append(value)
    got = tf.train.Example.FromString(example_encoding.example(
        [example_encoding.bytes_feature(example_encoding.feature_key(name),
                                        value)]))
    assert got == want

  def test_whole_random_rows_match_the_proto_library(self):
    rng = random.Random(0)
    layout = rows.detect_layout(b"1\t2", CRITEO, "f")
    for _ in range(200):
      values = _criteo_values(label=str(rng.randint(0, 1)))
      for name in CRITEO.columns[1:]:
        if rng.random() < 0.3:
          values[name] = ""
        elif name in CRITEO.dense:
          values[name] = str(rng.randint(-(1 << 63), (1 << 63) - 1))
      want = tf.train.Example()
      for name in CRITEO.raw_features:
        if not values[name]:
          continue
        if name in CRITEO.int_features:
          want.features.feature[name].int64_list.value.append(
              int(values[name]))
        else:
          want.features.feature[name].bytes_list.value.append(
              values[name].encode())
      assert _parse(_line(values, CRITEO.columns, "\t"), layout) == want


class TestSplits:

  def test_hash_split_is_deterministic_and_stable(self):
    lines = [f"row {i}".encode() for i in range(200)]
    first = [rows.split_by_hash(line, [9000, 10000]) for line in lines]
    assert first == [rows.split_by_hash(line, [9000, 10000]) for line in lines]
    # Pinned so that a change of hash, which would move rows between train and
    # eval of an existing pipeline, cannot go unnoticed.
    assert [i for i, split in enumerate(first) if split] == [
        17, 21, 25, 29, 34, 39, 62, 75, 102, 104, 108, 122, 133, 134, 148, 149,
        150, 151, 173, 175, 197]
    assert rows.split_by_hash(b"abc", list(range(1, 10001))) == 9896

  @pytest.mark.parametrize("boundaries,fractions", [
      ([9000, 10000], [0.9, 0.1]),
      ([8000, 10000], [0.8, 0.2]),
      ([5, 7, 10], [0.5, 0.2, 0.3]),
  ])
  def test_hash_split_fractions(self, boundaries, fractions):
    n = 20000
    counts = [0] * len(boundaries)
    for i in range(n):
      counts[rows.split_by_hash(f"{i}\t{i * 31}".encode(), boundaries)] += 1
    for count, fraction in zip(counts, fractions):
      assert abs(count / n - fraction) < 0.015

  def test_position_split_puts_the_tail_last(self):
    n = 1000
    splits = [rows.split_by_position(i, n, [9000, 10000]) for i in range(n)]
    assert splits == [0] * 900 + [1] * 100
    total = 11 * 10**9 + 7
    assert rows.split_by_position(total - 1, total, [9000, 10000]) == 1
    assert rows.split_by_position(0, total, [5, 7, 10]) == 0


class TestByteRanges:

  def _write(self, tmp_path, data):
    path = tmp_path / "data.txt"
    path.write_bytes(data)
    return str(path)

  @pytest.mark.parametrize("data", [
      b"a\nbb\n\nccc\r\ndddd\ne",
      b"head\nx\nyy\n",
      b"\n\nz",
  ])
  def test_ranges_read_every_line_once_with_its_offset(self, tmp_path, data):
    path = self._write(tmp_path, data)
    want, offset = [], 0
    for line in data.split(b"\n"):
      want.append((offset, line.rstrip(b"\r")))
      offset += len(line) + 1
    if want[-1][1] == b"":
      want.pop()
    for range_bytes in range(1, len(data) + 2):
      for chunk_bytes in (1, 3, 64):
        got = []
        for start in range(0, len(data), range_bytes):
          got.extend(executor.read_lines(path, start, start + range_bytes,
                                         chunk_bytes=chunk_bytes))
        assert got == want, (range_bytes, chunk_bytes)

  def test_line_number_at(self, tmp_path):
    path = self._write(tmp_path, b"h\nab\n\ncd\n")
    assert [executor.line_number_at(path, o) for o in (0, 2, 5, 6)] == [
        1, 2, 3, 4]

  def test_plan_orders_files_naturally_and_skips_headers(self, tmp_path):
    header = ",".join(AVAZU.columns) + "\n"
    row = ",".join(["1"] * len(AVAZU.columns)) + "\n"
    for name, n in (("day_10.csv", 3), ("day_2.csv", 1), ("day_1.csv", 2)):
      (tmp_path / name).write_text(header + row * n)
    (tmp_path / "empty.csv").write_text("")
    files = executor.plan_input_files(str(tmp_path / "*"), AVAZU)
    assert [pathlib.Path(f.path).name for f in files] == [
        "day_1.csv", "day_2.csv", "day_10.csv"]
    assert all(f.data_start == len(header) for f in files)
    assert [f.data_base for f in files] == [0, 2 * len(row), 3 * len(row)]
    ranges = executor.byte_ranges(files, len(row))
    assert len(ranges) == 6
    assert ranges[0] == (0, len(header), len(header) + len(row))

  def test_plan_errors_name_the_path(self, tmp_path):
    with pytest.raises(FileNotFoundError, match=f"{tmp_path}/nothing"):
      executor.plan_input_files(str(tmp_path / "nothing*"), CRITEO)
    (tmp_path / "train.txt.gz").write_bytes(b"\x1f\x8b")
    with pytest.raises(ValueError, match="train.txt.gz: not a text file"):
      executor.plan_input_files(str(tmp_path / "*.gz"), CRITEO)
    (tmp_path / "bad.csv").write_text("label,I1\n1,2\n")
    with pytest.raises(rows.HeaderError, match=r"bad.csv: .*'I2'"):
      executor.plan_input_files(str(tmp_path / "*.csv"), CRITEO)


class TestConfig:

  def test_options_round_trip_through_custom_config_json(self):
    options = executor.IngestOptions("avazu", "sequential", 0.01)
    exec_properties = component.RawCtrExampleGen(
        input_base="/in", dataset="avazu", split="sequential",
        max_bad_fraction=0.01).exec_properties
    assert executor.IngestOptions.from_custom_config_json(
        exec_properties["custom_config"]) == options

  @pytest.mark.parametrize("dataset,eval_fraction,want", [
      ("criteo", None, [9000, 10000]),
      ("avazu", None, [8000, 10000]),
      ("criteo", 0.25, [7500, 10000]),
  ])
  def test_eval_fraction_becomes_hash_buckets(self, dataset, eval_fraction,
                                              want):
    gen = component.RawCtrExampleGen(input_base="/in", dataset=dataset,
                                     eval_fraction=eval_fraction)
    output_config = example_gen_pb2.Output()
    proto_utils.json_to_proto(
        gen.exec_properties["output_config"], output_config)
    assert executor.split_boundaries(output_config) == want
    assert [s.name for s in output_config.split_config.splits] == [
        "train", "eval"]
    assert "examples" in gen.outputs

  @pytest.mark.parametrize("kwargs,message", [
      ({"dataset": "movielens"}, "unknown dataset 'movielens'"),
      ({"split": "random"}, "split must be one of"),
      ({"max_bad_fraction": 1.0}, "max_bad_fraction must be in"),
      ({"eval_fraction": 0.0}, "eval_fraction must be in"),
      ({"eval_fraction": 1.0}, "eval_fraction must be in"),
  ])
  def test_invalid_arguments(self, kwargs, message):
    kwargs = {"input_base": "/in", "dataset": "criteo", **kwargs}
    with pytest.raises(ValueError, match=message):
      component.RawCtrExampleGen(**kwargs)
