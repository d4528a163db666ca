"""Pusher that never pushes the same model twice.

A re-run of a cached pipeline re-evaluates the cached model (its baseline,
the latest blessed model, is now the model itself) and blesses it again;
TFX's Pusher would then copy it to a new version directory. This one
records, in each pushed version's `assets.extra/`, which model artifact it
came from, and points a repeated push at the existing version instead.
Earlier versions are never touched.
"""

import os
from typing import Any, Dict, List, Optional

from absl import logging
from tfx import types
from tfx.components.pusher import component as pusher_component
from tfx.components.pusher import executor as pusher_executor
from tfx.dsl.components.base import executor_spec
from tfx.dsl.io import fileio
from tfx.proto import pusher_pb2
from tfx.types import artifact_utils
from tfx.types import standard_component_specs
from tfx.utils import io_utils
from tfx.utils import proto_utils

SOURCE_FILE = os.path.join("assets.extra", "source_model.txt")


def find_pushed_version(base_directory: str,
                        model_path: str) -> Optional[str]:
  """The version directory already holding `model_path`'s model, if any."""
  if not fileio.exists(base_directory):
    return None
  for version in sorted(fileio.listdir(base_directory)):
    source = os.path.join(base_directory, version, SOURCE_FILE)
    if fileio.exists(source) and io_utils.read_string_file(
        source).strip() == model_path:
      return os.path.join(base_directory, version.rstrip("/"))
  return None


class Executor(pusher_executor.Executor):
  """TFX's filesystem push, skipped when the model was pushed before."""

  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]],
         exec_properties: Dict[str, Any]) -> None:
    destination = pusher_pb2.PushDestination()
    proto_utils.json_to_proto(
        exec_properties[standard_component_specs.PUSH_DESTINATION_KEY],
        destination)
    base_directory = destination.filesystem.base_directory
    model_push = artifact_utils.get_single_instance(
        output_dict[standard_component_specs.PUSHED_MODEL_KEY])
    if self.CheckBlessing(input_dict):
      model_path = self.GetModelPath(input_dict)
      existing = find_pushed_version(base_directory, model_path)
      if existing:
        logging.info("Model %s was already pushed to %s; not copying again.",
                     model_path, existing)
        io_utils.copy_dir(model_path, model_push.uri)
        self._MarkPushed(model_push, pushed_destination=existing,
                         pushed_version=os.path.basename(existing))
        return
    super().Do(input_dict, output_dict, exec_properties)
    if model_push.get_int_custom_property("pushed"):
      io_utils.write_string_file(
          os.path.join(
              model_push.get_string_custom_property("pushed_destination"),
              SOURCE_FILE), self.GetModelPath(input_dict))


class Pusher(pusher_component.Pusher):
  """Pusher whose repeated pushes of one model reuse its first version."""
  EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)
