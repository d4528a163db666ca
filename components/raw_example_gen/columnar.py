"""Blocks of raw lines -> serialized tf.Examples, column at a time.

pyarrow's multi-threaded CSV reader parses a block of lines into typed
columns, and the tf.Examples are assembled from whole columns with Arrow
compute kernels, so no Python code runs per row or per field.

Why not tfx_bsl's RecordBatchToExamplesEncoder: it writes a null cell as a
feature with an empty value, while this component's contract (and
rows.encode_row's) leaves a missing feature out. Instead, each non-null cell
becomes its Features map entry (example_encoding's wire format, whose prefix
depends only on the value's length), a row's entries are concatenated and
the Example's length prefix is added, all with Arrow kernels. The bytes are
the ones rows.encode_row writes for the same line (tested).
"""

from typing import Tuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyarrow import csv

from components.raw_example_gen import example_encoding
from components.raw_example_gen import rows

_MAX_VARINT_BYTES = 10
_FEATURES_TAG = b"\x0a"


def _varint_lengths(values: np.ndarray) -> np.ndarray:
  """Bytes of the base-128 varint of each uint64 value (1..10)."""
  lengths = np.ones(values.shape, np.int32)
  rest = values >> np.uint64(7)
  while rest.any():
    lengths += rest > 0
    rest >>= np.uint64(7)
  return lengths


def _varints(values: np.ndarray) -> pa.BinaryArray:
  """Binary array of the base-128 varints of uint64 values."""
  groups = np.empty((len(values), _MAX_VARINT_BYTES), np.uint8)
  rest = values.copy()
  for i in range(_MAX_VARINT_BYTES):
    groups[:, i] = (rest & np.uint64(0x7F)).astype(np.uint8)
    rest >>= np.uint64(7)
    groups[:, i] |= (rest > 0).astype(np.uint8) << 7
  lengths = _varint_lengths(values)
  data = groups[np.arange(_MAX_VARINT_BYTES) < lengths[:, None]]
  offsets = np.zeros(len(values) + 1, np.int32)
  np.cumsum(lengths, out=offsets[1:])
  return pa.Array.from_buffers(pa.binary(), len(values),
                               [None, pa.py_buffer(offsets),
                                pa.py_buffer(data)])


def _pieces(values: pa.Array, value_bytes: pa.Array, lengths: np.ndarray,
            piece_of_length) -> Tuple[pa.Array, pa.Array]:
  """(prefix, value bytes) per cell: together its Features map entry.

  Everything before a value's bytes depends only on their length n, so the
  prefix is cut from piece_of_length(n) (an entry whose value is n bytes).
  A null cell has a null prefix.
  """
  distinct = np.unique(lengths)
  pieces = [piece_of_length(n) for n in distinct.tolist()]
  table = pa.array([p[:len(p) - n] for p, n in zip(pieces, distinct.tolist())],
                   pa.binary())
  prefixes = table.take(pa.array(np.searchsorted(distinct, lengths),
                                 mask=values.is_null().to_numpy(
                                     zero_copy_only=False)))
  return prefixes, value_bytes


def int64_pieces(name: str, column: pa.Array) -> Tuple[pa.Array, pa.Array]:
  """One-feature Examples (int64_list [value]) of an int64 column."""
  key = example_encoding.feature_key(name)
  values = column.fill_null(0).to_numpy(zero_copy_only=False).astype(
      np.int64).view(np.uint64)
  varints = _varints(values)
  if column.null_count:
    varints = pc.if_else(column.is_valid(), varints,
                         pa.scalar(None, pa.binary()))
  return _pieces(
      column, varints, _varint_lengths(values),
      # The smallest value whose varint has n bytes.
      lambda n: example_encoding.int64_feature(key, 1 << (7 * (n - 1))))


def bytes_pieces(name: str, column: pa.Array) -> Tuple[pa.Array, pa.Array]:
  """One-feature Examples (bytes_list [value]) of a binary column."""
  key = example_encoding.feature_key(name)
  lengths = pc.binary_length(column).fill_null(0).to_numpy(
      zero_copy_only=False)
  return _pieces(
      column, column, lengths,
      lambda n: example_encoding.bytes_feature(key, b"x" * n))


def parse_block(data: bytes, layout: rows.RowLayout) -> pa.Table:
  """The raw features of a block of data lines with well-formed field counts.

  Empty fields are nulls.

  Raises:
    pa.ArrowInvalid: a field that pyarrow cannot convert to its type.
  """
  names = [""] * layout.num_fields
  types = {}
  for index, name, _ in (layout.label,) + layout.int_columns:
    names[index] = name
    types[name] = pa.int64()
  for index, name, _ in layout.str_columns:
    names[index] = name
    types[name] = pa.binary()
  # Columns the spec drops (Avazu's id) keep a unique placeholder name.
  names = [name or f"__dropped_{i}" for i, name in enumerate(names)]
  return csv.read_csv(
      pa.py_buffer(data),
      read_options=csv.ReadOptions(column_names=names, use_threads=True),
      parse_options=csv.ParseOptions(
          delimiter=layout.delimiter.decode(), quote_char=False,
          double_quote=False, escape_char=False, newlines_in_values=False,
          ignore_empty_lines=False),
      convert_options=csv.ConvertOptions(
          column_types=types, include_columns=list(types),
          null_values=[""], strings_can_be_null=True))


def encode_table(table: pa.Table, layout: rows.RowLayout) -> pa.Array:
  """Serialized tf.Examples of parse_block's table (null fields left out)."""
  pieces = [int64_pieces(name, table.column(name).combine_chunks())
            for _, name, _ in (layout.label,) + layout.int_columns]
  pieces += [bytes_pieces(name, table.column(name).combine_chunks())
             for _, name, _ in layout.str_columns]
  # A null cell's prefix and value (or prefix alone) become b"".
  entries = pc.binary_join_element_wise(
      *(part for piece in pieces for part in piece), b"",
      null_handling="replace", null_replacement=b"")
  # Example.features (field 1) = the length-delimited map entries.
  lengths = pc.binary_length(entries).to_numpy(zero_copy_only=False)
  return pc.binary_join_element_wise(
      pa.scalar(_FEATURES_TAG, pa.binary()),
      _varints(lengths.astype(np.uint64)), entries, b"")


def labels_are_binary(table: pa.Table, layout: rows.RowLayout) -> bool:
  """Whether every row's label is present and 0 or 1."""
  label = table.column(layout.label[1])
  return label.null_count == 0 and pc.all(
      pc.is_in(label, pa.array([0, 1], pa.int64()))).as_py()
