"""The flags of the pipeline commands and the PipelineConfig they build.

`run`, `tune` and `compile-kubeflow` share add_run_arguments; `study` shares
the input flags and the base-hyperparameter flags.
"""

import argparse
from typing import Any, Callable, Dict, List, Sequence

from commands import tune
from pipeline import config as config_lib
from pipeline.config import PipelineConfig
from trainer_module import features
from trainer_module import hparams
from trainer_module import scaling
from trainer_module import settings
from trainer_module import tuner


def _floats(text: str) -> tuple:
  return tuple(float(x) for x in text.split(","))


def _ints(text: str) -> tuple:
  return tuple(int_list(text))


def int_list(text: str) -> List[int]:
  """'1024,8192' -> [1024, 8192] (argparse type), positive ints only."""
  try:
    values = [int(v) for v in text.split(",") if v.strip()]
  except ValueError:
    raise argparse.ArgumentTypeError(
        f"expected comma-separated integers, got {text!r}") from None
  if not values or any(v <= 0 for v in values):
    raise argparse.ArgumentTypeError(
        f"expected positive integers, got {text!r}")
  return values


def choice_list(choices: Sequence[str],
                what: str) -> Callable[[str], List[str]]:
  """An argparse type: 'a,b' -> ['a', 'b'], each one of `choices`."""
  def parse(text: str) -> List[str]:
    values = [v.strip() for v in text.split(",") if v.strip()]
    unknown = [v for v in values if v not in choices]
    if not values or unknown:
      raise argparse.ArgumentTypeError(
          f"unknown {what} {unknown or text!r}; choose from "
          f"{','.join(choices)}")
    return values
  return parse


def _names(text: str) -> tuple:
  return tuple(x.strip() for x in text.split(",") if x.strip())


# CLI flag (dest) -> ModelOptions field; unset flags keep the defaults.
MODEL_OPTION_FLAGS = ("embedding_dim", "hidden_units", "cross_layers",
                      "dcnv2_low_rank", "precision")


def add_input_arguments(parser: argparse.ArgumentParser, output_help: str,
                        data_help: str = "raw file, or directory of raw "
                        "files", **output: Any) -> None:
  """--dataset, --data and --output, shared by every pipeline command
  (`output`: more add_argument keywords of --output, e.g. its dest)."""
  parser.add_argument("--dataset", required=True,
                      choices=sorted(features.DATASETS))
  parser.add_argument("--data", required=True, help=data_help)
  parser.add_argument("--output", required=True, help=output_help, **output)


def add_run_arguments(parser: argparse.ArgumentParser,
                      local: bool = True) -> None:
  """The flags of `run` (also `tune`); without the input flags and
  --runner (`local` False) those of `compile-kubeflow`, which declares its
  own input flags."""
  if local:
    add_input_arguments(parser, "DIR for the pipeline root, metadata.sqlite "
                        "and serving/<version>/ (re-use it to reuse cached "
                        "results)")
    parser.add_argument("--runner", default="beam",
                        choices=config_lib.RUNNERS,
                        help="beam: BeamDagRunner (default); local: "
                        "LocalDagRunner")
  parser.add_argument("--model", default=settings.DEFAULT_MODEL,
                      choices=settings.MODELS)
  parser.add_argument("--batch-size", type=int,
                      default=settings.DEFAULT_BATCH_SIZE)
  parser.add_argument("--epochs", type=int, default=settings.DEFAULT_EPOCHS,
                      help="most training epochs; early stopping on a "
                      "validation slice of the train split ends sooner and "
                      "keeps the best epoch")
  parser.add_argument("--scaling-rule", default=scaling.DEFAULT_RULE,
                      choices=scaling.RULES)
  parser.add_argument("--no-cowclip", dest="cowclip", action="store_false",
                      help="train without CowClip gradient clipping")
  parser.add_argument("--min-frequency", type=int, default=None,
                      help="vocabulary frequency threshold (default: the "
                      "dataset's for the data's size: Criteo 10 at its 41M "
                      "training rows, proportionally fewer, at least 2; "
                      "Avazu 2)")
  parser.add_argument("--eval-fraction", type=float, default=None,
                      help="share of rows in eval (default: Criteo 0.1, "
                      "Avazu 0.2)")
  parser.add_argument("--split", default="hash",
                      choices=features.SPLIT_MODES,
                      help="hash: deterministic per row; sequential: the "
                      "last rows are eval (Criteo is in time order)")
  parser.add_argument("--max-bad-fraction", type=float,
                      default=features.DEFAULT_MAX_BAD_FRACTION,
                      help="malformed rows above this share fail the run")
  parser.add_argument("--skip-foreign-files", action="store_true",
                      help="skip the files of --data that are not the "
                      "dataset's training data (an unlabelled test file, a "
                      "readme, an archive), naming them, instead of failing")
  parser.add_argument("--min-auc", type=float,
                      default=config_lib.DEFAULT_MIN_AUC,
                      help="AUC floor (overall slice) for pushing")
  parser.add_argument("--calibration-band", type=_floats, default=None,
                      metavar="LOW,HIGH", help="allowed calibration (mean "
                      "prediction / mean label), overall slice (default "
                      f"{','.join(map(str, config_lib.DEFAULT_CALIBRATION_BAND))})")
  parser.add_argument("--max-auc-drop", type=float,
                      default=config_lib.DEFAULT_MAX_AUC_DROP,
                      help="allowed AUC drop vs the last blessed model")
  parser.add_argument("--max-logloss-increase", type=float,
                      default=config_lib.DEFAULT_MAX_LOGLOSS_INCREASE,
                      help="allowed log-loss rise vs the last blessed model")
  parser.add_argument("--max-auc-below-lr", type=float,
                      default=config_lib.DEFAULT_MAX_AUC_BELOW_LR,
                      help="allowed AUC shortfall vs the logistic-regression "
                      "baseline trained beside the model")
  parser.add_argument("--no-lr-check", dest="max_auc_below_lr",
                      action="store_const", const=None,
                      help="do not gate on the logistic-regression baseline "
                      "(it is still trained and reported)")
  parser.add_argument("--no-auto-hparams", dest="auto_hparams",
                      action="store_false",
                      help="use the published base dense_lr, embed_lr and l2 "
                      "instead of deriving them from the training set's size")
  parser.add_argument("--slice-features", type=_names, default=None,
                      metavar="F1,F2", help="categorical features to slice "
                      "the evaluation by (default: per dataset)")
  parser.add_argument("--min-slice-size", type=int,
                      default=config_lib.DEFAULT_MIN_SLICE_SIZE)
  parser.add_argument("--frequency-field", default=settings.ALL_FIELDS,
                      help="'all' or one categorical feature: what the "
                      "id-frequency slice buckets examples by")
  parser.add_argument("--frequency-thresholds", type=_ints, default=None,
                      metavar="RARE,FREQUENT", help="training-count "
                      "boundaries of the rare/medium/frequent buckets "
                      "(default "
                      f"{','.join(map(str, settings.DEFAULT_FREQUENCY_THRESHOLDS))})")
  parser.add_argument("--embedding-update",
                      default=settings.DEFAULT_EMBEDDING_UPDATE,
                      choices=settings.EMBEDDING_UPDATES,
                      help="dense: L2 and Adam on every row every step (the "
                      "paper); sparse: only rows of ids in the batch")
  add_bias_constraint_arguments(parser)
  parser.add_argument("--cowclip-variant",
                      default=settings.DEFAULT_COWCLIP_VARIANT,
                      choices=settings.COWCLIP_VARIANTS,
                      help="paper: cnt*max(r*||w||, zeta); reference: the "
                      "authors' code, cnt*r*max(||w||, r*sqrt(d)*zeta)")
  parser.add_argument("--embedding-dim", type=int, default=None)
  parser.add_argument("--hidden-units", type=_ints, default=None,
                      metavar="U1,U2,...")
  parser.add_argument("--cross-layers", type=int, default=None)
  parser.add_argument("--dcnv2-low-rank", type=int, default=None,
                      help="DCNv2 mixture of low-rank experts of this rank")
  parser.add_argument("--precision", default=None, choices=settings.PRECISIONS,
                      help="dtype policy of the DNN/cross layers (default "
                      "float32; mixed_bfloat16 pays only with bf16 matrix "
                      "units, see docs/benchmark.md)")
  add_activation_arguments(parser)
  add_negative_sampling_argument(parser)
  parser.add_argument("--beam-arg", dest="beam_args", action="append",
                      default=None, help="extra Beam pipeline argument "
                      "(repeatable), e.g. --beam-arg=--direct_num_workers=2")
  add_hparam_arguments(parser, "the scaling rule maps it")
  _add_tuning_arguments(parser)
  parser.add_argument("--seed", type=int, default=None,
                      help="seed the Trainer and the Tuner (initialisation, "
                      "data order, random ops; files read in a fixed "
                      "order): two runs with the same seed on the same "
                      "machine serve the same predictions (default: "
                      "unseeded)")
  add_replica_arguments(parser)
  add_distribution_arguments(parser, cpu_devices=local)


def add_distribution_arguments(parser: argparse.ArgumentParser,
                               cpu_devices: bool = True) -> None:
  """--distribution and (not for compile-kubeflow) --cpu-devices: `run`,
  `tune`, `study` and `benchmark`."""
  group = parser.add_argument_group(
      "devices", "data-parallel training: each step's batch is split over "
      "the replicas and gives the one-device update (exact CowClip)")
  group.add_argument("--distribution", default=settings.DEFAULT_DISTRIBUTION,
                     choices=settings.DISTRIBUTIONS,
                     help="auto (default): multi-worker when TF_CONFIG lists "
                     "several workers, mirrored over all GPUs (or logical "
                     "CPU devices) when there are several, else none")
  if cpu_devices:
    group.add_argument("--cpu-devices", type=int, default=1, metavar="N",
                       help="split the CPU into N logical devices (mirrored "
                       "training without GPUs; default 1)")


def distribution_settings(args: argparse.Namespace) -> Dict[str, Any]:
  """The distribution and cpu_devices settings of parsed flags."""
  return {"distribution": args.distribution,
          "cpu_devices": getattr(args, "cpu_devices", 1)}


def add_replica_arguments(parser: argparse.ArgumentParser,
                          gate: bool = True) -> None:
  """--replicas, --push and, with the `gate` (run, not study), --max-pd."""
  replicas = parser.add_argument_group(
      "replicas", "reproducibility: the model trained several times with "
      "different seeds, their Prediction Difference (PD) reported by slice "
      "(docs/production_pd.md)")
  replicas.add_argument("--replicas", type=int, default=1,
                        help="train the model this many times (default 1)")
  replicas.add_argument("--push", default=settings.DEFAULT_PUSH,
                        choices=settings.PUSH_MODES,
                        help="with replicas, serve their mean probability "
                        "(ensemble, default) or replica 0 (single)")
  if gate:
    replicas.add_argument("--max-pd", type=float, default=None,
                          help="gate: the replicas' PD on the overall slice "
                          "may be at most this (default: no check)")


def add_activation_arguments(parser: argparse.ArgumentParser) -> None:
  """--activation and --smelu-beta (`run` and `study`)."""
  parser.add_argument("--activation", default=None,
                      choices=settings.ACTIVATIONS,
                      help="activation of the DNN layers (default relu; "
                      "smelu: the smooth ReLU, more reproducible retrains)")
  parser.add_argument("--smelu-beta", type=float, default=None,
                      help="SmeLU's half-width beta (default "
                      f"{settings.DEFAULT_SMELU_BETA}); needs "
                      "--activation smelu")


def activation_options(args: argparse.Namespace) -> Dict[str, Any]:
  """The ModelOptions fields --activation and --smelu-beta set."""
  if args.smelu_beta is not None and args.activation != "smelu":
    raise ValueError("--smelu-beta only applies with --activation smelu")
  return {name: getattr(args, name) for name in ("activation", "smelu_beta")
          if getattr(args, name) is not None}


def add_negative_sampling_argument(parser: argparse.ArgumentParser) -> None:
  """--negative-sampling-rate (`run`, `tune` and `study`)."""
  parser.add_argument("--negative-sampling-rate", type=float,
                      default=settings.DEFAULT_NEGATIVE_SAMPLING_RATE,
                      metavar="P", help="keep each non-click of the train "
                      "split with probability P (0 < P <= 1, default "
                      "%(default)g: all), decided by a hash of the example; "
                      "kept non-clicks weigh 1/P in training. The eval "
                      "split is never sampled")


def add_bias_constraint_arguments(parser: argparse.ArgumentParser) -> None:
  """--bias-constraints and --bias-constraint-lr (run, tune and study)."""
  parser.add_argument("--bias-constraints", type=_names, default=(),
                      metavar="F1,F2", help="constrain the calibration bias "
                      "(label - prediction) of every bucket of these slices "
                      "in training: categorical features (top ids + other) "
                      f"or '{settings.PREDICTED_CTR}' (batch deciles)")
  parser.add_argument("--bias-constraint-lr", type=float,
                      default=settings.DEFAULT_BIAS_CONSTRAINT_LR,
                      help="gradient-ascent step of the constraints' "
                      "multipliers")


def add_hparam_arguments(parser: argparse.ArgumentParser,
                         mapped_by: str) -> None:
  """--dense-lr ... --warmup-epochs: overrides of the base hyperparameters
  (hparams.BASE_HPARAMS), for `run`, `tune`, `compile-kubeflow` and
  `study`."""
  for hparam in hparams.BASE_HPARAMS:
    parser.add_argument(f"--{hparam.flag}", dest=hparam.name, type=float,
                        default=None, help=f"{hparam.help}: overrides the "
                        "dataset's base value (at its base batch size; "
                        f"{mapped_by})")


def hparam_overrides(args: argparse.Namespace) -> Dict[str, float]:
  """The base hyperparameters given on the command line."""
  return {h.name: getattr(args, h.name) for h in hparams.BASE_HPARAMS
          if getattr(args, h.name) is not None}


def _add_tuning_arguments(parser: argparse.ArgumentParser) -> None:
  tuning = parser.add_argument_group(
      "tuning", "KerasTuner search over the BASE hyperparameters (at the "
      "base batch size); trials train at --batch-size with the scaling rule")
  tuning.add_argument("--tune", action="store_true",
                      help="insert the Tuner before the Trainer, which then "
                      "trains with the best values")
  tuning.add_argument("--trials", type=int, default=None,
                      help=f"trial budget (default {settings.DEFAULT_TRIALS})")
  tuning.add_argument("--tuner", default=None, choices=settings.TUNERS,
                      help=f"search algorithm (default "
                      f"{settings.DEFAULT_TUNER})")
  tuning.add_argument("--search-space", metavar="FILE.json", default=None,
                      help='bounds replacing the defaults, e.g. {"dense_lr": '
                      '[1e-4, 1e-2], "r": 1.0}: [low, high], choices for '
                      "sizes, one number to fix a value")
  tuning.add_argument("--tune-model-size", action="store_true",
                      help="also search embedding_dim, dnn_units, dnn_layers")
  tuning.add_argument("--hparams-from", metavar="PATH", default=None,
                      help="train with an earlier tuning result instead: a "
                      "Tuner's best_hyperparameters artifact directory or "
                      "the --output DIR of `tune`")
  # The `tune` subcommand sets it: the pipeline then ends at the Tuner.
  parser.set_defaults(tuning_job=False)


def config_from_args(args: argparse.Namespace) -> PipelineConfig:
  """PipelineConfig from parsed `run` arguments."""
  overrides = hparam_overrides(args)
  extra = {"beam_args": tuple(args.beam_args)} if args.beam_args else {}
  extra.update(_tuning_settings(args))
  if args.bias_constraints:
    extra.update(bias_constraints=args.bias_constraints,
                 bias_constraint_lr=args.bias_constraint_lr)
  for name in ("calibration_band", "frequency_thresholds"):
    if getattr(args, name) is not None:
      extra[name] = getattr(args, name)
  options = {name: getattr(args, name) for name in MODEL_OPTION_FLAGS
             if getattr(args, name) is not None}
  options.update(activation_options(args))
  return PipelineConfig(
      dataset=args.dataset, data=args.data, output=args.output,
      model=args.model, batch_size=args.batch_size, epochs=args.epochs,
      runner=args.runner, scaling_rule=args.scaling_rule,
      cowclip=args.cowclip, hparams=overrides,
      min_frequency=args.min_frequency, eval_fraction=args.eval_fraction,
      split=args.split, max_bad_fraction=args.max_bad_fraction,
      skip_foreign_files=args.skip_foreign_files,
      min_auc=args.min_auc, max_auc_drop=args.max_auc_drop,
      max_logloss_increase=args.max_logloss_increase,
      max_auc_below_lr=args.max_auc_below_lr,
      auto_hparams=args.auto_hparams,
      slice_features=args.slice_features, min_slice_size=args.min_slice_size,
      frequency_field=args.frequency_field,
      embedding_update=args.embedding_update,
      cowclip_variant=args.cowclip_variant, model_options=options,
      negative_sampling_rate=args.negative_sampling_rate,
      replicas=args.replicas, push=args.push, max_pd=args.max_pd,
      seed=args.seed, **distribution_settings(args), **extra)


def _tuning_settings(args: argparse.Namespace) -> Dict[str, Any]:
  """PipelineConfig's tuning fields from `run`/`tune` arguments.

  Reads and checks the --search-space file and the --hparams-from PATH,
  so their errors name them.
  """
  fields = {}
  if args.tuning_job or args.tune:
    fields.update(tune=True, stop_after_tuner=args.tuning_job,
                  tune_model_size=args.tune_model_size)
    if args.trials is not None:
      fields["trials"] = args.trials
    if args.tuner is not None:
      fields["tuner"] = args.tuner
    if args.search_space:
      fields["search_space"] = tuner.load_search_space(
          args.search_space, args.dataset, args.tune_model_size)
  else:
    given = [flag for flag, value in (
        ("--trials", args.trials), ("--tuner", args.tuner),
        ("--search-space", args.search_space),
        ("--tune-model-size", args.tune_model_size)) if value]
    if given:
      raise ValueError(f"{', '.join(given)} only apply with --tune")
  if args.hparams_from:
    fields["hparams_from"] = tune.resolve_hparams_dir(args.hparams_from,
                                                      args.dataset)
  return fields
