"""columnar.py: pyarrow-parsed blocks encode to rows.encode_row's bytes."""

import random

import pyarrow as pa
import pytest

from components.raw_example_gen import columnar
from components.raw_example_gen import rows
from trainer_module import features


def _criteo_line(rng: random.Random) -> bytes:
  spec = features.CRITEO
  fields = [str(rng.randint(0, 1))]
  for _ in spec.dense:
    fields.append(rng.choice(["", "0", "-3", "127", "128", "16384",
                              str(rng.randint(-(1 << 63), (1 << 63) - 1))]))
  for _ in spec.str_categorical:
    fields.append(rng.choice(["", "a", f"{rng.getrandbits(32):08x}",
                              "x" * rng.randint(100, 300)]))
  return "\t".join(fields).encode()


def test_criteo_block_encodes_to_the_row_encoders_bytes():
  rng = random.Random(0)
  lines = [_criteo_line(rng) for _ in range(500)]
  layout = rows.detect_layout(lines[0], features.CRITEO, "test")
  table = columnar.parse_block(b"\n".join(lines) + b"\n", layout)
  assert columnar.labels_are_binary(table, layout)
  assert columnar.encode_table(table, layout).to_pylist() == [
      rows.encode_row(line, layout) for line in lines]


def test_avazu_header_order_and_dropped_id():
  spec = features.AVAZU
  names = list(reversed(spec.columns))  # Any column order, id included.
  layout = rows.detect_layout(",".join(names).encode(), spec, "test")
  rng = random.Random(1)
  lines = []
  for _ in range(50):
    row = {c: (str(rng.randint(0, 5)) if spec.raw_dtype(c) == "int" else
               rng.choice(["", "abc", "d41d8cd9"]))
           for c in spec.raw_features}
    row[spec.label] = str(rng.randint(0, 1))
    row["id"] = str(rng.getrandbits(64))
    lines.append(",".join(row[c] for c in names).encode())
  table = columnar.parse_block(b"\n".join(lines), layout)
  assert columnar.encode_table(table, layout).to_pylist() == [
      rows.encode_row(line, layout) for line in lines]


@pytest.mark.parametrize("field,value", [("I3", "abc"), ("I3", "260.0"),
                                          ("I3", str(1 << 64))])
def test_fields_pyarrow_cannot_convert_raise(field, value):
  """The executor then parses the block row by row (rows.encode_row)."""
  spec = features.CRITEO
  line = _criteo_line(random.Random(2)).split(b"\t")
  line[spec.columns.index(field)] = value.encode()
  layout = rows.detect_layout(line[0], spec, "test")
  with pytest.raises(pa.ArrowInvalid):
    columnar.parse_block(b"\t".join(line), layout)


def test_bad_labels_are_detected():
  good = _criteo_line(random.Random(3))
  layout = rows.detect_layout(good, features.CRITEO, "test")
  for label in (b"2", b""):
    table = columnar.parse_block(good + b"\n" + label + good[1:], layout)
    assert not columnar.labels_are_binary(table, layout)
