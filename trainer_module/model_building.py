"""The hyperparameters a model trains with (base, auto, tuned, scaled) and
the model built and compiled with them: what run_fn, the tuner's trials,
the study and the benchmark share before fit."""

import dataclasses
import math
from typing import Any, Dict, Mapping, Optional, Tuple

import tensorflow_transform as tft

from trainer_module import distribution
from trainer_module import features
from trainer_module import hparams
from trainer_module import models
from trainer_module import precision
from trainer_module import preprocessing
from trainer_module import scaling
from trainer_module import training
from trainer_module.settings import StepOptions
from trainer_module.settings import TrainerSettings


# The logistic-regression baseline (issues #32, #42, docs/lr_baseline.md) is
# fitted by scikit-learn's Newton-CG (linear_fit), not by the model's step. It
# is still built and compiled here, as the Keras "lr" model that serves it
# and measures its validation metrics as the model's are; the compile's
# rate is never stepped with.
BASELINE_LEARNING_RATE = 1e-2
# The grid, as scikit-learn's inverse strength C (LogisticRegression's
# objective C * summed log loss + |w|^2 / 2, i.e. the mean log loss plus
# l2 |w|^2 with l2 = 1 / (2 C n) for n training examples), strongest
# first: so the grid means the same at any data size.
BASELINE_C_GRID = (0.01, 0.03, 0.1, 0.3, 1.0)


def l2_of_c(c: float, train_examples: int) -> float:
  """Our L2 (l2 * sum(W^2) on the mean loss) of scikit-learn's C."""
  return 1.0 / (2.0 * c * train_examples)


def baseline_hparams(l2: float) -> Dict[str, float]:
  """The logistic-regression baseline's hyperparameters with this L2."""
  return {"dense_lr": BASELINE_LEARNING_RATE,
          "embed_lr": BASELINE_LEARNING_RATE, "l2": l2, "r": 0.0,
          "zeta": 0.0, "warmup_epochs": 0.0}


def training_hparams(settings: TrainerSettings, tuned: Mapping[str, float],
                     train_examples: Optional[int] = None) -> Dict[str, Any]:
  """Base (auto, possibly tuned) and scaled hyperparameters, as recorded.

  The settings' auto_hparam_keys that were not tuned are derived from
  `train_examples` (scaling.auto_base_hparams; not when it is None, e.g. to
  show a tuning result); tuned values replace the others.
  """
  tuned_base = {k: v for k, v in tuned.items() if k in hparams.BY_NAME}
  auto = [k for k in settings.auto_hparam_keys
          if k not in tuned_base] if train_examples else []
  base = scaling.auto_base_hparams(
      settings.base_hparams, settings.reference_examples, train_examples,
      auto) if auto else dict(settings.base_hparams)
  base.update(tuned_base)
  scaled = scaling.scale_hparams(settings.scaling_rule, base,
                                 settings.base_batch_size,
                                 settings.batch_size)
  return {"rule": settings.scaling_rule,
          "auto": auto,
          "base_batch_size": settings.base_batch_size,
          "batch_size": settings.batch_size,
          "base": base,
          "scaled": scaled}


def model_options(settings: TrainerSettings,
                  tuned: Mapping[str, Any]) -> models.ModelOptions:
  """The configured ModelOptions with the tuned sizes among `tuned`."""
  options = settings.model_options
  sizes = {}
  if "embedding_dim" in tuned:
    sizes["embedding_dim"] = tuned["embedding_dim"]
  if "dnn_units" in tuned or "dnn_layers" in tuned:
    units = tuned.get("dnn_units", options.hidden_units[0])
    sizes["hidden_units"] = (units,) * tuned.get("dnn_layers",
                                                 len(options.hidden_units))
  return dataclasses.replace(options, **sizes)


def steps_per_epoch(train_examples: int, batch_size: int) -> int:
  """Training steps of one epoch: the last, partial batch is a step."""
  return math.ceil(train_examples / batch_size)


def build_and_compile(settings: TrainerSettings, tuned: Mapping[str, Any],
                      tf_transform_output: tft.TFTransformOutput,
                      train_examples: int, click_rate: float,
                      baseline_l2: Optional[float] = None,
                      vocab_scale: int = 1
                     ) -> Tuple[models.CTRModel, Dict[str, Any]]:
  """The configured model, compiled with the scaled (tuned) hyperparameters.

  The first half of train(); KerasTuner calls it alone to build a trial's
  model (CtrHyperModel.build), then train() with that model.

  Args:
    settings: the Trainer's settings.
    tuned: KerasTuner values: base hyperparameters (at the base batch size;
      they replace settings.base_hparams before scaling) and
      search_space.MODEL_SIZE_KEYS. Other keys are ignored.
    tf_transform_output: the Transform output (vocabulary sizes).
    train_examples: training examples (the auto base hyperparameters and
      the steps per epoch, the warmup length, follow from it).
    click_rate: the training click rate. The global bias starts at its
      log-odds, so the model is calibrated from the first step instead of
      spending its early (warmup) steps learning the base rate: short runs
      otherwise end miscalibrated by 10-20%.
    baseline_l2: build the logistic-regression baseline instead of
      settings.model, with this L2 and its own fit (baseline_hparams; the
      recorded "scaled" hyperparameters are those): on the ids of
      spec.linear_features (every count as its bucket, not log1p), with
      dense embedding updates (every row feels the L2 at every step, as in
      the objective the L2 is chosen for; its tables are 1 wide, so that is
      cheap) and Adam, without CowClip (it clips deep embeddings, which the
      baseline has none of) or a ranking loss: the default
      StepOptions but CowClip.
    vocab_scale: tables this many times larger than the vocabularies (the
      benchmark's step cost against table size; the ids still index the
      first rows). 1 everywhere else.

  Returns:
    The model and the record of what it was built with: training_hparams
    plus vocab_sizes, model_options (the precision resolved) and
    precision (the setting, the choice and, for auto, the probe's rates).
  """
  spec = settings.spec
  baseline = baseline_l2 is not None
  if baseline:
    record = {"rule": "none", "auto": [], "batch_size": settings.batch_size,
              "scaled": baseline_hparams(baseline_l2)}
  else:
    record = training_hparams(settings, tuned, train_examples)
  architecture = models.LOGISTIC_REGRESSION if baseline else settings.model
  linear = architecture == models.LOGISTIC_REGRESSION
  options = model_options(settings, tuned)
  vocab_sizes = {field: size * vocab_scale for field, size in
                 preprocessing.vocabulary_sizes(tf_transform_output, spec,
                                                linear).items()}
  # Variables made in the strategy's scope are mirrored over its replicas,
  # and Keras' fit then splits each batch over them (distribution.py).
  strategy = distribution.strategy(settings.distribution,
                                   settings.cpu_devices)
  distribution.check_batch_size(settings.batch_size,
                                strategy.num_replicas_in_sync)
  with strategy.scope():
    model = models.build_model(architecture, vocab_sizes,
                               () if linear else spec.dense, options)
    rate = min(max(click_rate, 1e-6), 1 - 1e-6)
    model.bias.assign([math.log(rate / (1 - rate))])
    training.compile_model(model, training.TrainingConfig(
        **record["scaled"],
        steps_per_epoch=steps_per_epoch(train_examples, settings.batch_size),
        step=(StepOptions(cowclip=False) if baseline else settings.step)))
  chosen, probe = precision.resolve(options.precision)
  record.update(vocab_sizes=vocab_sizes, click_rate=click_rate,
                model_options=dataclasses.asdict(
                    dataclasses.replace(options, precision=chosen)),
                precision={"setting": options.precision, "chosen": chosen,
                           **probe},
                distribution={"strategy": distribution.resolve(
                                  settings.distribution),
                              "replicas": strategy.num_replicas_in_sync})
  return model, record


def check_training_fits(vocab_sizes: Mapping[str, int], embedding_dim: int,
                        batch_size: int, train_examples: int,
                        available_bytes: int, models: int = 1) -> str:
  """Fails before training when the batch or the tables cannot fit.

  Returns a one-line summary of the table sizes for the log. The estimate
  counts the deep (d) and wide (1) tables with Adam's two moments, float32,
  once per model held at once (`models`: run_fn holds every replica until
  the export, and with --distill the student beside them).
  """
  if train_examples <= 0:
    raise ValueError("the training split is empty: nothing to train on")
  if batch_size > train_examples:
    raise ValueError(f"batch size {batch_size} is larger than the "
                     f"{train_examples} training examples: lower --batch-size "
                     "or give more data")
  rows = sum(vocab_sizes.values())
  table_bytes = rows * (embedding_dim + 1) * 4 * 3 * models
  summary = (f"{len(vocab_sizes)} embedding tables, {rows:,} rows (each with "
             f"{features.NUM_OOV_BUCKETS} OOV bucket), ~{table_bytes / 2**20:,.0f}"
             " MiB with Adam state"
             + (f" for {models} models" if models > 1 else ""))
  if table_bytes > available_bytes:
    raise ValueError(f"{summary}: more than the {available_bytes / 2**20:,.0f}"
                     " MiB of free memory; raise --min-frequency to shrink "
                     "the vocabularies or lower --embedding-dim")
  return summary
