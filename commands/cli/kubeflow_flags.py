"""The flags of the Kubeflow commands: `compile-kubeflow` and `run-compiled`.

Declared apart from their handlers (commands.runs.kfp), so that parsing
them imports no TFX.
"""

import argparse
from typing import Any

from commands.cli import beam_flags
from commands.cli import flags


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
  beam_flags.add_beam_arguments(parser, "PIPELINE_ROOT", "--image")
  parser.set_defaults(handler="commands.runs.kfp.compile_spec",
                      uses_devices=False)
  return parser


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
  parser.set_defaults(handler="commands.runs.kfp.run_compiled_spec",
                      uses_devices=False)
  return parser
