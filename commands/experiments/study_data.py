"""The study's one dataset: ingestion and Transform, run once.

transform_once runs the real pipeline up to Transform (cached by TFX like
any run) and finds its artifacts in ML Metadata (pipeline.metadata); every
study run then trains on ExampleGen's files through that Transform graph
(one day's, with daily data).
"""

import dataclasses
import os
from typing import List

import tensorflow as tf

from components import span_window
from components.raw_example_gen import spans
from pipeline import input_check
from pipeline import metadata
from pipeline import runner
from pipeline.config import PipelineConfig
from pipeline.pipeline import create_pipeline

_ONE_DAY = ("the study and the benchmark train on one day of daily data: "
            "give them --span N or --span latest")


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
  """The inputs and outputs of the latest finished Transform execution.

  With daily data, Transform read a window of spans: a study trains on
  one Examples artifact, so the window must be one day.
  """
  uris = metadata.node_artifacts(config.metadata_path, config.pipeline_name,
                                 "Transform", inputs=True)
  days = span_window.day_uris(uris["examples"])
  if len(days) != 1:
    raise ValueError(_ONE_DAY)
  return TransformedInputs(raw_examples=days[0],
                           transform_graph=uris["transform_graph"])


def transform_once(config: PipelineConfig) -> TransformedInputs:
  """Runs the pipeline up to Transform (cached on re-runs) and finds it."""
  if spans.window_days(config.ingestion.span) > 1:
    raise ValueError(f"--span {config.ingestion.span}: {_ONE_DAY}")
  input_check.check_input(config)
  os.makedirs(config.output, exist_ok=True)
  with runner.run_temp_dir():
    runner.BeamDagRunnerWithProgress().run(
        create_pipeline(config, until_transform=True))
  return transform_artifacts(config)
