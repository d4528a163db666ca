"""Which input files are a dataset's training data, read plain or gzipped.

Downloads hold more than the training file: Criteo's dac.tar.gz extracts to
train.txt, test.txt (unlabelled: Criteo's layout without the label column)
and readme.txt; Avazu ships train.gz. Each file is judged by its first
lines, before anything is read in full, so a wrong file is named in one
line instead of failing the run later as a pile of bad rows.
"""

import contextlib
import dataclasses
import gzip
import os
from typing import BinaryIO, Dict, Iterator, List, Optional, Sequence, Tuple

from tfx.dsl.io import fileio

from components.raw_example_gen import rows
from trainer_module import features

# Read as one gzip stream per file (gzip cannot be cut into byte ranges).
GZIP_SUFFIX = ".gz"
_TAR_SUFFIXES = (".tar.gz", ".tgz", ".tar")
_OTHER_COMPRESSED_SUFFIXES = (".bz2", ".xz", ".zst", ".zip", ".7z")
# A first line longer than this is not a CTR text file (binary data).
MAX_FIRST_LINE_BYTES = 1 << 20
# Lines looked at to judge a file: one bad first row does not make a data
# file foreign.
_HEAD_LINES = 5


class ForeignFilesError(ValueError):
  """Input files that are not the dataset's training data (one line each)."""


def is_gzip(path: str) -> bool:
  return path.endswith(GZIP_SUFFIX) and not path.endswith(_TAR_SUFFIXES)


@contextlib.contextmanager
def open_input(path: str) -> Iterator[BinaryIO]:
  """The file's text bytes: decompressed on the fly when it is gzipped."""
  with fileio.open(path, "rb") as raw:
    if is_gzip(path):
      with gzip.GzipFile(fileobj=raw, mode="rb") as text:
        yield text
    else:
      yield raw


def _read_head(path: str) -> bytes:
  with open_input(path) as f:
    return f.read(MAX_FIRST_LINE_BYTES)


def _first_line(head: bytes, path: str) -> bytes:
  end = head.find(b"\n")
  if end >= 0:
    return head[:end + 1]
  if len(head) == MAX_FIRST_LINE_BYTES:
    raise ValueError(f"{path}: no line break in the first "
                     f"{MAX_FIRST_LINE_BYTES} bytes; not a CTR text file")
  return head


def read_first_line(path: str) -> bytes:
  """The first line of a file, with its terminator if it has one.

  Raises:
    ValueError: no line break in the first MAX_FIRST_LINE_BYTES.
  """
  return _first_line(_read_head(path), path)


def _unlabelled(line: bytes, layout: rows.RowLayout) -> bool:
  """Whether a line is a row of the layout with its label column left out."""
  fields = line.split(layout.delimiter)
  if len(fields) != layout.num_fields - 1:
    return False
  fields.insert(layout.label[0], b"0")
  try:
    rows.encode_row(layout.delimiter.join(fields), layout)
  except rows.BadRowError:
    return False
  return True


def _header_lacks_only_the_label(header: bytes,
                                 spec: features.DatasetSpec) -> bool:
  delimiter = b"\t" if b"\t" in header else b","
  try:
    rows.detect_layout(header + delimiter + spec.label.encode(), spec, "")
  except rows.HeaderError:
    return False
  return True


# What foreign_reason says of an unlabelled file (sort_out names the file
# to point --data at instead).
UNLABELLED = "unlabelled"


def foreign_reason(path: str, spec: features.DatasetSpec) -> Optional[str]:
  """Why the file is not `spec`'s training data, or None if it is.

  UNLABELLED for the dataset's layout without the label column (Criteo's
  and Avazu's test files). HeaderError (a header that names the dataset's
  columns but not all of them) is raised: that is a broken data file.
  """
  name = os.path.basename(path)
  if path.endswith(_TAR_SUFFIXES):
    flags = "-xzf" if path.endswith((".tar.gz", ".tgz")) else "-xf"
    return (f"a tar archive: extract it first (tar {flags} {name}) and "
            "point --data at the training file it holds")
  if path.endswith(_OTHER_COMPRESSED_SUFFIXES):
    return ("compressed in a format that is not read (only .gz is): "
            "decompress it first")
  try:
    head = _read_head(path)
    first_line = _first_line(head, path).rstrip(b"\r\n")
  except (OSError, EOFError, ValueError) as error:
    return f"not a text file{' in gzip' if is_gzip(path) else ''}: {error}"
  lines = [line.rstrip(b"\r") for line in head.split(b"\n")[:_HEAD_LINES]]
  lines = [line for line in lines if line]
  if not lines:
    return None  # Empty: nothing to read, and nothing wrong.
  try:
    layout = rows.detect_layout(first_line, spec, path)
  except rows.HeaderError:
    if _header_lacks_only_the_label(first_line, spec):
      return UNLABELLED
    raise
  data = lines[1:] if layout.has_header else lines
  if not data and layout.has_header:
    return None
  problems = []
  for line in data:
    try:
      rows.encode_row(line, layout)
      return None
    except rows.BadRowError as error:
      problems.append(str(error))
  if _unlabelled(data[0], layout):
    return UNLABELLED
  return (f"not {spec.name} data: none of its first lines is a row (line "
          f"{2 if layout.has_header else 1}: {problems[0]})")


@dataclasses.dataclass(frozen=True)
class SortedInput:
  """The input files: those to read, and the foreign ones with a reason."""
  data: Tuple[str, ...]
  foreign: Dict[str, str]

  def describe_foreign(self) -> List[str]:
    """One line per foreign file."""
    return [f"{path}: {reason}" for path, reason in self.foreign.items()]


def sort_out(paths: Sequence[str], spec: features.DatasetSpec) -> SortedInput:
  """Splits `paths` into training data and foreign files (foreign_reason),
  saying for an unlabelled test file which file to train on instead."""
  reasons = {path: foreign_reason(path, spec) for path in paths}
  data = tuple(p for p, r in reasons.items() if r is None)
  columns = len(spec.columns) - 1
  name = spec.name.capitalize()
  instead = (f"point --data at {data[0]}" if len(data) == 1 else
             f"point --data at one of {', '.join(data)}" if data else
             "point --data at the labelled training file")
  foreign = {
      p: (f"{name}'s unlabelled test file ({columns} columns: {name}'s "
          f"layout without the label column {spec.label!r}); it cannot be "
          f"trained or evaluated on: {instead}"
          if r == UNLABELLED else r)
      for p, r in reasons.items() if r is not None}
  return SortedInput(data, foreign)


def check_files(paths: Sequence[str], spec: features.DatasetSpec,
                skip_foreign_files: bool) -> SortedInput:
  """sort_out, refusing foreign files unless `skip_foreign_files`.

  Raises:
    ForeignFilesError: naming each foreign file in one line.
  """
  sorted_input = sort_out(paths, spec)
  if sorted_input.foreign and not skip_foreign_files:
    hint = ("\n(--skip-foreign-files reads the other files and names the "
            "skipped ones)" if sorted_input.data else "")
    raise ForeignFilesError(
        f"not {spec.name} training data:\n  "
        + "\n  ".join(sorted_input.describe_foreign()) + hint)
  return sorted_input
