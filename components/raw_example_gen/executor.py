"""Beam executor of RawCtrExampleGen: raw Criteo/Avazu text -> tf.Examples.

Each input file is cut into byte ranges aligned to line starts; the ranges are
reshuffled over the workers, so a single 11 GB file is read in parallel and
every row keeps its byte offset (for the sequential split and for naming the
line of a bad row). Bad rows are counted per file and dropped; when there are
more than `max_bad_fraction` of them the run fails after the fact, naming the
first bad line.
"""

import dataclasses
import json
import os
import re
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple

from absl import logging
import apache_beam as beam
from google.protobuf import struct_pb2
from tfx import types
from tfx.components.example_gen import utils
from tfx.components.example_gen import write_split
from tfx.components.util import examples_utils
from tfx.dsl.components.base import base_beam_executor
from tfx.dsl.io import fileio
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils
from tfx.types import standard_component_specs
from tfx.utils import proto_utils

from components.raw_example_gen import rows
from trainer_module import features

SPLIT_MODES = ("hash", "sequential")
# Written into the output Examples artifact's directory (beside Split-*).
SUMMARY_FILE_NAME = "raw_example_gen_summary.json"
# Work unit of the parallel read: big enough to amortise a task, small enough
# to spread one 11 GB file over many workers.
RANGE_BYTES = 64 << 20
_CHUNK_BYTES = 1 << 20
# A first line longer than this is not a CTR text file (binary or compressed).
_MAX_FIRST_LINE_BYTES = 1 << 20
_COMPRESSED_SUFFIXES = (".gz", ".bz2", ".xz", ".zst", ".zip", ".tar", ".7z")
_STATS_TAG = "stats"


@dataclasses.dataclass(frozen=True)
class IngestOptions:
  """The executor's custom_config: what to read and how strict to be."""
  dataset: str
  split: str = "hash"
  max_bad_fraction: float = 0.001

  def __post_init__(self):
    features.get_spec(self.dataset)
    if self.split not in SPLIT_MODES:
      raise ValueError(f"split must be one of {SPLIT_MODES}, got "
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


def _natural_key(path: str) -> List[Any]:
  """Sort key putting day_2 before day_10 (Criteo's days are time-ordered)."""
  return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path)]


def _read_first_line(path: str) -> bytes:
  """The first line of a file, with its terminator if it has one."""
  with fileio.open(path, "rb") as f:
    head = f.read(_MAX_FIRST_LINE_BYTES)
  end = head.find(b"\n")
  if end >= 0:
    return head[:end + 1]
  if len(head) == _MAX_FIRST_LINE_BYTES:
    raise ValueError(f"{path}: no line break in the first "
                     f"{_MAX_FIRST_LINE_BYTES} bytes; not a CTR text file")
  return head


def plan_input_files(pattern: str,
                     spec: features.DatasetSpec) -> List[InputFile]:
  """The non-empty files matching `pattern`, in natural order, with layouts.

  Raises:
    FileNotFoundError: no file matches.
    ValueError: a compressed file (byte ranges need seekable text).
    rows.HeaderError: a header that does not fit the spec.
  """
  paths = sorted((p for p in fileio.glob(pattern) if not fileio.isdir(p)),
                 key=_natural_key)
  if not paths:
    raise FileNotFoundError(f"no input files match {pattern}")
  planned = []
  data_base = 0
  for path in paths:
    if path.endswith(_COMPRESSED_SUFFIXES):
      raise ValueError(f"{path}: compressed input is not supported; "
                       "decompress it first (it is read in byte ranges)")
    size = fileio.stat(path).length
    if size == 0:
      logging.warning("Skipping empty input file %s", path)
      continue
    first_line = _read_first_line(path)
    layout = rows.detect_layout(first_line.rstrip(b"\r\n"), spec, path)
    data_start = len(first_line) if layout.has_header else 0
    planned.append(InputFile(path, size, data_start, data_base, layout))
    data_base += size - data_start
  return planned


def byte_ranges(files: List[InputFile],
                range_bytes: int) -> List[Tuple[int, int, int]]:
  """(file index, start, end) work units covering every file's data bytes."""
  return [(i, start, min(start + range_bytes, f.size))
          for i, f in enumerate(files)
          for start in range(f.data_start, f.size, range_bytes)]


def read_lines(path: str, start: int, end: int,
               chunk_bytes: int = _CHUNK_BYTES) -> Iterator[Tuple[int, bytes]]:
  """(byte offset, line) of every line of `path` that starts in [start, end).

  A line belongs to the range it starts in, so adjacent ranges read each line
  exactly once. Lines are yielded without '\\n' or '\\r\\n'.
  """
  with fileio.open(path, "rb") as f:
    # Unless the range starts the file, the text up to the first line break at
    # or after start - 1 belongs to the previous range.
    skip_partial = start > 0
    position = start - 1 if skip_partial else 0
    f.seek(position)
    pending = b""
    while True:
      chunk = f.read(chunk_bytes)
      if not chunk:
        break
      lines = (pending + chunk).split(b"\n")
      pending = lines.pop()
      for line in lines:
        if skip_partial:
          skip_partial = False
        elif position >= end:
          return
        else:
          yield position, line[:-1] if line.endswith(b"\r") else line
        position += len(line) + 1
    if pending and not skip_partial and position < end:
      yield position, pending[:-1] if pending.endswith(b"\r") else pending


def line_number_at(path: str, offset: int) -> int:
  """1-based line number of the line starting at byte `offset` of `path`."""
  newlines = 0
  with fileio.open(path, "rb") as f:
    remaining = offset
    while remaining > 0:
      chunk = f.read(min(_CHUNK_BYTES, remaining))
      if not chunk:
        break
      newlines += chunk.count(b"\n")
      remaining -= len(chunk)
  return newlines + 1


class _ParseRangeFn(beam.DoFn):
  """Parses one byte range into serialized tf.Examples tagged by split.

  Also emits one stats dict per range (rows, bad rows, the first bad row and
  its reason, rows per split) on the _STATS_TAG output.
  """

  def __init__(self, files: List[InputFile], boundaries: List[int],
               split_mode: str):
    self._files = files
    self._boundaries = boundaries
    self._sequential = split_mode == "sequential"
    self._total_bytes = sum(f.data_bytes for f in files)

  def process(self, byte_range: Tuple[int, int, int]) -> Iterable[Any]:
    file_index, start, end = byte_range
    source = self._files[file_index]
    # Byte position of a row in the whole input = offset + shift.
    shift = source.data_base - source.data_start
    split_rows = [0] * len(self._boundaries)
    num_rows = num_bad = 0
    first_bad = None
    for offset, line in read_lines(source.path, start, end):
      if not line:
        continue
      num_rows += 1
      try:
        example = rows.encode_row(line, source.layout)
      except rows.BadRowError as e:
        num_bad += 1
        if first_bad is None:
          first_bad = (offset, str(e))
        continue
      if self._sequential:
        split = rows.split_by_position(offset + shift, self._total_bytes,
                                       self._boundaries)
      else:
        split = rows.split_by_hash(line, self._boundaries)
      split_rows[split] += 1
      yield beam.pvalue.TaggedOutput(str(split), example)
    yield beam.pvalue.TaggedOutput(
        _STATS_TAG, {"file": file_index, "rows_read": num_rows,
                     "bad_rows": num_bad, "first_bad": first_bad,
                     "split_rows": split_rows})


def summarize(range_stats: List[Dict[str, Any]], files: List[InputFile],
              split_names: List[str], options: IngestOptions,
              pattern: str) -> Dict[str, Any]:
  """The run's JSON summary: totals, rows per split and per-file counts."""
  per_file = [{"path": f.path, "header": f.layout.has_header,
               "delimiter": f.layout.delimiter.decode(), "rows_read": 0,
               "bad_rows": 0, "first_bad_byte_offset": None,
               "first_bad_reason": None} for f in files]
  split_rows = [0] * len(split_names)
  for stats in range_stats:
    entry = per_file[stats["file"]]
    entry["rows_read"] += stats["rows_read"]
    entry["bad_rows"] += stats["bad_rows"]
    first_bad = stats["first_bad"]
    if first_bad and (entry["first_bad_byte_offset"] is None or
                      first_bad[0] < entry["first_bad_byte_offset"]):
      entry["first_bad_byte_offset"], entry["first_bad_reason"] = first_bad
    split_rows = [a + b for a, b in zip(split_rows, stats["split_rows"])]
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
    pattern = os.path.join(
        exec_properties[standard_component_specs.INPUT_BASE_KEY],
        input_config.splits[0].pattern)
    files = plan_input_files(pattern, spec)
    boundaries = split_boundaries(output_config)

    examples_channel = output_dict[standard_component_specs.EXAMPLES_KEY]
    examples = artifact_utils.get_single_instance(examples_channel)
    examples.split_names = artifact_utils.encode_split_names(split_names)
    summary_path = os.path.join(examples.uri, SUMMARY_FILE_NAME)
    logging.info("Reading %d %s file(s) matching %s, split %s.", len(files),
                 spec.name, pattern, options.split)
    with self._make_beam_pipeline() as pipeline:
      parsed = (
          pipeline
          | "CreateRanges" >> beam.Create(byte_ranges(files, RANGE_BYTES))
          | "SpreadRanges" >> beam.Reshuffle()
          | "ParseRanges" >> beam.ParDo(
              _ParseRangeFn(files, boundaries, options.split)).with_outputs(
                  _STATS_TAG, *(str(i) for i in range(len(split_names)))))
      for i, name in enumerate(split_names):
        _ = (parsed[str(i)]
             | f"WriteSplit[{name}]" >> write_split.WriteSplit(
                 artifact_utils.get_split_uri(examples_channel, name),
                 example_gen_pb2.FORMAT_TFRECORDS_GZIP))
      _ = (parsed[_STATS_TAG]
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
    logging.info("RawCtrExampleGen summary (%s):\n%s", summary_path,
                 json.dumps(summary, indent=1))
    check_summary(summary)
