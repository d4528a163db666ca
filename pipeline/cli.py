"""Command line: `python -m pipeline {run,generate} ...`.

The CLI only parses arguments into a PipelineConfig and picks a runner.
Exit status: 0 done (model pushed), 1 failed (bad input, anomalies, a
component error), 2 usage error, 3 finished but the model was not blessed
and so not pushed (schedulers must see the difference).
"""

import os

# tf.Transform sets TF_USE_LEGACY_KERAS=1 when it is unset, after which
# tf.keras flips between Keras 3 and tf_keras with import order. Pin Keras 3
# before anything imports TensorFlow.
os.environ["TF_USE_LEGACY_KERAS"] = "0"

# pylint: disable=g-import-not-at-top,wrong-import-position
import argparse
import logging
import sys
from typing import List, Optional

EXIT_FAILED = 1
EXIT_NOT_PUSHED = 3

# CLI flag -> base hyperparameter key (trainer_module.features specs).
HPARAM_FLAGS = {"dense-lr": "dense_lr", "embed-lr": "embed_lr", "l2": "l2",
                "r": "r", "zeta": "zeta", "warmup-epochs": "warmup_epochs"}


def _add_run_arguments(parser: argparse.ArgumentParser) -> None:
  from trainer_module import features
  from trainer_module import models
  from trainer_module import scaling
  from pipeline import config as config_lib
  parser.add_argument("--dataset", required=True,
                      choices=sorted(features.DATASETS))
  parser.add_argument("--data", required=True,
                      help="raw file, or directory of raw files")
  parser.add_argument("--output", required=True,
                      help="DIR for the pipeline root, metadata.sqlite and "
                      "serving/<version>/ (re-use it to reuse cached results)")
  parser.add_argument("--model", default="deepfm", choices=models.MODELS)
  parser.add_argument("--batch-size", type=int, default=1024)
  parser.add_argument("--epochs", type=int, default=1)
  parser.add_argument("--runner", default="beam", choices=config_lib.RUNNERS,
                      help="beam: BeamDagRunner (default); local: "
                      "LocalDagRunner")
  parser.add_argument("--scaling-rule", default=scaling.DEFAULT_RULE,
                      choices=scaling.RULES)
  parser.add_argument("--no-cowclip", dest="cowclip", action="store_false",
                      help="train without CowClip gradient clipping")
  parser.add_argument("--min-frequency", type=int, default=None,
                      help="vocabulary frequency threshold (default: per "
                      "dataset, Criteo 10, Avazu 2)")
  parser.add_argument("--eval-fraction", type=float, default=None,
                      help="share of rows in eval (default: Criteo 0.1, "
                      "Avazu 0.2)")
  parser.add_argument("--split", default="hash", choices=config_lib.SPLITS,
                      help="hash: deterministic per row; sequential: the "
                      "last rows are eval (Criteo is in time order)")
  parser.add_argument("--max-bad-fraction", type=float, default=0.001,
                      help="malformed rows above this share fail the run")
  parser.add_argument("--min-auc", type=float,
                      default=config_lib.DEFAULT_MIN_AUC,
                      help="AUC floor (overall slice) for pushing")
  parser.add_argument("--beam-arg", dest="beam_args", action="append",
                      default=None, help="extra Beam pipeline argument "
                      "(repeatable), e.g. --beam-arg=--direct_num_workers=2")
  for flag, key in HPARAM_FLAGS.items():
    parser.add_argument(f"--{flag}", dest=key, type=float, default=None,
                        help=f"override the base {key} (at the dataset's "
                        "base batch size; the scaling rule maps it)")


def config_from_args(args: argparse.Namespace):
  """PipelineConfig from parsed `run` arguments."""
  from pipeline.config import PipelineConfig
  overrides = {key: getattr(args, key) for key in HPARAM_FLAGS.values()
               if getattr(args, key) is not None}
  extra = {"beam_args": tuple(args.beam_args)} if args.beam_args else {}
  return PipelineConfig(
      dataset=args.dataset, data=args.data, output=args.output,
      model=args.model, batch_size=args.batch_size, epochs=args.epochs,
      runner=args.runner, scaling_rule=args.scaling_rule,
      cowclip=args.cowclip, hparams=overrides,
      min_frequency=args.min_frequency, eval_fraction=args.eval_fraction,
      split=args.split, max_bad_fraction=args.max_bad_fraction,
      min_auc=args.min_auc, **extra)


def root_cause(error: BaseException) -> BaseException:
  """The innermost exception: the one that says what went wrong."""
  while error.__cause__ is not None or (
      error.__context__ is not None and not error.__suppress_context__):
    error = error.__cause__ or error.__context__
  return error


def _run(args: argparse.Namespace) -> int:
  from pipeline import runner
  config = config_from_args(args)
  try:
    outcome = runner.run_pipeline(config)
  except Exception as error:  # pylint: disable=broad-except
    cause = root_cause(error)
    logging.debug("pipeline failed", exc_info=error)
    print(f"\nerror: the pipeline failed: {type(cause).__name__}: {cause}",
          file=sys.stderr)
    print(f"(artifacts already produced are kept under {config.output}; "
          "re-run with the same --output to resume from the cache)",
          file=sys.stderr)
    return EXIT_FAILED
  print(outcome.describe())
  return 0 if outcome.pushed else EXIT_NOT_PUSHED


def _generate(args: argparse.Namespace) -> int:
  from pipeline import generate
  summary = generate.write_synthetic(args.format, args.rows, args.seed,
                                     args.out)
  print(summary)
  return 0


def build_parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
      prog="python -m pipeline",
      description="CowClip CTR training pipeline (TFX).")
  commands = parser.add_subparsers(dest="command", required=True)
  run = commands.add_parser("run", help="run the whole pipeline locally")
  _add_run_arguments(run)
  run.set_defaults(handler=_run)
  gen = commands.add_parser(
      "generate", help="write synthetic Criteo/Avazu-layout raw data")
  gen.add_argument("--format", required=True, choices=("criteo", "avazu"))
  gen.add_argument("--rows", type=int, required=True)
  gen.add_argument("--seed", type=int, default=0)
  gen.add_argument("--out", required=True, help="output file path")
  gen.set_defaults(handler=_generate)
  return parser


def main(argv: Optional[List[str]] = None) -> int:
  logging.basicConfig(level=logging.INFO,
                      format="%(asctime)s %(levelname)s %(message)s")
  args = build_parser().parse_args(argv)
  try:
    return args.handler(args)
  except ValueError as error:  # Bad arguments found while building config.
    print(f"error: {error}", file=sys.stderr)
    return EXIT_FAILED
