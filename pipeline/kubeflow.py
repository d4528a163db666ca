"""`compile-kubeflow`: the pipeline as a Kubeflow Pipelines v2 pipeline spec.

TFX 1.16's KubeflowV2DagRunner compiles `create_pipeline(config)` into the
KFP v2 pipeline spec (IR YAML), which the KFP UI and `kfp.Client` upload.
Compiling is offline: no cluster, bucket or registry is contacted, and the
only file written is the spec.

Every task is a container task, the only kind open-source KFP v2 runs
besides importers; the Evaluator's baseline step (components/baseline.py) is
never cached. `--for-local-run` compiles the same spec with local paths for
`python -m pipeline run-compiled` (pipeline/run_compiled.py).

Open-source KFP v2 needs two things the runner does not do by default (see
kubeflow/README.md): schema 2.1.0 (the API server rejects the default 2.0.0,
whose `constantValue` parameters its driver cannot resolve) and
`defaultPipelineRoot` (the runner keeps the root only in the runtime config of
its JSON job; without it, runs fall back to the cluster's minio:// root, which
TFX's filesystems cannot write).
"""

import argparse
import dataclasses
import os
from typing import Any, Dict

import yaml

from pipeline import config as config_lib
from pipeline.config import PipelineConfig

# Where kubeflow/Dockerfile copies this repository inside the image.
CONTAINER_REPO_ROOT = "/pipeline"
CONTAINER_SCHEMA_ROOT = CONTAINER_REPO_ROOT + "/schema"

# The runner writes the bare PipelineSpec only for these; for .json it writes
# a Vertex AI PipelineJob, which the KFP API server does not accept.
SPEC_SUFFIXES = (".yaml", ".yml")

# Environment variables that give the Beam runner flags their defaults.
PROJECT_ENV = "GOOGLE_CLOUD_PROJECT"
REGION_ENV = "GOOGLE_CLOUD_REGION"
TEMP_LOCATION_ENV = "BEAM_TEMP_LOCATION"
JOB_ENDPOINT_ENV = "BEAM_JOB_ENDPOINT"


def _require_uri(flag: str, value: str) -> None:
  """Every pod must reach the path: a local path exists only on this host."""
  if "://" not in value:
    raise ValueError(f"{flag} must be a URI the pods can read and write "
                     f"(e.g. gs://bucket/path), got the local path {value!r}")


def kubeflow_config(config: PipelineConfig) -> PipelineConfig:
  """`config` as the pods see it: schema in the image, the cluster's MLMD."""
  return dataclasses.replace(config, schema_root=CONTAINER_SCHEMA_ROOT,
                             local_metadata=False)


def compile_pipeline(config: PipelineConfig, image: str,
                     for_local_run: bool = False) -> Dict[str, Any]:
  """The KFP v2 pipeline spec of `create_pipeline(config)` on `image`.

  Args:
    config: the run; `data` and `output` must be URIs the pods can reach.
      Kubeflow stores artifacts under `config.pipeline_root` and the Pusher
      writes to `config.serving_dir`.
    image: the image built from kubeflow/Dockerfile, as the cluster pulls it.
    for_local_run: a spec for `run-compiled` on this machine: `data` and
      `output` may be local paths (made absolute) and the schema is this
      checkout's. Everything else is the cluster's spec.

  Returns:
    The PipelineSpec as a JSON-style dict (schema 2.1.0).

  Raises:
    ValueError: a local data/output path, no image, or a dataset whose
      schema is missing from this checkout (and so from the image).
  """
  # Imported here: TFX and TensorFlow load only when a compile is asked for.
  # pylint: disable=g-import-not-at-top
  from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner
  from pipeline.pipeline import UNCACHED_NODES
  from pipeline.pipeline import create_pipeline
  # pylint: enable=g-import-not-at-top
  if not image:
    raise ValueError("--image is empty: give the image built from "
                     "kubeflow/Dockerfile")
  if for_local_run:
    config = dataclasses.replace(
        config, data=_absolute(config.data), output=_absolute(config.output),
        local_metadata=False)
  else:
    _require_uri("--data", config.data)
    _require_uri("--pipeline-root", config.output)
  if not os.path.isfile(config.schema_path):
    raise ValueError(f"schema {config.schema_path} is missing: the image "
                     "copies schema/ from this checkout")
  runner = kubeflow_v2_dag_runner.KubeflowV2DagRunner(
      config=kubeflow_v2_dag_runner.KubeflowV2DagRunnerConfig(
          default_image=image, use_pipeline_spec_2_1=True))
  job = runner.run(create_pipeline(
      config if for_local_run else kubeflow_config(config)), write_out=False)
  spec = job["pipelineSpec"]
  spec["defaultPipelineRoot"] = config.pipeline_root
  # TFX caches all steps or none; KFP honours each task's own option.
  for name in UNCACHED_NODES:
    spec["root"]["dag"]["tasks"][name]["cachingOptions"] = {
        "enableCache": False}
  return spec


def _absolute(path: str) -> str:
  return path if "://" in path else os.path.abspath(path)


def write_pipeline_spec(spec: Dict[str, Any], path: str) -> None:
  """Writes `spec` as IR YAML; sorted keys make the file reproducible."""
  if not path.endswith(SPEC_SUFFIXES):
    raise ValueError(f"--output {path!r} must end with .yaml or .yml: the KFP "
                     "API server takes the pipeline spec as IR YAML")
  directory = os.path.dirname(os.path.abspath(path))
  if not os.path.isdir(directory):
    raise ValueError(f"--output {path!r}: directory {directory} does not "
                     "exist")
  text = yaml.safe_dump(spec, sort_keys=True)
  with open(path, "w", encoding="utf-8") as spec_file:
    spec_file.write(text)


def config_from_args(args: argparse.Namespace) -> PipelineConfig:
  """PipelineConfig from parsed `compile-kubeflow` arguments."""
  # pylint: disable-next=g-import-not-at-top
  from commands import cli
  temp_location = args.temp_location or (
      f"{args.output.rstrip('/')}/beam-temp")
  beam_args = config_lib.beam_pipeline_args(
      args.beam_runner, image=args.image, project=args.project,
      region=args.region, temp_location=temp_location,
      job_endpoint=args.job_endpoint,
      environment_type=args.environment_type,
      environment_config=args.environment_config)
  return dataclasses.replace(
      cli.config_from_args(args),
      beam_args=beam_args + tuple(args.beam_args or ()),
      trainer_gpus=args.gpus, trainer_accelerator=args.gpu_type)


def _compile(args: argparse.Namespace) -> int:
  config = config_from_args(args)
  spec = compile_pipeline(config, args.image, args.for_local_run)
  write_pipeline_spec(spec, args.spec_file)
  gpus = (f"{config.trainer_gpus} x {config.trainer_accelerator}"
          if config.trainer_gpus else "none")
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

  The training options are those of `run`; `--output` here is the spec file
  and `--pipeline-root` replaces `run`'s output directory.
  """
  # pylint: disable-next=g-import-not-at-top
  from commands import cli
  parser = subparsers.add_parser(
      "compile-kubeflow", conflict_handler="resolve",
      help="compile the pipeline for Kubeflow Pipelines v2 (offline)",
      description="Compile the pipeline with TFX's KubeflowV2DagRunner into "
      "a KFP v2 pipeline spec (IR YAML) to upload with the KFP UI or "
      "kfp.Client. See kubeflow/README.md.")
  cli._add_run_arguments(parser)  # pylint: disable=protected-access
  # Same names as `run`'s, other meanings: "resolve" replaces those.
  parser.add_argument("--output", dest="spec_file", required=True,
                      metavar="FILE.yaml", help="the pipeline spec to write")
  parser.add_argument("--data", required=True, metavar="URI",
                      help="raw data the pods can read: a directory URI "
                      "ending in '/' (all its files), or a file or glob URI")
  parser.add_argument("--runner", default="beam", choices=("beam",),
                      help=argparse.SUPPRESS)
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
  parser.add_argument("--gpus", type=int, default=0,
                      help="GPUs the Trainer's pod requests (default 0)")
  parser.add_argument("--gpu-type", default=config_lib.DEFAULT_ACCELERATOR,
                      help="Kubernetes resource name of the GPUs (default "
                      "%(default)s)")
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
  parser.set_defaults(handler=_compile)
  return parser
