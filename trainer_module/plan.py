"""How a run trains, resolved once: the training plan.

run_fn, the tuner's trials, the study and the benchmark resolve the
settings (and a trial's tuned values) into one TrainingPlan once they know
the training rows, and everything below reads it: the input pipeline its
batch size, the model its options and precision, the step its scaled
hyperparameters and steps per epoch, the fit its strategy. Nothing below
recomputes them, so the batch size training.json reports is the one that
trained, and the warmup's length follows from the same steps per epoch.
"""

import dataclasses
from typing import Any, Dict, Mapping, Optional, Tuple

import tensorflow as tf

from trainer_module import distribution
from trainer_module import hparams as hparams_lib
from trainer_module import precision as precision_lib
from trainer_module import scaling
from trainer_module.settings import LOGISTIC_REGRESSION
from trainer_module.settings import ModelOptions
from trainer_module.settings import StepOptions
from trainer_module.settings import TrainerSettings


@dataclasses.dataclass(frozen=True)
class TrainingPlan:
  """One run's resolved training.

  Attributes:
    settings: the settings it was resolved from (epochs, replicas, serving).
    train_examples: the training part's rows.
    batch_size: the global batch (every replica's share summed).
    batch_size_reason: why that batch size: the user's, or the auto rule's
      (scaling.auto_batch_size).
    steps_per_epoch: training steps of one epoch (the warmup's length).
    hparams: the hyperparameters' record (rule, auto keys, base batch size,
      base and scaled values: scaled is what the step uses).
    model_options: the architecture, tuned sizes in, the precision chosen.
    precision: the precision setting, the choice and, for auto, the probe's
      rates.
    strategy: the tf.distribute strategy (its replicas split each batch).
  """
  settings: TrainerSettings
  train_examples: int
  batch_size: int
  batch_size_reason: str
  steps_per_epoch: int
  hparams: Mapping[str, Any]
  model_options: ModelOptions
  precision: Mapping[str, Any]
  strategy: tf.distribute.Strategy

  @property
  def scaled(self) -> Dict[str, float]:
    """The hyperparameters the step trains with (hparams.NAMES)."""
    return dict(self.hparams["scaled"])

  @property
  def step(self) -> StepOptions:
    """The step's options (the settings')."""
    return self.settings.step

  @property
  def replicas(self) -> int:
    return self.strategy.num_replicas_in_sync

  def record(self) -> Dict[str, Any]:
    """What training.json records of the plan (the hyperparameters' record
    holds the batch size)."""
    return {**self.hparams, "batch_size_reason": self.batch_size_reason,
            "steps_per_epoch": self.steps_per_epoch,
            "model_options": dataclasses.asdict(self.model_options),
            "precision": dict(self.precision),
            "distribution": {"strategy": distribution.resolve(
                                 self.settings.distribution),
                             "replicas": self.replicas}}

  def for_baseline(self, l2: float) -> "TrainingPlan":
    """The logistic-regression baseline's plan: the "lr" architecture on
    the same batches, its own hyperparameters (no scaling rule) and the
    default step without CowClip (model_building.build_and_compile)."""
    return dataclasses.replace(
        self, settings=dataclasses.replace(
            self.settings, model=LOGISTIC_REGRESSION,
            step=StepOptions(cowclip=False)),
        hparams={"rule": "none", "auto": [], "batch_size": self.batch_size,
                 "scaled": baseline_hparams(l2)})


# The logistic-regression baseline (issues #32, #42, docs/lr_baseline.md) is
# fitted by scikit-learn's Newton-CG (linear_fit), not by the model's step. It
# is still built and compiled, as the Keras "lr" model that serves it and
# measures its validation metrics as the model's are; the compile's rate is
# never stepped with.
BASELINE_LEARNING_RATE = 1e-2


def baseline_hparams(l2: float) -> Dict[str, float]:
  """The logistic-regression baseline's hyperparameters with this L2."""
  return {"dense_lr": BASELINE_LEARNING_RATE,
          "embed_lr": BASELINE_LEARNING_RATE, "l2": l2, "r": 0.0,
          "zeta": 0.0, "warmup_epochs": 0.0}


def training_hparams(settings: TrainerSettings, tuned: Mapping[str, float],
                     batch_size: int,
                     train_examples: Optional[int] = None) -> Dict[str, Any]:
  """Base (auto, possibly tuned) and scaled hyperparameters at
  `batch_size`, as recorded.

  The settings' auto_hparam_keys that were not tuned are derived from
  `train_examples` (scaling.auto_base_hparams; not when it is None, e.g. to
  show a tuning result); tuned values replace the others.
  """
  tuned_base = {k: v for k, v in tuned.items() if k in hparams_lib.BY_NAME}
  auto = [k for k in settings.auto_hparam_keys
          if k not in tuned_base] if train_examples else []
  base = scaling.auto_base_hparams(
      settings.base_hparams, settings.reference_examples, train_examples,
      auto) if auto else dict(settings.base_hparams)
  base.update(tuned_base)
  scaled = scaling.scale_hparams(settings.scaling_rule, base,
                                 settings.base_batch_size, batch_size)
  return {"rule": settings.scaling_rule,
          "auto": auto,
          "base_batch_size": settings.base_batch_size,
          "batch_size": batch_size,
          "base": base,
          "scaled": scaled}


def model_options(settings: TrainerSettings,
                  tuned: Mapping[str, Any]) -> ModelOptions:
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


def batch_size(settings: TrainerSettings, train_examples: int,
               replicas: int = 1) -> Tuple[int, str]:
  """The batch size of `settings` on `train_examples` rows, and why: the
  one place the setting is read.

  Raises:
    ValueError: a batch larger than the training rows, or one the replicas
      do not split evenly.
  """
  if train_examples <= 0:
    raise ValueError("the training split is empty: nothing to train on")
  if settings.batch_size == scaling.AUTO_BATCH_SIZE:
    size, reason = scaling.auto_batch_size(
        train_examples, settings.base_batch_size, replicas)
  else:
    size, reason = settings.batch_size, "--batch-size"
  if size > train_examples:
    raise ValueError(f"batch size {size} ({reason.split(':')[0]}) is larger "
                     f"than the {train_examples} training examples: give a "
                     "smaller --batch-size or more data")
  distribution.check_batch_size(size, replicas)
  return size, reason


def resolve(settings: TrainerSettings, tuned: Mapping[str, Any],
            train_examples: int,
            precision_kept_in: Optional[str] = None) -> TrainingPlan:
  """The plan of `settings` (with KerasTuner's `tuned` values: base
  hyperparameters and model sizes) on `train_examples` training rows.

  Builds the strategy (distribution.strategy: one per process) and, for
  precision auto, probes the machine once per process, or takes the
  choice kept in `precision_kept_in` for this kind of machine
  (precision.resolve)."""
  strategy = distribution.strategy(settings.distribution,
                                   settings.cpu_devices)
  size, reason = batch_size(settings, train_examples,
                            strategy.num_replicas_in_sync)
  options = model_options(settings, tuned)
  # In a cluster the chief alone keeps the choice, and its choice holds.
  chief = distribution.is_chief(strategy)
  chosen, probe = precision_lib.resolve(
      options.precision, precision_kept_in if chief else None)
  if options.precision == precision_lib.AUTO:
    chosen = (precision_lib.MIXED_BFLOAT16 if distribution.chiefs_answer(
        strategy, chosen == precision_lib.MIXED_BFLOAT16)
              else precision_lib.FLOAT32)
  return TrainingPlan(
      settings=settings, train_examples=train_examples,
      batch_size=size, batch_size_reason=reason,
      steps_per_epoch=scaling.steps_per_epoch(train_examples, size),
      hparams=training_hparams(settings, tuned, size, train_examples),
      model_options=dataclasses.replace(options, precision=chosen),
      precision={"setting": options.precision, "chosen": chosen, **probe},
      strategy=strategy)
