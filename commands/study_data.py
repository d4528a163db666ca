"""The study's one dataset: ingestion and Transform, run once.

transform_once runs the real pipeline up to Transform (cached by TFX like
any run) and finds its artifacts in ML Metadata (pipeline.metadata); every
study run then trains on ExampleGen's files through that Transform graph.
"""

import dataclasses
import os
from typing import List

import tensorflow as tf

from pipeline import metadata
from pipeline import runner
from pipeline.config import PipelineConfig
from pipeline.pipeline import create_pipeline

@dataclasses.dataclass(frozen=True)
class TransformedInputs:
  """URIs of what ExampleGen and Transform produced for the study."""
  raw_examples: str
  transform_graph: str


def split_pattern(examples_uri: str, split: str) -> str:
  """The file pattern of one split of an Examples artifact."""
  return os.path.join(examples_uri, f"Split-{split}", "*")


def split_files(examples_uri: str, split: str) -> List[str]:
  """The record files of one split of an Examples artifact."""
  pattern = split_pattern(examples_uri, split)
  files = sorted(tf.io.gfile.glob(pattern))
  if not files:
    raise FileNotFoundError(f"no {split} examples match {pattern}")
  return files


def transform_artifacts(config: PipelineConfig) -> TransformedInputs:
  """The inputs and outputs of the latest finished Transform execution."""
  uris = metadata.node_artifacts(config.metadata_path, config.pipeline_name,
                                 "Transform", inputs=True)
  return TransformedInputs(raw_examples=uris["examples"],
                           transform_graph=uris["transform_graph"])


def transform_once(config: PipelineConfig) -> TransformedInputs:
  """Runs the pipeline up to Transform (cached on re-runs) and finds it."""
  runner.check_input(config)
  os.makedirs(config.output, exist_ok=True)
  with runner.run_temp_dir():
    runner.BeamDagRunnerWithProgress().run(
        create_pipeline(config, until_transform=True))
  return transform_artifacts(config)
