"""The Evaluator's baseline: the model being served, on every orchestrator.

TFX's `LatestBlessedModelStrategy` resolver queries ML Metadata; its KFP v2
compilation is a resolver executor that only Vertex AI Pipelines runs, so on
open-source Kubeflow Pipelines the pipeline stopped there. The
no-regression gate compares with what is served, and the Pusher writes it to
`<push destination>/<version>/`, so `LatestPushedModel` reads it from there:
an ordinary container component that runs wherever the Pusher does.

"Latest" is the largest numeric version, the one TensorFlow Serving serves
(the Pusher's versions are Unix timestamps). The model is copied into the
component's own output artifact, so the evaluation's lineage keeps the exact
baseline even after the serving directory changes.

On the first run nothing is pushed: the output artifact is then empty and
marked `pushed_model_found=0`, and `Evaluator` drops it, so the Evaluator
runs exactly as without a baseline (absolute checks only). The step reads
state outside ML Metadata, so it must never be served from a cache:
`pipeline.pipeline.UNCACHED_NODES` lists it for both compilations.
"""

import os
from typing import Any, Dict, List, Optional

from absl import logging
from ml_metadata.proto import metadata_store_pb2
from tfx import types
from tfx.dsl.components.base import base_component
from tfx.dsl.components.base import base_executor
from tfx.dsl.components.base import executor_spec
from tfx.dsl.io import fileio
from tfx.proto import pusher_pb2
from tfx.types import artifact_utils
from tfx.types import component_spec
from tfx.types import standard_artifacts
from tfx.utils import io_utils
from tfx.utils import path_utils
from tfx.utils import proto_utils

from trainer_module import contract

MODEL_KEY = "model"
EXAMPLES_KEY = "examples"
PUSH_DESTINATION_KEY = "push_destination"
# Custom properties of the output Model.
FOUND_PROPERTY = "pushed_model_found"
VERSION_PROPERTY = "pushed_version"
SOURCE_PROPERTY = "pushed_destination"


def latest_pushed_version(base_directory: str) -> Optional[str]:
  """`base_directory/<largest numeric version>` holding a SavedModel, or None.

  Names that are not numbers, and versions without a saved_model.pb, are
  not what TensorFlow Serving would serve: they are skipped.
  """
  if not fileio.exists(base_directory):
    return None
  versions = []
  for entry in fileio.listdir(base_directory):
    name = entry.rstrip("/")
    path = os.path.join(base_directory, name)
    if name.isdigit() and fileio.exists(os.path.join(path, "saved_model.pb")):
      versions.append((int(name), path))
  return max(versions)[1] if versions else None


class Executor(base_executor.BaseExecutor):
  """Copies the latest pushed model into the output Model, if there is one."""

  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]],
         exec_properties: Dict[str, Any]) -> None:
    del input_dict  # The push destination is the source (see the spec).
    destination = pusher_pb2.PushDestination()
    proto_utils.json_to_proto(exec_properties[PUSH_DESTINATION_KEY],
                              destination)
    base_directory = destination.filesystem.base_directory
    model = artifact_utils.get_single_instance(output_dict[MODEL_KEY])
    served = latest_pushed_version(base_directory)
    if served is None:
      logging.info("No model pushed to %s yet: the Evaluator runs without a "
                   "baseline (absolute checks only).", base_directory)
      model.set_int_custom_property(FOUND_PROPERTY, 0)
      return
    logging.info("Baseline: the served model %s.", served)
    copy = path_utils.serving_model_dir(model.uri)
    io_utils.copy_dir(served, copy)
    io_utils.write_string_file(os.path.join(copy, contract.SERVED_FROM),
                               served)
    model.set_int_custom_property(FOUND_PROPERTY, 1)
    model.set_string_custom_property(VERSION_PROPERTY,
                                     os.path.basename(served))
    model.set_string_custom_property(SOURCE_PROPERTY, served)


class LatestPushedModelSpec(types.ComponentSpec):
  PARAMETERS = {PUSH_DESTINATION_KEY: component_spec.ExecutionParameter(
      type=pusher_pb2.PushDestination)}
  INPUTS = {EXAMPLES_KEY: component_spec.ChannelParameter(
      type=standard_artifacts.Examples, optional=True)}
  OUTPUTS = {MODEL_KEY: component_spec.ChannelParameter(
      type=standard_artifacts.Model)}


class LatestPushedModel(base_component.BaseComponent):
  """The model last pushed to `push_destination` (its filesystem layout).

  With `examples` (read by nothing: they key the cache), it is the model
  served when those examples were first trained on, the warm start of the
  Trainer: cached per examples, a re-run on the same data (other settings,
  a resume) starts from the same model, never from its own earlier push,
  and the next day's data finds the model served by then
  (trainer_module/warm_start.py). Without, it must run uncached
  (UNCACHED_NODES): the Evaluator's baseline is what is served now.
  """
  SPEC_CLASS = LatestPushedModelSpec
  EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

  def __init__(self, push_destination: pusher_pb2.PushDestination,
               examples: Optional[types.BaseChannel] = None):
    if not push_destination.HasField("filesystem"):
      raise ValueError("LatestPushedModel reads a filesystem push "
                       "destination; got " + str(push_destination))
    super().__init__(LatestPushedModelSpec(
        push_destination=push_destination, examples=examples,
        model=types.Channel(type=standard_artifacts.Model)))


def is_baseline_copy(artifact: metadata_store_pb2.Artifact) -> bool:
  """Whether an ML Metadata Model is a LatestPushedModel output: a copy of a
  served model (or an empty first-run placeholder), not a trained one."""
  return FOUND_PROPERTY in artifact.custom_properties


def is_found(model: types.Artifact) -> bool:
  """Whether a LatestPushedModel output holds a model.

  On Kubeflow the custom property comes back as a JSON number (1.0), locally
  as an int: get_int_custom_property reads both.
  """
  return bool(model.get_int_custom_property(FOUND_PROPERTY))
