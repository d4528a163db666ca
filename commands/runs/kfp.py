"""The Kubeflow commands' handlers: `compile-kubeflow` and `run-compiled`.

compile-kubeflow takes `run`'s flags plus where the pods find the data, the
image and the Beam runner (commands.cli.kubeflow_flags), and writes the KFP
v2 spec (kubeflow.compiler); run-compiled runs such a spec here
(kubeflow.run_compiled). The Kubeflow code, image and README are in
kubeflow/.
"""

import argparse
import sys

from commands.cli import beam_flags
from kubeflow import compiler
from kubeflow import run_compiled
from pipeline import progress


def compile_spec(args: argparse.Namespace) -> int:
  """`compile-kubeflow`: writes the spec and says what it holds."""
  config = beam_flags.config_from_args(args, image=args.image)
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


def run_compiled_spec(args: argparse.Namespace) -> int:
  """`run-compiled`: runs a spec here, task by task."""
  try:
    result = run_compiled.run_spec(args.spec, args.root, args.run_id,
                                   enable_cache=args.cache)
  except (run_compiled.SpecError, run_compiled.TaskFailed) as error:
    print(f"\nerror: {error}", file=sys.stderr)
    return progress.EXIT_FAILED
  print(result.describe())
  return 0
