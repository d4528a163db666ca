"""The model a training plan builds and compiles, and the memory check
before it: what run_fn, the tuner's trials, the study and the benchmark
share before fit."""

import math
from typing import Any, Dict, Mapping, Tuple

import tensorflow_transform as tft

from trainer_module import features
from trainer_module import models
from trainer_module import plan as plan_lib
from trainer_module import preprocessing
from trainer_module import training


# The grid, as scikit-learn's inverse strength C (LogisticRegression's
# objective C * summed log loss + |w|^2 / 2, i.e. the mean log loss plus
# l2 |w|^2 with l2 = 1 / (2 C n) for n training examples), strongest
# first: so the grid means the same at any data size.
BASELINE_C_GRID = (0.01, 0.03, 0.1, 0.3, 1.0)


def l2_of_c(c: float, train_examples: int) -> float:
  """Our L2 (l2 * sum(W^2) on the mean loss) of scikit-learn's C."""
  return 1.0 / (2.0 * c * train_examples)


def build_and_compile(plan: plan_lib.TrainingPlan,
                      tf_transform_output: tft.TFTransformOutput,
                      click_rate: float, vocab_scale: int = 1
                     ) -> Tuple[models.CTRModel, Dict[str, Any]]:
  """The plan's model, compiled with its scaled hyperparameters and steps.

  The first half of train(); KerasTuner calls it alone to build a trial's
  model (CtrHyperModel.build), then train() with that model.

  Args:
    plan: the resolved training (plan.resolve; the logistic-regression
      baseline's: TrainingPlan.for_baseline, then the model is the "lr"
      architecture on the ids of spec.linear_features, every count as its
      bucket, not log1p, fitted by linear_fit, not by this step).
    tf_transform_output: the Transform output (vocabulary sizes).
    click_rate: the training click rate. The global bias starts at its
      log-odds, so the model is calibrated from the first step instead of
      spending its early (warmup) steps learning the base rate: short runs
      otherwise end miscalibrated by 10-20%.
    vocab_scale: tables this many times larger than the vocabularies (the
      benchmark's step cost against table size; the ids still index the
      first rows). 1 everywhere else.

  Returns:
    The model and the record of what it was built with: the plan's record
    (TrainingPlan.record) with vocab_sizes and click_rate.
  """
  settings = plan.settings
  spec = settings.spec
  linear = settings.model == models.LOGISTIC_REGRESSION
  vocab_sizes = {field: size * vocab_scale for field, size in
                 preprocessing.vocabulary_sizes(tf_transform_output, spec,
                                                linear).items()}
  # Variables made in the strategy's scope are mirrored over its replicas,
  # and Keras' fit then splits each batch over them (distribution.py).
  with plan.strategy.scope():
    model = models.build_model(settings.model, vocab_sizes,
                               () if linear else spec.dense,
                               plan.model_options)
    rate = min(max(click_rate, 1e-6), 1 - 1e-6)
    model.bias.assign([math.log(rate / (1 - rate))])
    training.compile_model(model, training.TrainingConfig(
        **plan.scaled, steps_per_epoch=plan.steps_per_epoch,
        step=plan.step))
  return model, {**plan.record(), "vocab_sizes": vocab_sizes,
                 "click_rate": click_rate}


def check_training_fits(vocab_sizes: Mapping[str, int], embedding_dim: int,
                        available_bytes: int, models: int = 1) -> str:
  """Fails before training when the tables cannot fit in memory.

  Returns a one-line summary of the table sizes for the log. The estimate
  counts the deep (d) and wide (1) tables with Adam's two moments, float32,
  once per model held at once (`models`: run_fn holds every replica until
  the export, and with --distill the student beside them).
  """
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
