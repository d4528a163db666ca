"""Which span of daily data ExampleGen reads: TFX's span pattern and range.

Daily logs live in one folder per day, `--data 'logs/day-{SPAN}/'`; TFX's
file-based ExampleGen reads one span per execution and records it on its
Examples artifact. `--span` picks it: `latest` (TFX's default) or a span
number (a static RangeConfig). `rolling:K` ingests the latest span and
trains on it and the K-1 spans before it, each ingested once by its own
day's run (components/span_window.py gathers them); `A-B` ingests span B
and trains on spans A to B (a backfill with a window).

The span is resolved by TFX's own FileBasedInputProcessor, the code of its
ExampleGen driver, everywhere it is needed: by the CLI before anything
starts (check the span's files, size the vocabulary threshold), and by the
executor when no driver ran before it (a compiled spec on open-source
Kubeflow Pipelines, whose backend does not run the driver hook:
kubeflow/README.md).
"""

import dataclasses
import glob
import os
import re
from typing import Any, Optional, Tuple

# TFX's utils.SPAN_SPEC (a test checks), written out so that the pattern
# checks of the command line import no TFX; what resolves spans imports it.
SPAN = "{SPAN}"
LATEST = "latest"
ROLLING = "rolling:"


@dataclasses.dataclass(frozen=True)
class ResolvedSpan:
  """The span chosen, and its files' pattern under the input base."""
  span: int
  pattern: str


def has_span(data: str) -> bool:
  """Whether `data` names daily folders or files by TFX's span pattern."""
  return SPAN in data


@dataclasses.dataclass(frozen=True)
class SpanChoice:
  """A --span choice: the span ExampleGen ingests (None: the latest) and
  the days, ending at it, that Transform and the Trainer read."""
  span: Optional[int]
  days: int


def parse_span_choice(choice: Optional[str]) -> SpanChoice:
  """`latest` (or None), a span number N, a range `A-B` (days A to B,
  ingesting B: a backfill with a window) or `rolling:K` (the latest span
  and the K-1 before it)."""
  if choice is None or choice == LATEST:
    return SpanChoice(None, 1)
  if choice.isdigit():
    return SpanChoice(int(choice), 1)
  days = choice[len(ROLLING):] if choice.startswith(ROLLING) else ""
  if days.isdigit() and int(days) >= 1:
    return SpanChoice(None, int(days))
  bounds = re.fullmatch(r"(\d+)-(\d+)", choice)
  if bounds and int(bounds[1]) <= int(bounds[2]):
    return SpanChoice(int(bounds[2]), int(bounds[2]) - int(bounds[1]) + 1)
  raise ValueError(f"span must be '{LATEST}', a span number, a range 'A-B' "
                   f"(days A to B, A <= B) or '{ROLLING}K' (the last K days, "
                   f"K >= 1), got {choice!r}")


def window_days(choice: Optional[str]) -> int:
  """How many days, ending at the span ingested, Transform and the Trainer
  read: K for `rolling:K`, B-A+1 for `A-B`, else 1."""
  return parse_span_choice(choice).days


def range_config(choice: Optional[str]) -> Optional[Any]:
  """ExampleGen's RangeConfig for a --span choice (None: the latest)."""
  from tfx.proto import range_config_pb2  # pylint: disable=g-import-not-at-top
  number = parse_span_choice(choice).span
  if number is None:
    return None
  return range_config_pb2.RangeConfig(
      static_range=range_config_pb2.StaticRange(
          start_span_number=number, end_span_number=number))


def split_span_path(path: str) -> Tuple[str, str]:
  """(input_base, pattern) of a path with {SPAN}: the base is the folder
  above the first part that holds {SPAN} (TFX matches spans below the input
  base). A matched folder means its files, with or without the trailing
  '/' (`logs/day-{SPAN}` reads the files of logs/day-1/, as
  `logs/day-{SPAN}/` does); a URI is not looked at, so there the '/' says
  it."""
  head, _, _ = path.partition(SPAN)
  base = head.rpartition("/")[0] or "."
  pattern = path[len(base):].lstrip("/")
  if pattern.endswith("/"):
    pattern += "*"
  elif "://" not in path and _matches_folders(base, pattern):
    pattern += "/*"
  return base, pattern


def _matches_folders(input_base: str, pattern: str) -> bool:
  """Whether a local path of any span that `pattern` matches is a folder."""
  return any(os.path.isdir(path) for path in glob.iglob(
      os.path.join(input_base, pattern.replace(SPAN, "*"))))


def found_spans(input_base: str, pattern: str) -> Tuple[int, ...]:
  """The span numbers of the paths that match `pattern` under input_base."""
  from tfx.dsl.io import fileio  # pylint: disable=g-import-not-at-top
  paths = os.path.join(input_base, pattern.replace(SPAN, "*"))
  regex = re.compile(re.escape(os.path.join(input_base, pattern)).replace(
      re.escape(SPAN), r"(\d+)").replace(r"\*", "[^/]*"))
  return tuple(sorted({int(m.group(1)) for path in fileio.glob(paths)
                       for m in [regex.fullmatch(path)] if m}))


def resolve(input_base: str, pattern: str,
            config: Optional[Any]) -> ResolvedSpan:
  """The span TFX's driver would pick, and its pattern with the span in
  (`config`: a RangeConfig, None for the latest).

  Raises:
    ValueError: no path matches the pattern, or the range's span is not
      among them (naming the pattern and the spans found).
  """
  # pylint: disable=g-import-not-at-top
  from tfx.components.example_gen import input_processor
  from tfx.proto import example_gen_pb2
  # pylint: enable=g-import-not-at-top
  splits = [example_gen_pb2.Input.Split(name="single_split", pattern=pattern)]
  processor = input_processor.FileBasedInputProcessor(input_base, splits,
                                                      config)
  where = os.path.join(input_base, pattern)
  try:
    span, version = processor.resolve_span_and_version()
  except (ValueError, RuntimeError):
    found = found_spans(input_base, pattern)
    wanted = (f"span {config.static_range.start_span_number}"
              if config is not None else "a span")
    raise ValueError(
        f"{wanted} of {where} is not there: "
        + (f"spans found: {', '.join(map(str, found))}" if found else
           "no path matches it")) from None
  return ResolvedSpan(span, processor.get_pattern_for_span_version(
      pattern, span, version))


def span_files(data: str, choice: Optional[str]) -> Tuple[str, Tuple[str, ...]]:
  """(the chosen span's path pattern, its files, sorted) of a local `data`
  path with {SPAN}, as ExampleGen will read them (resolve's errors)."""
  from tfx.dsl.io import fileio  # pylint: disable=g-import-not-at-top
  base, pattern = split_span_path(data)
  where = os.path.join(base, resolve(base, pattern,
                                     range_config(choice)).pattern)
  return where, tuple(sorted(fileio.glob(where)))


def window_files(data: str, choice: Optional[str]) -> Tuple[str, ...]:
  """The files of the spans a `choice` trains on that are on disk: the
  span ExampleGen reads and, with `rolling:K`, those of the K-1 spans
  before it (resolve's errors for the span read)."""
  base, pattern = split_span_path(data)
  last = resolve(base, pattern, range_config(choice)).span
  first = last - window_days(choice) + 1
  files = []
  for span in found_spans(base, pattern):
    if first <= span <= last:
      files += span_files(data, str(span))[1]
  return tuple(files)
