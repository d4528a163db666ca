"""Beam executor of RawCtrExampleGen: raw Criteo/Avazu text -> tf.Examples.

Each input file is cut into byte ranges aligned to line starts; the ranges are
reshuffled over the workers, so a single 11 GB file is read in parallel and
every row keeps its byte offset (for the sequential split and for naming the
line of a bad row). A gzipped file is one range, decompressed as one stream
(offsets are in its decompressed text). Files that are not the dataset's
training data are refused, or skipped (input_files). A range is parsed in blocks by pyarrow's CSV reader and
encoded a column at a time (columnar.py), and writes its own output file per
split: no Python per row except the split hash, and no shuffle of the rows.
Bad rows are counted per file and dropped; when there are more than
`max_bad_fraction` of them the run fails after the fact, naming the first bad
line. The rows and clicks of each split are counted too, exactly (the
StrictExampleValidator refuses a split without both labels).
"""

import dataclasses
import json
import os
import re
import sys
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple

from absl import logging
import apache_beam as beam
import numpy as np
import pyarrow as pa
import tensorflow as tf
from google.protobuf import struct_pb2
from tfx import types
from tfx.components.example_gen import utils
from tfx.components.example_gen import write_split
from tfx.components.util import examples_utils
from tfx.dsl.components.base import base_beam_executor
from tfx.dsl.io import fileio
from tfx.proto import example_gen_pb2
from tfx.proto import range_config_pb2
from tfx.types import artifact_utils
from tfx.types import standard_component_specs
from tfx.utils import proto_utils

from components.raw_example_gen import columnar
from components.raw_example_gen import input_files
from components.raw_example_gen import rows
from components.raw_example_gen import spans
from trainer_module import features

# Written into the output Examples artifact's directory (beside Split-*).
SUMMARY_FILE_NAME = "raw_example_gen_summary.json"
# Work unit of the parallel read: big enough to amortise a task, small enough
# to spread one 11 GB file over many workers.
RANGE_BYTES = 64 << 20
# Lines parsed by pyarrow at once: bounds the memory of a range's columns.
BLOCK_BYTES = 16 << 20
_CHUNK_BYTES = 1 << 20
# Output record files of a range: Split-<name>/<prefix>-<file>-<start>.gz.
_RECORD_FILE_PREFIX = "data_tfrecord"
# gzip level 1 writes 2.4x faster than the default level 6 for 30% more
# bytes (docs/benchmark_data.md); readers decompress either equally fast.
_RECORD_OPTIONS = tf.io.TFRecordOptions(compression_type="GZIP",
                                        compression_level=1)
# The end of a gzipped file's one range: wherever its text ends.
_WHOLE_FILE = sys.maxsize


@dataclasses.dataclass(frozen=True)
class IngestOptions:
  """The executor's custom_config: what to read and how strict to be."""
  dataset: str
  split: str = "hash"
  max_bad_fraction: float = features.DEFAULT_MAX_BAD_FRACTION
  skip_foreign_files: bool = False

  def __post_init__(self):
    features.get_spec(self.dataset)
    if self.split not in features.SPLIT_MODES:
      raise ValueError(f"split must be one of {features.SPLIT_MODES}, got "
                       f"{self.split!r}")
    if not 0.0 <= self.max_bad_fraction < 1.0:
      raise ValueError(f"max_bad_fraction must be in [0, 1), got "
                       f"{self.max_bad_fraction}")

  def to_custom_config(self) -> example_gen_pb2.CustomConfig:
    struct = struct_pb2.Struct()
    struct.update(dataclasses.asdict(self))
    config = example_gen_pb2.CustomConfig()
    config.custom_config.Pack(struct)
    return config

  @classmethod
  def from_custom_config_json(cls, config_json: Optional[str]
                             ) -> "IngestOptions":
    config = example_gen_pb2.CustomConfig()
    if config_json:
      proto_utils.json_to_proto(config_json, config)
    struct = struct_pb2.Struct()
    if not config.custom_config.Unpack(struct):
      raise ValueError("custom_config must pack a google.protobuf.Struct made "
                       "by IngestOptions.to_custom_config()")
    return cls(**dict(struct))


@dataclasses.dataclass(frozen=True)
class InputFile:
  """One input file as planned before the Beam run.

  Attributes:
    path: the file.
    size: its size in bytes.
    data_start: byte offset of its first data line (after any header).
    data_base: data bytes of the files before it, to place its rows in the
      whole input for the sequential split.
    layout: how its lines map to features.
  """
  path: str
  size: int
  data_start: int
  data_base: int
  layout: rows.RowLayout

  @property
  def data_bytes(self) -> int:
    return self.size - self.data_start

  @property
  def compressed(self) -> bool:
    return input_files.is_gzip(self.path)


def _natural_key(path: str) -> List[Any]:
  """Sort key putting day_2 before day_10 (Criteo's days are time-ordered)."""
  return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path)]


def plan_input_files(pattern: str, spec: features.DatasetSpec,
                     skip_foreign_files: bool = False) -> List[InputFile]:
  """The non-empty data files matching `pattern`, in natural order, with
  layouts.

  Raises:
    FileNotFoundError: no file matches.
    input_files.ForeignFilesError: files that are not `spec`'s training
      data (test files, readmes, archives), unless `skip_foreign_files`.
    rows.HeaderError: a header that does not fit the spec.
  """
  paths = sorted((p for p in fileio.glob(pattern) if not fileio.isdir(p)),
                 key=_natural_key)
  if not paths:
    raise FileNotFoundError(f"no input files match {pattern}")
  sorted_input = input_files.check_files(paths, spec, skip_foreign_files)
  for line in sorted_input.describe_foreign():
    logging.warning("skipping, not training data: %s", line)
  planned = []
  data_base = 0
  for path in sorted_input.data:
    size = fileio.stat(path).length
    if size == 0:
      logging.warning("Skipping empty input file %s", path)
      continue
    first_line = input_files.read_first_line(path)
    layout = rows.detect_layout(first_line.rstrip(b"\r\n"), spec, path)
    data_start = len(first_line) if layout.has_header else 0
    planned.append(InputFile(path, size, data_start, data_base, layout))
    data_base += size - data_start
  return planned


def byte_ranges(files: List[InputFile],
                range_bytes: int) -> List[Tuple[int, int, int]]:
  """(file index, start, end) work units covering every file's data bytes;
  a gzipped file is one unit, its whole text."""
  return [(i, start, _WHOLE_FILE if f.compressed else
           min(start + range_bytes, f.size))
          for i, f in enumerate(files)
          for start in ((f.data_start,) if f.compressed else
                        range(f.data_start, f.size, range_bytes))]


def read_blocks(path: str, start: int, end: int,
                block_bytes: int = BLOCK_BYTES) -> Iterator[Tuple[int, bytes]]:
  """(byte offset, text) of blocks of the whole lines that start in [start, end).

  A line belongs to the range it starts in, so adjacent ranges read each line
  exactly once. Every block but the file's last ends with a '\\n'; a block
  holds at least one line and about block_bytes of text. Offsets of a
  gzipped file are in its decompressed text.
  """
  with input_files.open_input(path) as f:
    position, pending = 0, b""
    if start > 0:
      # The text up to the first line break at or after start - 1 belongs to
      # the previous range.
      f.seek(start - 1)
      position = start - 1
      while True:
        chunk = f.read(block_bytes)
        if not chunk:
          return
        newline = chunk.find(b"\n")
        if newline >= 0:
          position += newline + 1
          pending = chunk[newline + 1:]
          break
        position += len(chunk)
    while position < end:
      chunk = f.read(block_bytes)
      buffer = pending + chunk
      # Whole lines only, but the file's last line may lack its '\\n'.
      cut = buffer.rfind(b"\n") + 1 if chunk else len(buffer)
      if not cut:
        if not chunk:
          return
        pending = buffer
        continue
      pending = buffer[cut:]
      if position + cut > end:
        # Keep the lines up to the first line break at or after end - 1.
        stop = buffer.find(b"\n", end - 1 - position, cut) + 1
        yield position, buffer[:stop or cut]
        return
      yield position, buffer[:cut]
      position += cut


def read_lines(path: str, start: int, end: int,
               chunk_bytes: int = _CHUNK_BYTES) -> Iterator[Tuple[int, bytes]]:
  """(byte offset, line) of every line of `path` that starts in [start, end).

  Lines are yielded without '\\n' or '\\r\\n'.
  """
  for position, block in read_blocks(path, start, end, chunk_bytes):
    lines = block.split(b"\n")
    if block.endswith(b"\n"):
      lines.pop()
    for line in lines:
      yield position, line[:-1] if line.endswith(b"\r") else line
      position += len(line) + 1


def line_number_at(path: str, offset: int) -> int:
  """1-based line number of the line starting at byte `offset` of `path`."""
  newlines = 0
  with input_files.open_input(path) as f:
    remaining = offset
    while remaining > 0:
      chunk = f.read(min(_CHUNK_BYTES, remaining))
      if not chunk:
        break
      newlines += chunk.count(b"\n")
      remaining -= len(chunk)
  return newlines + 1


@dataclasses.dataclass
class _RangeStats:
  """Counts of one byte range (see summarize)."""
  file: int
  split_rows: List[int]
  split_clicks: List[int]
  rows_read: int = 0
  bad_rows: int = 0
  first_bad: Optional[Tuple[int, str]] = None

  def add_bad(self, offset: int, reason: str) -> None:
    self.bad_rows += 1
    if self.first_bad is None or offset < self.first_bad[0]:
      self.first_bad = (offset, reason)


class _ParseRangeFn(beam.DoFn):
  """Parses one byte range and writes its rows' tf.Examples, by split.

  Each range writes its own gzipped TFRecord file per split, so rows stream
  from the input to the output without a shuffle; its file names are a
  function of the range, so a retried range overwrites its own output.
  Emits one stats dict per range (rows, bad rows, the first bad row and its
  reason, rows and clicks per split).

  Per block of lines: lines with a wrong number of fields are bad rows; the
  others are parsed by pyarrow and encoded a column at a time
  (columnar.py). A block pyarrow rejects (a field it cannot convert, a bad
  label) is parsed row by row with rows.encode_row instead, which names
  each bad row's problem and accepts what it accepts (e.g. '260.0').
  """

  def __init__(self, files: List[InputFile], boundaries: List[int],
               split_mode: str, split_dirs: List[str]):
    self._files = files
    self._boundaries = np.asarray(boundaries, np.int64)
    self._sequential = split_mode == "sequential"
    self._total_bytes = sum(f.data_bytes for f in files)
    self._split_dirs = split_dirs

  def process(self, byte_range: Tuple[int, int, int]) -> Iterable[Any]:
    file_index, start, end = byte_range
    source = self._files[file_index]
    splits = len(self._split_dirs)
    stats = _RangeStats(file_index, [0] * splits, [0] * splits)
    name = f"{_RECORD_FILE_PREFIX}-{file_index:05d}-{start:015d}.gz"
    writers = [tf.io.TFRecordWriter(
        os.path.join(d, name), _RECORD_OPTIONS)
               for d in self._split_dirs]
    try:
      for position, block in read_blocks(source.path, start, end):
        for split, records in enumerate(
            self._parse_block(source, position, block, stats)):
          stats.split_rows[split] += len(records)
          write = writers[split].write
          for record in records:
            write(record)
    finally:
      for writer in writers:
        writer.close()
    yield dataclasses.asdict(stats)

  def _splits(self, lines: List[bytes], offsets: np.ndarray,
              source: InputFile) -> np.ndarray:
    """Split index of each line (rows.split_by_hash / split_by_position)."""
    if self._sequential:
      positions = offsets + (source.data_base - source.data_start)
      buckets = positions * self._boundaries[-1] // self._total_bytes
    else:
      digests = b"".join(rows.line_digest(line) for line in lines)
      buckets = np.frombuffer(digests, "<u8") % np.uint64(
          self._boundaries[-1])
    return np.searchsorted(self._boundaries, buckets, side="right")

  def _parse_block(self, source: InputFile, position: int, block: bytes,
                   stats: _RangeStats) -> List[List[bytes]]:
    """Serialized tf.Examples of a block's good rows, per split."""
    layout = source.layout
    lines = block.split(b"\n")
    if block.endswith(b"\n"):
      lines.pop()
    lengths = np.fromiter((len(line) + 1 for line in lines), np.int64,
                          len(lines))
    offsets = position + np.cumsum(lengths) - lengths
    if b"\r" in block:
      lines = [line[:-1] if line.endswith(b"\r") else line for line in lines]
    keep = np.fromiter((line.count(layout.delimiter) + 1 == layout.num_fields
                        for line in lines), bool, len(lines))
    nonempty = np.fromiter(map(bool, lines), bool, len(lines))
    stats.rows_read += int(np.count_nonzero(nonempty))
    for i in np.flatnonzero(nonempty & ~keep).tolist():
      try:
        rows.encode_row(lines[i], layout)
      except rows.BadRowError as e:
        stats.add_bad(int(offsets[i]), str(e))
    good = [line for line, k in zip(lines, keep) if k]
    offsets = offsets[keep]
    split = self._splits(good, offsets, source)
    records = None
    if good:
      try:
        table = columnar.parse_block(b"\n".join(good), layout)
      except pa.ArrowInvalid:
        table = None
      if table is not None and columnar.labels_are_binary(table, layout):
        records = columnar.encode_table(table, layout)
        labels = table.column(layout.label[1]).to_numpy()
    if records is None:
      parsed, ok = [], np.ones(len(good), bool)
      for i, line in enumerate(good):
        try:
          parsed.append(rows.encode_row(line, layout))
        except rows.BadRowError as e:
          ok[i] = False
          stats.add_bad(int(offsets[i]), str(e))
      split = split[ok]
      records = pa.array(parsed, pa.binary())
      labels = np.fromiter((rows.row_label(line, layout)
                            for line, k in zip(good, ok) if k), np.int64,
                           len(parsed))
    clicks = np.bincount(split[labels == 1], minlength=len(self._split_dirs))
    stats.split_clicks = [a + int(b) for a, b in zip(stats.split_clicks,
                                                      clicks)]
    return [records.filter(pa.array(split == i)).to_pylist()
            for i in range(len(self._split_dirs))]


def summarize(range_stats: List[Dict[str, Any]], files: List[InputFile],
              split_names: List[str], options: IngestOptions,
              pattern: str) -> Dict[str, Any]:
  """The run's JSON summary: totals, rows and clicks per split and per-file
  counts."""
  per_file = [{"path": f.path, "header": f.layout.has_header,
               "delimiter": f.layout.delimiter.decode(), "rows_read": 0,
               "bad_rows": 0, "first_bad_byte_offset": None,
               "first_bad_reason": None} for f in files]
  split_rows = [0] * len(split_names)
  split_clicks = [0] * len(split_names)
  for stats in range_stats:
    entry = per_file[stats["file"]]
    entry["rows_read"] += stats["rows_read"]
    entry["bad_rows"] += stats["bad_rows"]
    first_bad = stats["first_bad"]
    if first_bad and (entry["first_bad_byte_offset"] is None or
                      first_bad[0] < entry["first_bad_byte_offset"]):
      entry["first_bad_byte_offset"], entry["first_bad_reason"] = first_bad
    split_rows = [a + b for a, b in zip(split_rows, stats["split_rows"])]
    split_clicks = [a + b for a, b in zip(split_clicks,
                                          stats["split_clicks"])]
  rows_read = sum(f["rows_read"] for f in per_file)
  bad_rows = sum(f["bad_rows"] for f in per_file)
  return {
      "input": pattern,
      "dataset": options.dataset,
      "split_mode": options.split,
      "max_bad_fraction": options.max_bad_fraction,
      "rows_read": rows_read,
      "bad_rows": bad_rows,
      "bad_fraction": bad_rows / rows_read if rows_read else 0.0,
      "split_rows": dict(zip(split_names, split_rows)),
      "split_clicks": dict(zip(split_names, split_clicks)),
      "files": per_file,
  }


def check_summary(summary: Dict[str, Any]) -> None:
  """Fails the run on an input without rows or with too many bad rows.

  Raises:
    ValueError: naming the input, or the first bad line and what was wrong.
  """
  if summary["rows_read"] == 0:
    raise ValueError(f"no data rows in the files matching {summary['input']}")
  if summary["bad_fraction"] <= summary["max_bad_fraction"]:
    return
  bad_files = [f for f in summary["files"] if f["bad_rows"]]
  first = bad_files[0]
  line = line_number_at(first["path"], first["first_bad_byte_offset"])
  counts = ", ".join(f"{f['path']}: {f['bad_rows']}" for f in bad_files[:5])
  raise ValueError(
      f"{first['path']} line {line}: {first['first_bad_reason']} "
      f"(first bad row; {summary['bad_rows']} of {summary['rows_read']} rows "
      f"are bad = {summary['bad_fraction']:.4%}, more than max_bad_fraction="
      f"{summary['max_bad_fraction']}; bad rows per file: {counts})")


def split_boundaries(output_config: example_gen_pb2.Output) -> List[int]:
  """Cumulative hash_buckets of the output splits, as TFX partitions them."""
  boundaries = []
  total = 0
  for split in output_config.split_config.splits:
    total += split.hash_buckets
    boundaries.append(total)
  return boundaries


def _range_config(config_json: Optional[str]
                 ) -> Optional[range_config_pb2.RangeConfig]:
  """The component's range_config exec property, parsed (None if unset)."""
  if not config_json:
    return None
  config = range_config_pb2.RangeConfig()
  proto_utils.json_to_proto(config_json, config)
  return config


class Executor(base_beam_executor.BaseBeamExecutor):
  """Raw CTR files -> gzipped TFRecords of tf.Examples, one per split.

  Rows go to output_config's splits in proportion to their hash_buckets, by a
  hash of the line or by the line's position in the input.
  """

  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]],
         exec_properties: Dict[str, Any]) -> None:
    """Writes one TFRecord split per output split and a JSON summary.

    Args:
      input_dict: unused (the input is files under input_base).
      output_dict: 'examples': the single output Examples artifact.
      exec_properties: FileBasedExampleGen's: input_base, input_config (one
        split whose pattern, relative to input_base, selects the files),
        output_config (split names and hash_buckets) and custom_config (from
        IngestOptions.to_custom_config()).
    """
    self._log_startup(input_dict, output_dict, exec_properties)
    input_config = example_gen_pb2.Input()
    proto_utils.json_to_proto(
        exec_properties[standard_component_specs.INPUT_CONFIG_KEY],
        input_config)
    output_config = example_gen_pb2.Output()
    proto_utils.json_to_proto(
        exec_properties[standard_component_specs.OUTPUT_CONFIG_KEY],
        output_config)
    if not output_config.split_config.splits:
      raise ValueError("RawCtrExampleGen needs output splits with "
                       "hash_buckets in output_config")
    split_names = utils.generate_output_split_names(input_config,
                                                    output_config)
    options = IngestOptions.from_custom_config_json(
        exec_properties.get(standard_component_specs.CUSTOM_CONFIG_KEY))
    spec = features.get_spec(options.dataset)
    input_base = exec_properties[standard_component_specs.INPUT_BASE_KEY]
    relative = input_config.splits[0].pattern
    examples_channel = output_dict[standard_component_specs.EXAMPLES_KEY]
    examples = artifact_utils.get_single_instance(examples_channel)
    if spans.has_span(relative):
      # No driver resolved the span (open-source Kubeflow does not run it):
      # resolve it as TFX's driver does, and record it as the driver would.
      resolved = spans.resolve(input_base, relative, _range_config(
          exec_properties.get(standard_component_specs.RANGE_CONFIG_KEY)))
      relative = resolved.pattern
      examples.span = resolved.span
      examples.set_int_custom_property(utils.SPAN_PROPERTY_NAME,
                                       resolved.span)
    pattern = os.path.join(input_base, relative)
    files = plan_input_files(pattern, spec, options.skip_foreign_files)
    compressed = [f.path for f in files if f.compressed]
    if options.split == "sequential" and compressed:
      raise ValueError(
          f"{compressed[0]}: the sequential split places rows by their "
          "position in the uncompressed input, which a gzipped file does "
          "not tell without reading it twice: decompress it (gunzip -k) or "
          "use the hash split")
    boundaries = split_boundaries(output_config)
    examples.split_names = artifact_utils.encode_split_names(split_names)
    summary_path = os.path.join(examples.uri, SUMMARY_FILE_NAME)
    logging.info("Reading %d %s file(s) matching %s, split %s.", len(files),
                 spec.name, pattern, options.split)
    split_dirs = [artifact_utils.get_split_uri(examples_channel, name)
                  for name in split_names]
    for split_dir in split_dirs:
      fileio.makedirs(split_dir)
    with self._make_beam_pipeline() as pipeline:
      _ = (pipeline
           | "CreateRanges" >> beam.Create(byte_ranges(files, RANGE_BYTES))
           | "SpreadRanges" >> beam.Reshuffle()
           | "ParseAndWriteRanges" >> beam.ParDo(
               _ParseRangeFn(files, boundaries, options.split, split_dirs))
           | "CollectStats" >> beam.combiners.ToList()
           | "Summarize" >> beam.Map(
               lambda stats: json.dumps(
                   summarize(stats, files, split_names, options, pattern),
                   indent=1))
           | "WriteSummary" >> beam.io.WriteToText(
               summary_path, shard_name_template="", num_shards=1))

    with fileio.open(summary_path, "r") as f:
      summary = json.loads(f.read())
    examples_utils.set_payload_format(examples,
                                      example_gen_pb2.FORMAT_TF_EXAMPLE)
    examples_utils.set_file_format(
        examples,
        write_split.to_file_format_str(example_gen_pb2.FORMAT_TFRECORDS_GZIP))
    examples.set_int_custom_property("rows_read", summary["rows_read"])
    examples.set_int_custom_property("bad_rows", summary["bad_rows"])
    for name, count in summary["split_rows"].items():
      examples.set_int_custom_property(f"{name}_rows", count)
      examples.set_int_custom_property(f"{name}_clicks",
                                       summary["split_clicks"][name])
    logging.info("RawCtrExampleGen summary (%s):\n%s", summary_path,
                 json.dumps(summary, indent=1))
    check_summary(summary)
