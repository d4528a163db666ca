"""The Kubeflow commands: `compile-kubeflow` and `run-compiled`.

compile-kubeflow takes `run`'s flags (commands.flags) plus where the pods
find the data, the image and the Beam runner, and writes the KFP v2 spec
(kubeflow.compiler); run-compiled runs such a spec here
(kubeflow.run_compiled). The commands only parse flags: the Kubeflow code,
image and README are in kubeflow/.
"""

import argparse
import dataclasses
import os
import sys
from typing import Any

from commands import flags
from kubeflow import compiler
from kubeflow import run_compiled
from pipeline import config as config_lib
from pipeline import runner
from pipeline.config import PipelineConfig

# Environment variables that give the Beam runner flags their defaults.
PROJECT_ENV = "GOOGLE_CLOUD_PROJECT"
REGION_ENV = "GOOGLE_CLOUD_REGION"
TEMP_LOCATION_ENV = "BEAM_TEMP_LOCATION"
JOB_ENDPOINT_ENV = "BEAM_JOB_ENDPOINT"


def config_from_args(args: argparse.Namespace) -> PipelineConfig:
  """PipelineConfig from parsed `compile-kubeflow` arguments."""
  temp_location = args.temp_location or (
      f"{args.output.rstrip('/')}/beam-temp")
  beam_args = config_lib.beam_pipeline_args(
      args.beam_runner, image=args.image, project=args.project,
      region=args.region, temp_location=temp_location,
      job_endpoint=args.job_endpoint,
      environment_type=args.environment_type,
      environment_config=args.environment_config)
  config = flags.config_from_args(args)
  given = vars(args).get("beam_args", ())  # Only the user's.
  return dataclasses.replace(config, runner=dataclasses.replace(
      config.runner, beam_args=config_lib.add_beam_args(beam_args, given)))


def _compile(args: argparse.Namespace) -> int:
  config = config_from_args(args)
  spec = compiler.compile_pipeline(config, args.image, args.for_local_run)
  compiler.write_pipeline_spec(spec, args.spec_file)
  gpus = (f"{config.runner.gpus} x {config.runner.gpu_type}"
          if config.runner.gpus else "none")
  print(f"wrote {args.spec_file}: KFP v2 pipeline spec "
        f"{spec['pipelineInfo']['name']!r} "
        f"({len(spec['root']['dag']['tasks'])} tasks)\n"
        f"  image:          {args.image}\n"
        f"  pipeline root:  {spec['defaultPipelineRoot']}\n"
        f"  Beam runner:    {args.beam_runner}\n"
        f"  Trainer GPUs:   {gpus}")
  return 0


def add_compile_parser(subparsers: Any) -> argparse.ArgumentParser:
  """Registers `compile-kubeflow` (with its handler) on `subparsers`.

  The training options are those of `run`; its input flags are its own:
  `--output` is the spec file, `--pipeline-root` the pipeline's output
  directory (`run`'s --output), and --data a URI the pods can read.
  """
  parser = subparsers.add_parser(
      "compile-kubeflow",
      help="compile the pipeline for Kubeflow Pipelines v2 (offline)",
      description="Compile the pipeline with TFX's KubeflowV2DagRunner into "
      "a KFP v2 pipeline spec (IR YAML) to upload with the KFP UI or "
      "kfp.Client. See kubeflow/README.md.")
  flags.add_input_arguments(
      parser, "the pipeline spec to write", data_help="raw data the pods "
      "can read: a directory URI ending in '/' (all its files), or a file "
      "or glob URI", dest="spec_file", metavar="FILE.yaml")
  # The pods run every component with Beam, on the pod's devices.
  flags.add_settings(parser, skip=("dag_runner", "cpu_devices"))
  parser.add_argument("--image", required=True,
                      help="image built from kubeflow/Dockerfile, as the "
                      "cluster pulls it (pin a tag or digest)")
  parser.add_argument("--pipeline-root", dest="output", required=True,
                      metavar="URI",
                      help="gs:// (or other TF filesystem) URI: artifacts go "
                      "to URI/pipeline, pushed models to URI/serving")
  parser.add_argument("--for-local-run", action="store_true",
                      help="a spec for `run-compiled` on this machine: "
                      "--data and --pipeline-root may be local paths, the "
                      "schema is this checkout's (not the image's)")
  beam = parser.add_argument_group(
      "Beam runner", "where the Beam-based components (ExampleGen, "
      "StatisticsGen, Transform, Evaluator) run their Beam pipelines")
  beam.add_argument("--beam-runner", default="direct",
                    choices=config_lib.BEAM_RUNNERS,
                    help="direct: inside each component's pod (default)")
  beam.add_argument("--project", default=os.environ.get(PROJECT_ENV),
                    help=f"dataflow: Google Cloud project (${PROJECT_ENV})")
  beam.add_argument("--region", default=os.environ.get(REGION_ENV),
                    help=f"dataflow: region (${REGION_ENV})")
  beam.add_argument("--temp-location",
                    default=os.environ.get(TEMP_LOCATION_ENV),
                    help=f"dataflow: gs:// temp directory "
                    f"(${TEMP_LOCATION_ENV}, else PIPELINE_ROOT/beam-temp)")
  beam.add_argument("--job-endpoint", default=os.environ.get(JOB_ENDPOINT_ENV),
                    help="flink/spark: host:port of the Beam job server "
                    f"(${JOB_ENDPOINT_ENV})")
  beam.add_argument("--environment-type", default="DOCKER",
                    choices=config_lib.BEAM_ENVIRONMENTS,
                    help="flink/spark: how SDK workers start (default DOCKER: "
                    "they run --image)")
  beam.add_argument("--environment-config", default=None,
                    help="flink/spark: EXTERNAL: host:port of the worker "
                    "pool; DOCKER: an image other than --image")
  parser.set_defaults(handler=_compile, uses_devices=False)
  return parser


def _run_compiled(args: argparse.Namespace) -> int:
  try:
    result = run_compiled.run_spec(args.spec, args.root, args.run_id,
                                   enable_cache=args.cache)
  except (run_compiled.SpecError, run_compiled.TaskFailed) as error:
    print(f"\nerror: {error}", file=sys.stderr)
    return runner.EXIT_FAILED
  print(result.describe())
  return 0


def add_run_compiled_parser(subparsers: Any) -> argparse.ArgumentParser:
  """Registers `run-compiled` (with its handler) on `subparsers`."""
  parser = subparsers.add_parser(
      "run-compiled", help="run a compiled KFP v2 spec on this machine",
      description="Execute a KFP v2 pipeline spec (IR YAML, e.g. from "
      "compile-kubeflow) locally the way the open-source KFP v2 backend "
      "would: container and importer tasks only, in dependency order, "
      "trigger conditions honoured, each container's own command in a "
      "subprocess (a `python -m` command in a fork of one process that has "
      "imported TFX's entrypoint: kubeflow/README.md). No Docker, no "
      "cluster. Prints each task's state and its "
      "output artifacts' metadata (e.g. the Pusher's pushed=1.0).")
  parser.add_argument("spec", help="the pipeline spec (.yaml)")
  parser.add_argument("--root", required=True, metavar="DIR",
                      help="artifacts go to DIR/<run id>/<task>/")
  parser.add_argument("--run-id", default=None,
                      help="name of the run directory (default: time-based)")
  parser.add_argument("--no-cache", dest="cache", action="store_false",
                      help="run every task (default: reuse the outputs of "
                      "an earlier run under DIR for tasks whose spec enables "
                      "caching and whose inputs are the same, as KFP does)")
  parser.set_defaults(handler=_run_compiled, uses_devices=False)
  return parser
