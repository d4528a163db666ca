"""A/B timing of the Evaluator executor, CPU seconds around its Do() only.

The executor is the pipeline's own (components.evaluator.EvaluatorExecutor,
metrics in batches), or TFX's with --tfx (TFMA's per-example evaluator), with
the pipeline's Criteo schema and the pipeline's eval config (pipeline.pipeline.create_eval_config, Criteo
defaults), run on the eval split of an ExampleGen output:

  PYTHONPATH=. .venv/bin/python docs/scripts/eval_ab.py MODEL EXAMPLES OUT \
      [--baseline MODEL] [--tfx] [--profile FILE.prof] \
      [--beam-arg=--ARG=VALUE ...]

MODEL is a Trainer output (holding Format-Serving/). With --profile the
run is under cProfile (FnApiRunner in memory, one worker: the whole pipeline
runs in this process, so the profile sees all of it). On a shared machine
CPU seconds compare; wall seconds mostly measure the queue.
"""

import argparse
import cProfile
import json
import os
import resource
import shutil
import time

from tfx.types import artifact_utils
from tfx.types import standard_artifacts
from tfx.types import standard_component_specs as specs
from tfx.utils import proto_utils

from data_ab import cpu_seconds  # docs/scripts/, this script's directory.


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("model")
  parser.add_argument("examples")
  parser.add_argument("out")
  parser.add_argument("--baseline")
  parser.add_argument("--tfx", action="store_true",
                      help="TFX's Evaluator executor instead of the "
                      "pipeline's")
  parser.add_argument("--profile")
  parser.add_argument("--beam-arg", dest="beam_args", action="append",
                      help="replaces the pipeline's direct-runner arguments "
                      "(repeatable), as `python -m pipeline run` does")
  args = parser.parse_args()
  # pylint: disable=g-import-not-at-top
  from tfx.components.evaluator import executor as tfx_evaluator
  from components import baseline as baseline_lib
  from components import evaluator as evaluator_lib
  from pipeline import config as config_lib
  from pipeline import pipeline as pipeline_lib

  shutil.rmtree(args.out, ignore_errors=True)
  config = config_lib.PipelineConfig.from_fields(
      dataset="criteo", data=args.examples, output=args.out,
      **({"beam_args": tuple(args.beam_args)} if args.beam_args else {}))
  eval_config = pipeline_lib.create_eval_config(config)

  def model_artifact(uri):
    model = standard_artifacts.Model()
    model.uri = uri
    return model

  examples = standard_artifacts.Examples()
  examples.uri = args.examples
  examples.split_names = artifact_utils.encode_split_names(["train", "eval"])
  schema = standard_artifacts.Schema()
  schema.uri = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                            "..", "schema", "criteo")
  inputs = {specs.EXAMPLES_KEY: [examples], specs.SCHEMA_KEY: [schema],
            specs.MODEL_KEY: [model_artifact(args.model)]}
  if args.baseline:
    found = model_artifact(args.baseline)
    found.set_int_custom_property(baseline_lib.FOUND_PROPERTY, 1)
    inputs[specs.BASELINE_MODEL_KEY] = [found]
  evaluation = standard_artifacts.ModelEvaluation()
  evaluation.uri = os.path.join(args.out, "evaluation")
  blessing = standard_artifacts.ModelBlessing()
  blessing.uri = os.path.join(args.out, "blessing")
  os.makedirs(blessing.uri)
  executor = (tfx_evaluator.Executor if args.tfx
              else evaluator_lib.EvaluatorExecutor)
  run = executor(
      executor.Context(
          beam_pipeline_args=list(config.runner.beam_args),
          tmp_dir=os.path.join(args.out, ".tmp"), unique_id="ab"))
  properties = {specs.EVAL_CONFIG_KEY: proto_utils.proto_to_json(eval_config),
                specs.EXAMPLE_SPLITS_KEY: json.dumps(["eval"])}

  def do():
    run.Do(inputs, {specs.EVALUATION_KEY: [evaluation],
                    specs.BLESSING_KEY: [blessing]}, properties)

  with open(os.path.join(args.examples,
                         "raw_example_gen_summary.json")) as f:
    rows = json.load(f)["split_rows"]["eval"]
  cpu, wall = cpu_seconds(), time.time()
  if args.profile:
    cProfile.runctx("do()", globals(), {"do": do}, args.profile)
  else:
    do()
  cpu, wall = cpu_seconds() - cpu, time.time() - wall
  print(f"evaluator: eval rows {rows} cpu_s {cpu:.1f} rows_per_cpu_s "
        f"{rows / cpu:.0f} wall_s {wall:.1f} max_rss_MB "
        f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} "
        f"blessed {sorted(os.listdir(blessing.uri))}")


if __name__ == "__main__":
  main()
