"""`compile-kubeflow`: the pipeline as a Kubeflow Pipelines v2 pipeline spec.

TFX 1.16's KubeflowV2DagRunner compiles `create_pipeline(config)` into the
KFP v2 pipeline spec (IR YAML), which the KFP UI and `kfp.Client` upload.
Compiling is offline: no cluster, bucket or registry is contacted, and the
only file written is the spec.

Every task is a container task, the only kind open-source KFP v2 runs
besides importers; the Evaluator's baseline step (components/baseline.py) is
never cached. `--for-local-run` compiles the same spec with local paths for
`python -m pipeline run-compiled` (kubeflow/run_compiled.py).

Open-source KFP v2 needs two things the runner does not do by default (see
kubeflow/README.md): schema 2.1.0 (the API server rejects the default 2.0.0,
whose `constantValue` parameters its driver cannot resolve) and
`defaultPipelineRoot` (the runner keeps the root only in the runtime config of
its JSON job; without it, runs fall back to the cluster's minio:// root, which
TFX's filesystems cannot write).
"""

import dataclasses
import os
from typing import Any, Dict

from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner
import yaml

from components.raw_example_gen import spans
from pipeline.config import PipelineConfig
from pipeline.pipeline import EXAMPLE_GEN_ID
from pipeline.pipeline import UNCACHED_NODES
from pipeline.pipeline import create_pipeline

# Where kubeflow/Dockerfile copies this repository inside the image.
CONTAINER_REPO_ROOT = "/pipeline"
CONTAINER_SCHEMA_ROOT = CONTAINER_REPO_ROOT + "/schema"

# The runner writes the bare PipelineSpec only for these; for .json it writes
# a Vertex AI PipelineJob, which the KFP API server does not accept.
SPEC_SUFFIXES = (".yaml", ".yml")



def _require_uri(flag: str, value: str) -> None:
  """Every pod must reach the path: a local path exists only on this host."""
  if "://" not in value:
    raise ValueError(f"{flag} must be a URI the pods can read and write "
                     f"(e.g. gs://bucket/path), got the local path {value!r}")


def kubeflow_config(config: PipelineConfig) -> PipelineConfig:
  """`config` as the pods see it: schema in the image, the cluster's MLMD."""
  return dataclasses.replace(config, runner=dataclasses.replace(
      config.runner, schema_root=CONTAINER_SCHEMA_ROOT, local_metadata=False))


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
  if not image:
    raise ValueError("--image is empty: give the image built from "
                     "kubeflow/Dockerfile")
  if for_local_run:
    config = dataclasses.replace(
        config, data=_absolute(config.data), output=_absolute(config.output),
        runner=dataclasses.replace(config.runner, local_metadata=False))
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
  uncached = list(UNCACHED_NODES)
  if spans.has_span(config.data):
    # Daily data: no backend but Vertex runs the driver that resolves the
    # span and fingerprints its files, so ExampleGen's cache key would not
    # change from one day to the next (kubeflow/README.md).
    uncached.append(EXAMPLE_GEN_ID)
  for name in uncached:
    spec["root"]["dag"]["tasks"][name]["cachingOptions"] = {
        "enableCache": False}
  return spec


def _absolute(path: str) -> str:
  """A local path made absolute, its trailing '/' kept: with {SPAN}, it
  says the span is a folder whose files are all read."""
  if "://" in path:
    return path
  return os.path.abspath(path) + ("/" if path.endswith("/") else "")


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
