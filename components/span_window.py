"""The days Transform and the Trainer read: a rolling window of spans.

`--span rolling:K` trains on the span this run ingests and the K-1 spans
before it, each ingested once, by its own day's run. TFX's rolling ranges
do not give that on every orchestrator (docs/daily.md):
`SpanRangeStrategy` is a resolver over ML Metadata, which open-source
Kubeflow Pipelines does not run; its window ends at the highest span in
the store, not at this run's (a backfill would train on later days); it
keeps every artifact of a span (a day ingested twice is trained on twice).

So, like `LatestPushedModel`, the window is an ordinary component that
reads state on the filesystem, beside the serving directory: each run
records its span's Examples in a registry (`span-<N>.json`, the newest
ingestion of a span replaces the older), then reads the entries of spans
[last - K + 1, last], `last` being this run's span. Its output is an
Examples artifact whose `window.json` lists those days' Examples; our
Transform, Trainer and Tuner executors read it as the list of artifacts a
resolver would have given them (`expand_examples`). StatisticsGen, the
validator, the warm start and the Evaluator read the new day alone.

Every daily run (`{SPAN}` in --data) has the node, with K = 1 when --span
is a day, so its span is there for the windows of later runs. A span of
the window that no run of this output directory ingested, after the first
one that was, is a gap: it is left out, logged and recorded
(`missing_spans`). The node is cached per its input Examples: a re-run of a
day trains on the window it had.
"""

import json
import os
import re
from typing import Any, Dict, List, Optional, Tuple

from absl import logging
from tfx import types
from tfx.components.example_gen import utils as example_gen_utils
from tfx.dsl.components.base import base_component
from tfx.dsl.components.base import base_executor
from tfx.dsl.components.base import executor_spec
from tfx.dsl.io import fileio
from tfx.types import artifact_utils
from tfx.types import component_spec
from tfx.types import standard_artifacts
from tfx.types import standard_component_specs
from tfx.utils import io_utils

EXAMPLES_KEY = standard_component_specs.EXAMPLES_KEY
SPAN_PROPERTY = example_gen_utils.SPAN_PROPERTY_NAME
WINDOW_KEY = "window"
DAYS_KEY = "days"
REGISTRY_KEY = "registry"
# The window's list of Examples, in its artifact directory.
MANIFEST = "window.json"
# Custom properties of the window artifact: comma-separated span numbers.
WINDOW_SPANS_PROPERTY = "window_spans"
MISSING_SPANS_PROPERTY = "missing_spans"
WINDOW_DAYS_PROPERTY = "window_days"
# Examples' custom properties of their format, the window's and its days'.
_FORMAT_PROPERTIES = ("payload_format", "file_format")


def span_of(examples: types.Artifact) -> int:
  """The span of ExampleGen's Examples: TFX's driver records it as a custom
  property (so does our executor where no driver runs), not in the
  artifact's own `span` property."""
  return examples.get_int_custom_property(SPAN_PROPERTY)


def _entry_path(registry: str, span: int) -> str:
  return os.path.join(registry, f"span-{span}.json")


_ENTRY_NAME = re.compile(r"span-(\d+)\.json")


def register(registry: str, examples: types.Artifact) -> None:
  """Records `examples` as its span's newest ingestion (replacing the
  entry of an older one)."""
  fileio.makedirs(registry)
  span = span_of(examples)
  path = _entry_path(registry, span)
  scratch = path + ".tmp"
  io_utils.write_string_file(scratch, json.dumps(
      {"span": span, "uri": examples.uri,
       "split_names": examples.split_names}))
  fileio.rename(scratch, path, overwrite=True)


def registered_spans(registry: str) -> List[int]:
  """The span numbers with an entry in `registry`."""
  if not fileio.exists(registry):
    return []
  entries = (_ENTRY_NAME.fullmatch(n.rstrip("/"))
             for n in fileio.listdir(registry))
  return sorted(int(entry[1]) for entry in entries if entry)


def _entry(registry: str, span: int) -> Optional[Dict[str, Any]]:
  """The registry's entry of `span`, or None when there is none or its
  Examples are gone (each split's directory)."""
  path = _entry_path(registry, span)
  if not fileio.exists(path):
    return None
  entry = json.loads(io_utils.read_string_file(path))
  examples = standard_artifacts.Examples()
  examples.uri = entry["uri"]
  examples.split_names = entry["split_names"]
  gone = [split for split in artifact_utils.decode_split_names(
      entry["split_names"]) if not fileio.exists(
          artifact_utils.get_split_uri([examples], split))]
  if gone:
    logging.warning("span %d: its Examples at %s are gone (%s): left out of "
                    "the window", span, entry["uri"], ", ".join(gone))
    return None
  return entry


def gather(registry: str, last: int, days: int
          ) -> Tuple[List[Dict[str, Any]], List[int]]:
  """(entries of the window's spans, oldest first; its missing spans): the
  spans [last - days + 1, last] from the first registered one on."""
  registered = registered_spans(registry)
  first = max(last - days + 1, min(registered, default=last))
  entries, missing = [], []
  for span in range(first, last + 1):
    entry = _entry(registry, span)
    if entry is None:
      missing.append(span)
    else:
      entries.append(entry)
  return entries, missing


def _spans_text(spans: List[int]) -> str:
  return ",".join(map(str, spans))


class Executor(base_executor.BaseExecutor):
  """Registers this run's span, then writes the window ending at it."""

  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]],
         exec_properties: Dict[str, Any]) -> None:
    day = artifact_utils.get_single_instance(input_dict[EXAMPLES_KEY])
    window = artifact_utils.get_single_instance(output_dict[WINDOW_KEY])
    registry = exec_properties[REGISTRY_KEY]
    days = int(exec_properties[DAYS_KEY])
    register(registry, day)
    last = span_of(day)
    entries, missing = gather(registry, last, days)
    if missing:
      logging.warning(
          "the window of %d days ending at span %d: spans %s were not "
          "ingested by a run of this output directory (%s), or their "
          "Examples are gone: training on spans %s", days, last, _spans_text(missing),
          registry, _spans_text([e["span"] for e in entries]))
    io_utils.write_string_file(os.path.join(window.uri, MANIFEST), json.dumps(
        {"days": days, "last_span": last, "missing_spans": missing,
         "examples": [{"span": e["span"], "uri": e["uri"]} for e in entries]},
        indent=1))
    _copy_format(day, window, last)
    window.set_string_custom_property(
        WINDOW_SPANS_PROPERTY, _spans_text([e["span"] for e in entries]))
    window.set_string_custom_property(MISSING_SPANS_PROPERTY,
                                      _spans_text(missing))
    window.set_int_custom_property(WINDOW_DAYS_PROPERTY, days)


def _copy_format(source: types.Artifact, examples: types.Artifact,
                 span: int) -> None:
  """Gives `examples` `span` and the splits and format of `source`."""
  examples.span = span
  examples.set_int_custom_property(SPAN_PROPERTY, span)
  examples.split_names = source.split_names
  for name in _FORMAT_PROPERTIES:
    if source.has_custom_property(name):
      examples.set_string_custom_property(
          name, source.get_string_custom_property(name))


def _members(uri: str) -> Optional[List[Dict[str, Any]]]:
  """The days ({"span", "uri"}) of the window at `uri`, or None when `uri`
  is not a window."""
  manifest = os.path.join(uri, MANIFEST)
  if not fileio.exists(manifest):
    return None
  return json.loads(io_utils.read_string_file(manifest))["examples"]


def day_uris(uri: str) -> List[str]:
  """The Examples URIs an Examples artifact at `uri` stands for: a window's
  days, oldest first, or `uri` itself."""
  members = _members(uri)
  return [uri] if members is None else [m["uri"] for m in members]


def expand_examples(artifacts: List[types.Artifact]) -> List[types.Artifact]:
  """`artifacts` with each window replaced by the Examples it lists (one per
  span, oldest first): what a resolver node would have given."""
  expanded = []
  for artifact in artifacts:
    members = _members(artifact.uri)
    if members is None:
      expanded.append(artifact)
      continue
    for member in members:
      examples = standard_artifacts.Examples()
      examples.uri = member["uri"]
      _copy_format(artifact, examples, member["span"])
      expanded.append(examples)
  return expanded


def expand_input(input_dict: Dict[str, List[types.Artifact]]
                ) -> Dict[str, List[types.Artifact]]:
  """`input_dict` with its Examples expanded (expand_examples)."""
  if EXAMPLES_KEY not in input_dict:
    return input_dict
  return {**input_dict,
          EXAMPLES_KEY: expand_examples(input_dict[EXAMPLES_KEY])}


class SpanWindowSpec(types.ComponentSpec):
  PARAMETERS = {
      DAYS_KEY: component_spec.ExecutionParameter(type=int),
      REGISTRY_KEY: component_spec.ExecutionParameter(type=str)}
  INPUTS = {EXAMPLES_KEY: component_spec.ChannelParameter(
      type=standard_artifacts.Examples)}
  OUTPUTS = {WINDOW_KEY: component_spec.ChannelParameter(
      type=standard_artifacts.Examples)}


class SpanWindow(base_component.BaseComponent):
  """The last `days` spans ending at `examples`' span, as one Examples
  artifact (its manifest: expand_examples), recording `examples` in the
  `registry` directory for later windows."""
  SPEC_CLASS = SpanWindowSpec
  EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

  def __init__(self, examples: types.BaseChannel, days: int, registry: str):
    if days < 1:
      raise ValueError(f"a window of {days} days: it needs at least one")
    super().__init__(SpanWindowSpec(
        examples=examples, days=days, registry=registry,
        window=types.Channel(type=standard_artifacts.Examples)))
