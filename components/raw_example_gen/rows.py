"""Raw CTR lines -> tf.Examples: layout detection, row parsing, split choice.

Pure functions on bytes, so they are unit-testable without Beam and cheap per
row (the full Criteo file has 45M rows).
"""

import bisect
import dataclasses
import hashlib
from typing import Sequence, Tuple

from components.raw_example_gen import example_encoding
from trainer_module import features

# (field index in the line, feature name, encoded feature key).
Column = Tuple[int, str, bytes]

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
# Values quoted in error messages are cut to this many characters.
_MAX_QUOTED_CHARS = 40


class BadRowError(ValueError):
  """A data row that cannot become a tf.Example (counted, then dropped)."""


class HeaderError(ValueError):
  """A header line whose column names do not fit the dataset spec."""


@dataclasses.dataclass(frozen=True)
class RowLayout:
  """How the fields of one file's lines map to the spec's raw features.

  Attributes:
    delimiter: the field separator.
    has_header: whether the file's first line is a header.
    num_fields: fields per line.
    label: the label's column.
    int_columns: the other int64 features' columns.
    str_columns: the bytes features' columns.
  """
  delimiter: bytes
  has_header: bool
  num_fields: int
  label: Column
  int_columns: Tuple[Column, ...]
  str_columns: Tuple[Column, ...]


def _quote(value: bytes) -> str:
  text = value.decode("utf-8", "backslashreplace")
  if len(text) > _MAX_QUOTED_CHARS:
    text = text[:_MAX_QUOTED_CHARS] + "..."
  return repr(text)


def _layout_for_columns(column_names: Sequence[str], delimiter: bytes,
                        has_header: bool,
                        spec: features.DatasetSpec) -> RowLayout:
  index = {name: i for i, name in enumerate(column_names)}

  def column(name: str) -> Column:
    return index[name], name, example_encoding.feature_key(name)

  return RowLayout(
      delimiter=delimiter,
      has_header=has_header,
      num_fields=len(column_names),
      label=column(spec.label),
      int_columns=tuple(column(name) for name in spec.int_features
                        if name != spec.label),
      str_columns=tuple(column(name) for name in spec.str_categorical))


def detect_layout(first_line: bytes, spec: features.DatasetSpec,
                  source: str) -> RowLayout:
  """The layout of a file from its first line (without line terminator).

  The delimiter is a tab if the line has one, else a comma. The line is a
  header if any of its fields is a column name of the spec (no Criteo/Avazu
  value is); a header may list the columns in any order and may omit dropped
  columns. Otherwise the file is header-less with the spec's column order.

  Args:
    first_line: the file's first line.
    spec: the dataset the file belongs to.
    source: the file's path, for error messages.

  Returns:
    The file's RowLayout.

  Raises:
    HeaderError: the header lacks a raw feature, has an unknown or a repeated
      column.
  """
  delimiter = b"\t" if b"\t" in first_line else b","
  names = [f.strip().decode("utf-8", "backslashreplace")
           for f in first_line.split(delimiter)]
  if not set(names) & set(spec.columns):
    return _layout_for_columns(spec.columns, delimiter, False, spec)
  missing = [c for c in spec.raw_features if c not in names]
  unknown = [c for c in names if c not in spec.columns]
  repeated = sorted({c for c in names if names.count(c) > 1})
  if missing or unknown or repeated:
    problems = [f"{what} columns {cols}" for what, cols in
                (("missing", missing), ("unknown", unknown),
                 ("repeated", repeated)) if cols]
    raise HeaderError(f"{source}: header does not match dataset "
                      f"{spec.name!r}: {'; '.join(problems)}")
  return _layout_for_columns(names, delimiter, True, spec)


def parse_int(value: bytes, name: str) -> int:
  """An int64 from an integer field; integral floats ('260.0') are accepted.

  Some re-encodings of Criteo write counts as floats, which are still exact
  integers; anything else is a bad row.
  """
  try:
    number = int(value)
  except ValueError:
    try:
      as_float = float(value)
    except ValueError:
      as_float = None
    if as_float is None or not as_float.is_integer():
      raise BadRowError(
          f"field {name} = {_quote(value)} is not an integer") from None
    number = int(as_float)
  if not _INT64_MIN <= number <= _INT64_MAX:
    raise BadRowError(f"field {name} = {_quote(value)} is out of int64 range")
  return number


def _label(fields: Sequence[bytes], layout: RowLayout) -> int:
  """The label of a row's fields: 0 or 1.

  Raises:
    BadRowError: an empty label, or one that is not 0 or 1.
  """
  label_index, label_name, _ = layout.label
  label_value = fields[label_index]
  if not label_value:
    raise BadRowError(f"label {label_name} is empty")
  label = parse_int(label_value, label_name)
  if label not in (0, 1):
    raise BadRowError(
        f"label {label_name} = {_quote(label_value)} is not 0 or 1")
  return label


def row_label(line: bytes, layout: RowLayout) -> int:
  """The label (0 or 1) of a line encode_row accepts: the ExampleGen
  counts each split's clicks."""
  return _label(line.split(layout.delimiter), layout)


def encode_row(line: bytes, layout: RowLayout) -> bytes:
  """The serialized tf.Example of one data line (without line terminator).

  Every raw feature with a non-empty field is set: ints as int64_list, the rest
  as bytes_list. An empty field leaves its feature out, so Transform sees it as
  missing rather than as 0 or ''.

  Raises:
    BadRowError: wrong number of fields, a non-integer int field, or a label
      that is empty or not 0/1.
  """
  fields = line.split(layout.delimiter)
  if len(fields) != layout.num_fields:
    raise BadRowError(
        f"expected {layout.num_fields} fields, got {len(fields)}")
  entries = [example_encoding.int64_feature(layout.label[2],
                                            _label(fields, layout))]
  for index, name, key in layout.int_columns:
    value = fields[index]
    if value:
      entries.append(
          example_encoding.int64_feature(key, parse_int(value, name)))
  for index, _, key in layout.str_columns:
    value = fields[index]
    if value:
      entries.append(example_encoding.bytes_feature(key, value))
  return example_encoding.example(entries)


def line_digest(line: bytes) -> bytes:
  """The 8-byte fingerprint of a line that split_by_hash reads (little endian)."""
  return hashlib.blake2b(line, digest_size=8).digest()


def split_by_hash(line: bytes, boundaries: Sequence[int]) -> int:
  """Index of the split of a line, from a stable fingerprint of its bytes.

  Args:
    line: the raw line (without terminator), so a row lands in the same split
      on every run and runner, and duplicate rows share a split.
    boundaries: cumulative split sizes in buckets, e.g. [9000, 10000] for a
      90/10 train/eval split (as TFX's own partitioning uses hash_buckets).
  """
  return bisect.bisect(boundaries, int.from_bytes(line_digest(line), "little") %
                       boundaries[-1])


def split_by_position(position: int, total: int,
                      boundaries: Sequence[int]) -> int:
  """Index of the split of a row at byte `position` of `total` input bytes.

  The first splits get the head of the data, the last split the tail, so for
  time-ordered data (Criteo) eval is the most recent rows. Integer arithmetic
  keeps the last row in the last split.
  """
  return bisect.bisect(boundaries, position * boundaries[-1] // total)
