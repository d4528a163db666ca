"""The flags of `study`, declared apart from what runs it
(commands.experiments.study) so that parsing them imports no TensorFlow.
"""

import argparse

from commands.cli import flags
from trainer_module import scaling
from trainer_module import settings

DEFAULT_BATCH_SIZES = (1024, 4096, 16384, 65536)
DEFAULT_RULES = ("none", "sqrt", "linear", "n2-lambda", "cowclip")
# The settings (or groups) every run of a study shares, offered as flags.
SHARED_SETTINGS = ("min_frequency", "eval_fraction", "epochs", "hparams",
                   "auto_hparams", "step", "model_options",
                   "frequency_thresholds", "negative_sampling_rate",
                   "replicas", "push", "distill", "distill_label_weight",
                   "distribution", "cpu_devices", "baseline_rows")


def add_arguments(parser: argparse.ArgumentParser) -> None:
  """The `study` subcommand's flags: its axes, and the settings every run
  shares."""
  parser.set_defaults(handler="commands.experiments.study.main")
  flags.add_input_arguments(parser, "DIR for the pipeline, the exported runs, "
                            "the log, the parsed training rows (read again "
                            "by the next study of the same data), and, "
                            "without --results, study.csv/md, "
                            "the figures and the baseline (re-use it to "
                            "resume)")
  parser.add_argument(
      "--results", metavar="RESULTS_DIR",
      help="keep study.csv/md, the figures, the settings and the baseline "
      "here instead of in DIR (e.g. a folder under docs/ committed as runs "
      "finish: a study resumes from it on any machine, retraining only the "
      "missing runs; rows of other data are refused)")
  parser.add_argument("--batch-sizes", type=flags.int_list,
                      default=list(DEFAULT_BATCH_SIZES))
  parser.add_argument("--rules",
                      type=flags.choice_list(scaling.RULES, "scaling rule"),
                      default=list(DEFAULT_RULES),
                      help=f"comma-separated, from {','.join(scaling.RULES)}")
  parser.add_argument("--models",
                      type=flags.choice_list(settings.MODELS, "model"),
                      default=[settings.DEFAULT_MODEL],
                      help=f"comma-separated, from {','.join(settings.MODELS)}")
  parser.add_argument("--seeds", type=flags.int_list,
                      default=[1234])
  parser.add_argument("--ablation", action="store_true",
                      help="also run the cowclip rule without clipping")
  # The axes above set the model, batch size, rule, CowClip and seed.
  flags.add_settings(parser, only=SHARED_SETTINGS,
                     skip=("cowclip", "max_pd"), defaults={"epochs": 1})
