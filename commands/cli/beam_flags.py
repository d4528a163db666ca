"""The Beam-runner flags of `run`, `tune` and `compile-kubeflow`, declared once.

Where the Beam-based components (ExampleGen, StatisticsGen, Transform,
Evaluator) run their Beam pipelines: in process (direct, the default), on
Dataflow, or on a Flink or Spark cluster through a Beam job server.
pipeline.config.beam_pipeline_args holds each runner's arguments;
`--beam-arg` adds to them or replaces one.
"""

import argparse
import dataclasses
import os
from typing import Optional

from commands.cli import flags
from pipeline import config as config_lib
from pipeline.code_fingerprint import REPO_ROOT
from pipeline.config import PipelineConfig

# Environment variables that give the Beam runner flags their defaults.
PROJECT_ENV = "GOOGLE_CLOUD_PROJECT"
REGION_ENV = "GOOGLE_CLOUD_REGION"
TEMP_LOCATION_ENV = "BEAM_TEMP_LOCATION"
JOB_ENDPOINT_ENV = "BEAM_JOB_ENDPOINT"


def add_beam_arguments(parser: argparse.ArgumentParser, output_flag: str,
                       docker_image: str) -> None:
  """The Beam runner group (`output_flag`: the flag of the directory the
  temp location defaults under; `docker_image`: what DOCKER SDK workers
  run unless --environment-config names another)."""
  beam = parser.add_argument_group(
      "Beam runner", "where the Beam-based components (ExampleGen, "
      "StatisticsGen, Transform, Evaluator) run their Beam pipelines")
  beam.add_argument("--beam-runner", default="direct",
                    choices=config_lib.BEAM_RUNNERS,
                    help="direct: inside each component's process (default)")
  beam.add_argument("--project", default=os.environ.get(PROJECT_ENV),
                    help=f"dataflow: Google Cloud project (${PROJECT_ENV})")
  beam.add_argument("--region", default=os.environ.get(REGION_ENV),
                    help=f"dataflow: region (${REGION_ENV})")
  beam.add_argument("--temp-location",
                    default=os.environ.get(TEMP_LOCATION_ENV),
                    help=f"dataflow: gs:// temp directory "
                    f"(${TEMP_LOCATION_ENV}, else {output_flag}/beam-temp)")
  beam.add_argument("--job-endpoint", default=os.environ.get(JOB_ENDPOINT_ENV),
                    help="flink/spark: host:port of the Beam job server "
                    f"(${JOB_ENDPOINT_ENV})")
  beam.add_argument("--environment-type", default="DOCKER",
                    choices=config_lib.BEAM_ENVIRONMENTS,
                    help="flink/spark: how SDK workers start (default "
                    f"DOCKER: they run {docker_image})")
  beam.add_argument("--environment-config", default=None,
                    help="flink/spark: EXTERNAL: host:port of the worker "
                    "pool; DOCKER: the SDK workers' image")


def _staged_project(args: argparse.Namespace,
                    image: Optional[str]) -> Optional[str]:
  """This checkout's pyproject.toml when the SDK workers are not the
  pipeline image (a worker pool of this machine: EXTERNAL or PROCESS, from
  `run`, or from a spec compiled --for-local-run): Beam stages the
  project's sdist and their boot installs it (kubeflow/sdk_worker_boot.py).
  In a pod, the image holds the project and nothing is staged."""
  local = image is None or vars(args).get("for_local_run", False)
  if (args.beam_runner in ("flink", "spark") and local and
      args.environment_type in ("EXTERNAL", "PROCESS")):
    return os.path.join(REPO_ROOT, "pyproject.toml")
  return None


def config_from_args(args: argparse.Namespace,
                     image: Optional[str] = None) -> PipelineConfig:
  """The PipelineConfig of parsed flags, its Beam arguments those of the
  Beam runner flags with the user's --beam-arg added (`image`: the
  pipeline image remote workers run, if there is one)."""
  temp_location = args.temp_location or (
      f"{args.output.rstrip('/')}/beam-temp")
  beam_args = config_lib.beam_pipeline_args(
      args.beam_runner, image=image, project=args.project,
      region=args.region, temp_location=temp_location,
      job_endpoint=args.job_endpoint,
      environment_type=args.environment_type,
      environment_config=args.environment_config,
      setup_file=_staged_project(args, image))
  config = flags.config_from_args(args)
  given = vars(args).get("beam_args", ())  # Only the user's.
  return dataclasses.replace(config, runner=dataclasses.replace(
      config.runner, beam_args=config_lib.add_beam_args(beam_args, given)))
