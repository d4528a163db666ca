"""Every setting is declared once and reaches its component.

The test walks the fields of the whole PipelineConfig tree: each is a flag
or a group, or is named here as flag-less. Every flag given on `run`'s
command line lands in the config, and the Trainer's settings survive its
custom_config (JSON). A new field without a sample value below fails
here, so it cannot be forgotten.
"""

import dataclasses
import json

import pytest

from commands.cli import flags
from commands.cli import parser as cli_parser
from pipeline import config as config_lib
from trainer_module import options
from trainer_module import settings

# Fields that have no flag, on purpose (set by code, or constants of a
# dataset), with why.
FLAGLESS = {
    "dataset": "an input flag of its own (--dataset), also fixed into the "
               "Trainer's settings",
    "data": "an input flag of its own",
    "output": "an input flag of its own",
    "dcnv2_experts": "the reference's 4",
    "embedding_stddev": "the paper's 1e-2",
    "dense_initializer": "the reference's glorot_normal",
    "base_batch_size": "the dataset's",
    "reference_examples": "the dataset's",
    "stop_after_tuner": "set by the `tune` command",
    "schema_root": "set by the Kubeflow spec",
    "local_metadata": "set by the Kubeflow spec",
}
# A value other than the default for every flag, as typed on the command
# line, and the value the config must then hold. `run` offers all but the
# Kubeflow-only ones.
SAMPLES = {
    "min_frequency": ("7", 7),
    "eval_fraction": ("0.3", 0.3),
    "split": ("sequential", "sequential"),
    "max_bad_fraction": ("0.01", 0.01),
    "skip_foreign_files": (None, True),
    "span": ("3", "3"),
    "model": ("dcnv2", "dcnv2"),
    "batch_size": ("4096", 4096),
    "epochs": ("3", 3),
    "scaling_rule": ("sqrt", "sqrt"),
    "hparams": (None, {"zeta": 1e-3}),  # --zeta 1e-3: see hparam flags.
    "auto_hparams": (None, False),
    "cowclip": (None, False),
    "cowclip_variant": ("reference", "reference"),
    "embedding_update": ("sparse", "sparse"),
    "dense_optimizer": ("shampoo", "shampoo"),
    "precondition_every": ("5", 5),
    "rank_loss_weight": ("0.5", 0.5),
    "embedding_dim": ("16", 16),
    "hidden_units": ("64,32", (64, 32)),
    "cross_layers": ("2", 2),
    "dcnv2_low_rank": ("8", 8),
    "precision": ("mixed_bfloat16", "mixed_bfloat16"),
    "activation": ("smelu", "smelu"),
    "smelu_beta": ("0.5", 0.5),
    "frequency_field": ("C6", "C6"),
    "frequency_thresholds": ("10,1000", (10, 1000)),
    "negative_sampling_rate": ("0.5", 0.5),
    "replicas": ("2", 2),
    "push": ("single", "single"),
    "serve": ("model", "model"),
    "distill": (None, True),
    "warm_start": (None, False),
    "distill_label_weight": ("0.25", 0.25),
    "distribution": ("none", "none"),
    "cpu_devices": ("2", 2),
    "seed": ("5", 5),
    "baseline_rows": ("500000", 500_000),
    "tune": (None, True),
    "tuner": ("bayesian", "bayesian"),
    "trials": ("3", 3),
    "search_space": None,  # A file: test_tune reads one.
    "tune_model_size": (None, True),
    "hparams_from": None,  # A tuning result: test_tune resolves one.
    "min_auc": ("0.6", 0.6),
    "calibration_band": ("0.8,1.25", (0.8, 1.25)),
    "max_auc_drop": ("0.01", 0.01),
    "max_logloss_increase": ("0.01", 0.01),
    "max_auc_below_lr": ("0.02", 0.02),
    "slice_features": ("C1,C2", ("C1", "C2")),
    "min_slice_size": ("50", 50),
    "max_pd": ("0.1", 0.1),
    "dag_runner": ("local", "local"),
    "beam_args": ("--direct_num_workers=2", (
        "--runner=FnApiRunner", "--direct_running_mode=in_memory",
        "--sdk_container_image=apache/beam_python3.10_sdk",
        "--direct_num_workers=2")),
    "gpus": None,  # compile-kubeflow: test_compile_kubeflow.
    "gpu_type": None,
}


def _walk(settings_class, path=()):
  """(path, field) of every field in the tree under `settings_class`."""
  for field in dataclasses.fields(settings_class):
    yield path + (field.name,), field
    if options.GROUP in field.metadata:
      yield from _walk(field.metadata[options.GROUP].settings,
                       path + (field.name,))


def _get(config, path):
  for name in path:
    config = getattr(config, name)
  return config


def test_every_field_is_a_flag_a_group_or_named_flagless():
  leaves = {path[-1] for path, field in _walk(config_lib.PipelineConfig)
            if options.GROUP not in field.metadata}
  with_flags = {path[-1] for path, field in _walk(config_lib.PipelineConfig)
                if options.OPTION in field.metadata}
  assert leaves - with_flags == set(FLAGLESS)
  assert with_flags == set(SAMPLES), (
      "every flag needs a sample value in SAMPLES")


def test_names_are_unique_so_flat_names_reach_one_field():
  names = flags.setting_names()
  repeated = {n for n in names if names.count(n) > 1}
  assert repeated == {"dataset"}  # Fixed into the Trainer's settings.


@pytest.mark.parametrize("name", sorted(n for n, s in SAMPLES.items() if s))
def test_each_flag_of_run_lands_in_its_field(name):
  text, expected = SAMPLES[name]
  paths = {path[-1]: path for path, _ in _walk(config_lib.PipelineConfig)}
  field = dict((p[-1], f) for p, f in _walk(config_lib.PipelineConfig))[name]
  option = field.metadata[options.OPTION]
  if option.keys:
    argv = ["--zeta", "1e-3"]
  else:
    flag = option.flag_of(name, options.default_of(field))
    argv = [flag] if text is None else [f"{flag}={text}"]
  needs = {"max_pd": ["--replicas", "2"], "distill": ["--replicas", "2"],
           "smelu_beta": ["--activation", "smelu"],
           "tuner": ["--tune"], "trials": ["--tune"],
           "tune_model_size": ["--tune"]}.get(name, [])
  args = cli_parser.build_parser().parse_args(
      ["run", "--dataset", "criteo", "--data", "d", "--output", "o"] + argv +
      needs)
  config = flags.config_from_args(args)
  assert _get(config, paths[name]) == expected
  assert expected != options.default_of(field)


def test_the_trainers_settings_survive_its_custom_config():
  argv = ["run", "--dataset", "criteo", "--data", "d", "--output", "o"]
  trainer_fields = {p[-1] for p, _ in _walk(settings.TrainerSettings)}
  for name in sorted(trainer_fields & set(SAMPLES)):
    text, _ = SAMPLES[name]
    if name == "hparams":
      argv += ["--zeta", "1e-3"]
      continue
    field = dict((p[-1], f) for p, f in _walk(settings.TrainerSettings))[name]
    flag = field.metadata[options.OPTION].flag_of(name,
                                                   options.default_of(field))
    argv += [flag] if text is None else [f"{flag}={text}"]
  trainer = flags.config_from_args(cli_parser.build_parser().parse_args(
      argv)).trainer
  custom_config = json.loads(json.dumps(trainer.to_custom_config()))
  assert settings.TrainerSettings.from_custom_config(custom_config) == trainer
  assert trainer != settings.TrainerSettings(dataset="criteo")


def test_commands_offer_their_own_defaults():
  study = cli_parser.build_parser().parse_args(
      ["study", "--dataset", "criteo", "--data", "d", "--output", "o"])
  assert flags.config_from_args(study).trainer.epochs == 1
  run = cli_parser.build_parser().parse_args(
      ["run", "--dataset", "criteo", "--data", "d", "--output", "o"])
  assert flags.config_from_args(run).trainer.epochs == settings.DEFAULT_EPOCHS
  with pytest.raises(SystemExit):  # The study's axes set the rule.
    cli_parser.build_parser().parse_args(
        ["study", "--dataset", "criteo", "--data", "d", "--output", "o",
         "--scaling-rule", "sqrt"])
  with pytest.raises(ValueError, match="unknown settings"):
    flags.add_settings(cli_parser.build_parser(), defaults={"epoch": 1})
