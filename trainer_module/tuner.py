"""KerasTuner search over the BASE hyperparameters: tuner_fn and its results.

What is searched are the hyperparameters at the dataset's base batch size
(``features.DatasetSpec.base_hparams``). Every trial trains at the run's
batch size with them mapped by the scaling rule, through
``trainer.train``, the very code run_fn uses. So the best values
are base values: one tuning result serves every batch size, and the Trainer
maps them again for its own batch size.

* Search space: trainer_module.search_space (the ranges and scales of
  hparams.BASE_HPARAMS around the values the run would train with untuned,
  i.e. the auto base for its data size; optionally the model's sizes),
  declared to KerasTuner here.
* Objective: the best epoch's validation AUC (contract.OBJECTIVE: the models
  log ``auc``, Keras prefixes validation metrics) on the validation slice of
  the TRAIN split that run_fn early-stops on (input_pipeline.training_data; the
  eval split stays unseen). Each trial stops early as run_fn does
  (callbacks.early_stopping), so over-fitting trials end early.
* The component that runs tuner_fn is components.tuner.CtrTuner.
"""

import json
import math
import os
from typing import Any, Dict, List, Mapping, Optional

import keras
import keras_tuner
import tensorflow as tf
import tensorflow_transform as tft
from tfx import v1 as tfx

from trainer_module import contract
from trainer_module import input_pipeline
from trainer_module import kept_split
from trainer_module import model_building
from trainer_module import plan as plan_lib
from trainer_module import trainer
from trainer_module.search_space import Dimension
from trainer_module.search_space import search_space
from trainer_module.settings import TrainerSettings
from trainer_module.settings import TUNERS
from trainer_module.settings import TuningSettings

# Fixed, so the same settings propose the same trials (and TFX's cache
# stays meaningful).
SEARCH_SEED = 0

# The class of each of settings.TUNERS (a test checks they match).
TUNER_CLASSES = {"random": keras_tuner.RandomSearch,
                 "bayesian": keras_tuner.BayesianOptimization,
                 "hyperband": keras_tuner.Hyperband}

def load_search_space(path: str, dataset: str,
                      tune_model_size: bool) -> Dict[str, Any]:
  """The bounds of a JSON search-space file, checked against `dataset`.

  Returns the file's object as is (JSON values), for the run config.

  Raises:
    ValueError: the file is missing, not a JSON object, or a bound is bad;
      the message names the file (and line for syntax errors).
  """
  try:
    with tf.io.gfile.GFile(path) as f:
      text = f.read()
  except tf.errors.NotFoundError:
    raise ValueError(f"search space file {path} does not exist") from None
  try:
    overrides = json.loads(text)
  except json.JSONDecodeError as error:
    raise ValueError(f"search space file {path}, line {error.lineno} column "
                     f"{error.colno}: not valid JSON: {error.msg}") from None
  if not isinstance(overrides, dict):
    raise ValueError(f"search space file {path}: expected a JSON object "
                     '{"name": [low, high], ...}, got '
                     f"{type(overrides).__name__}")
  search_space(dataset, overrides, tune_model_size, source=path)
  return overrides


def best_epoch_metrics(history: Mapping[str, List[float]]) -> Dict[str, float]:
  """Every logged metric at the epoch of the best objective, plus epochs run.

  A trial's result: KerasTuner records it as the trial's metrics, so the
  validation loss in the table is that of the epoch the score comes from.
  """
  scores = history.get(contract.OBJECTIVE)
  if not scores:
    raise ValueError(f"training logged no {contract.OBJECTIVE!r}; it logged "
                     f"{sorted(history)} (is there validation data?)")
  best = max(range(len(scores)),
             key=lambda i: scores[i] if math.isfinite(scores[i]) else -1.0)
  metrics = {name: float(values[best]) for name, values in history.items()}
  metrics["epochs_run"] = float(len(scores))
  return metrics


class CtrHyperModel(keras_tuner.HyperModel):
  """A trial trains through trainer.train, as run_fn does.

  KerasTuner builds a trial's model itself (build:
  model_building.build_and_compile, train()'s first half) and then fits it (fit: trainer.train with that
  model). The data is the one training part and validation slice of the
  train split, shared by every trial. `precision_kept_in`: the pipeline's
  kept --precision auto choice (contract.PRECISION_DIR), which the Trainer
  takes too, so the trials search in the precision the model trains in.
  """

  def __init__(self, settings: TrainerSettings,
               space: Mapping[str, Dimension],
               tf_transform_output: tft.TFTransformOutput,
               data: input_pipeline.TrainingData,
               precision_kept_in: Optional[str] = None):
    super().__init__(name=settings.model)
    self._settings = settings
    self._precision_kept_in = precision_kept_in
    self._space = space
    self._tf_transform_output = tf_transform_output
    self._data = data
    # (the trial's values as JSON, its plan): see _plan.
    self._trial_plan = (None, None)

  def batch_record(self) -> Dict[str, Any]:
    """The batch every trial trains at and why, for the tuning results
    (an `auto` batch is resolved here, from the training rows)."""
    plan = plan_lib.resolve(self._settings, {}, self._data.train_examples,
                            self._precision_kept_in)
    return {"batch_size": plan.batch_size,
            "batch_size_reason": plan.batch_size_reason,
            "steps_per_epoch": plan.steps_per_epoch}

  def declare_hyperparameters(self, hp: keras_tuner.HyperParameters) -> None:
    for dimension in self._space.values():
      dimension.declare(hp)

  def build(self, hp: keras_tuner.HyperParameters) -> keras.Model:
    """The trial's model; with settings.seed, every trial's initialisation
    and training are seeded alike (a repeatable search)."""
    if self._settings.seed is not None:
      keras.utils.set_random_seed(self._settings.seed)
    model, _ = model_building.build_and_compile(
        self._plan(hp), self._tf_transform_output, self._data.click_rate)
    return model

  def _plan(self, hp: keras_tuner.HyperParameters) -> plan_lib.TrainingPlan:
    """The trial's plan: the settings with its values (the batch size
    does not depend on them: the data is batched once), resolved once per
    trial (build, then fit, ask for it)."""
    values = json.dumps(hp.values, sort_keys=True)
    if self._trial_plan[0] != values:
      self._trial_plan = (values, plan_lib.resolve(
          self._settings, hp.values, self._data.train_examples,
          self._precision_kept_in))
    return self._trial_plan[1]

  def fit(self, hp, model, *args, callbacks=(), epochs=None,
          initial_epoch=0, verbose="auto", **kwargs) -> Dict[str, float]:
    """Trains the trial's model; KerasTuner passes its own callbacks and,
    for Hyperband, the round's epochs (the data is the hypermodel's)."""
    del args, kwargs  # No data in fit_kwargs: trainer.train reads self._data.
    _, record = trainer.train(
        self._plan(hp), self._data, self._tf_transform_output, model=model, epochs=epochs, initial_epoch=initial_epoch,
        callbacks=callbacks, verbose=verbose)
    return best_epoch_metrics(record["history"])


def make_tuner(name: str, hypermodel: keras_tuner.HyperModel, trials: int,
               epochs: int, directory: str) -> keras_tuner.Tuner:
  """A KerasTuner tuner maximising the objective over at most `trials` trials.

  Hyperband has no trial budget of its own (its brackets over `epochs`
  decide), so the budget caps its oracle. A `directory` holding a search
  is resumed, its finished trials kept (the Tuner's executor gives an
  interrupted search's directory again: components.tuner).
  """
  if name not in TUNER_CLASSES:
    raise ValueError(f"unknown tuner {name!r}; choose one of {TUNERS}")
  common = dict(hypermodel=hypermodel,
                objective=keras_tuner.Objective(contract.OBJECTIVE, "max"),
                directory=directory, project_name="search", overwrite=False,
                seed=SEARCH_SEED)
  if name == "hyperband":
    tuner = keras_tuner.Hyperband(max_epochs=epochs, **common)
    tuner.oracle.max_trials = trials  # Read by Oracle.create_trial.
    return tuner
  return TUNER_CLASSES[name](max_trials=trials, **common)


def tuner_fn(fn_args) -> tfx.components.TunerFnResult:
  """TFX Tuner entry point: the search of custom_config["tuning"].

  custom_config is the Trainer's (settings.TrainerSettings) plus "tuning"
  (settings.TuningSettings). Trials train `epochs` epochs at most, at the
  plan's batch size, on the Transform output, through trainer.train.
  """
  settings = TrainerSettings.from_custom_config(fn_args.custom_config)
  tuning = TuningSettings.from_custom_config(fn_args.custom_config)
  tf_transform_output = tft.TFTransformOutput(fn_args.transform_graph_path)
  # Kept in the search's directory, given again to a search resumed after
  # a kill, and removed with it when the search is done (components.tuner).
  held = input_pipeline.hold_split(
      fn_args.train_files, tf_transform_output, settings.spec.label,
      settings.negative_sampling_rate,
      keep_in=os.path.join(fn_args.working_dir,
                           kept_split.HELD_SPLIT_DIR))
  # The pipeline's kept precision, as the Trainer's (trainer.run_fn).
  kept_in = contract.pipeline_directory(fn_args.working_dir,
                                        contract.PRECISION_DIR)
  untuned = plan_lib.resolve(settings, {}, held.train_examples, kept_in)
  data = input_pipeline.training_data(
      fn_args.train_files, tf_transform_output, settings.spec.label,
      untuned.batch_size, seed=settings.seed,
      negative_sampling_rate=settings.negative_sampling_rate, held=held)
  space = search_space(settings.dataset, tuning.search_space,
                       tuning.tune_model_size,
                       source="custom_config tuning.search_space",
                       model_options=settings.model_options,
                       centers=untuned.hparams["base"])
  hypermodel = CtrHyperModel(settings, space, tf_transform_output, data,
                             kept_in)
  tuner = make_tuner(tuning.tuner, hypermodel, tuning.trials,
                     settings.epochs,
                     os.path.join(fn_args.working_dir, "keras_tuner"))
  return tfx.components.TunerFnResult(
      tuner=tuner, fit_kwargs={"epochs": settings.epochs, "verbose": 2})
