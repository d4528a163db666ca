"""KerasTuner search over the BASE hyperparameters: tuner_fn and its results.

What is searched are the hyperparameters at the dataset's base batch size
(``features.DatasetSpec.base_hparams``). Every trial trains at the run's
batch size with them mapped by the scaling rule, through
``trainer.build_and_compile``, the very code run_fn uses. So the best values
are base values: one tuning result serves every batch size, and the Trainer
maps them again for its own batch size.

* Search space: dense_lr, embed_lr, l2 and zeta on a log scale, r and
  warmup_epochs on a linear one, each by default around the dataset's
  published value; optionally the model's sizes (embedding_dim, dnn_units,
  dnn_layers). Bounds are overridden by a JSON object, e.g.
  ``{"dense_lr": [1e-4, 1e-2], "r": 1.0, "embedding_dim": [8, 16, 32]}``:
  ``[low, high]`` for a float, a list of choices for a size, one number to
  fix a value.
* Objective: the best epoch's validation AUC (contract.OBJECTIVE: the models
  log ``auc``, Keras prefixes validation metrics) on the validation slice of
  the TRAIN split that run_fn early-stops on (trainer.training_data; the
  eval split stays unseen). Each trial stops early as run_fn does
  (training.early_stopping), so over-fitting trials end early.
* The component that runs tuner_fn is components.tuner.CtrTuner.
"""

import dataclasses
import json
import math
import numbers
import os
from typing import Any, Dict, List, Mapping, Optional, Tuple

import keras
import keras_tuner
import tensorflow as tf
import tensorflow_transform as tft
from tfx import v1 as tfx

from trainer_module import contract
from trainer_module import features
from trainer_module import models
from trainer_module import trainer
from trainer_module import training

# Fixed, so the same settings propose the same trials (and TFX's cache
# stays meaningful).
SEARCH_SEED = 0

TUNER_CLASSES = {"random": keras_tuner.RandomSearch,
                 "bayesian": keras_tuner.BayesianOptimization,
                 "hyperband": keras_tuner.Hyperband}
TUNERS = tuple(TUNER_CLASSES)

LOG_SCALE = ("dense_lr", "embed_lr", "l2", "zeta")
# Default bounds as factors of the published base value v: an order of
# magnitude either side on a log scale; r within 2x; warmup from none to 2v.
_DEFAULT_FACTORS = {"dense_lr": (0.1, 10.0), "embed_lr": (0.1, 10.0),
                    "l2": (0.1, 10.0), "zeta": (0.1, 10.0), "r": (0.5, 2.0),
                    "warmup_epochs": (0.0, 2.0)}


@dataclasses.dataclass(frozen=True)
class Dimension:
  """One searched hyperparameter: a float range, integer choices, or fixed.

  Attributes:
    name: a base hyperparameter or one of contract.MODEL_SIZE_KEYS.
    default: the value of the first build and KerasTuner's default.
    low: lower bound of a float range (None otherwise).
    high: upper bound of a float range (None otherwise).
    log: sample the float range on a log scale.
    choices: the values of a size (empty otherwise).
  """
  name: str
  default: float
  low: Optional[float] = None
  high: Optional[float] = None
  log: bool = False
  choices: Tuple[int, ...] = ()

  @property
  def fixed(self) -> bool:
    return self.low is None and len(self.choices) < 2

  def declare(self, hp: keras_tuner.HyperParameters) -> None:
    """Registers this dimension in `hp`."""
    if self.fixed:
      hp.Fixed(self.name, self.default)
    elif self.choices:
      hp.Choice(self.name, list(self.choices), default=self.default)
    else:
      hp.Float(self.name, self.low, self.high, default=self.default,
               sampling="log" if self.log else "linear")

  def contains(self, value: float) -> bool:
    """Whether `value` is one this dimension can propose."""
    if self.fixed:
      return value == self.default
    if self.choices:
      return value in self.choices
    return self.low <= value <= self.high


def _float_dimension(name: str, value: Any, published: float,
                     source: str) -> Dimension:
  """A float dimension from `[low, high]` or a number (fixed)."""
  log = name in LOG_SCALE

  def number(v) -> bool:
    return (isinstance(v, numbers.Real) and not isinstance(v, bool) and
            math.isfinite(v) and v >= 0)

  if number(value):
    return Dimension(name, float(value))
  if (isinstance(value, (list, tuple)) and len(value) == 2 and
      all(number(v) for v in value) and value[0] < value[1] and
      (value[0] > 0 or not log)):
    low, high = float(value[0]), float(value[1])
    if low <= published <= high:
      default = published
    else:
      default = math.sqrt(low * high) if log else (low + high) / 2
    return Dimension(name, default, low, high, log)
  scale = "0 < low < high (log scale)" if log else "0 <= low < high"
  raise ValueError(f"{source}: {name!r} must be [low, high] with {scale}, "
                   f"or one number >= 0 to fix it; got {value!r}")


def _size_dimension(name: str, value: Any, published: int,
                    source: str) -> Dimension:
  """A model-size dimension from a list of choices or an int (fixed)."""

  def size(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0

  if size(value):
    return Dimension(name, value)
  if (isinstance(value, (list, tuple)) and value and
      all(size(v) for v in value) and len(set(value)) == len(value)):
    choices = tuple(value)
    default = published if published in choices else choices[0]
    return Dimension(name, default, choices=choices)
  raise ValueError(f"{source}: {name!r} must be a list of distinct positive "
                   f"integers to choose from, or one to fix it; got "
                   f"{value!r}")


def _configured_sizes(model_options: Mapping[str, Any]) -> Dict[str, int]:
  """The model sizes run_fn uses when they are not tuned."""
  options = models.ModelOptions(**model_options)
  return {"embedding_dim": options.embedding_dim,
          "dnn_units": options.hidden_units[0],
          "dnn_layers": len(options.hidden_units)}


def search_space(dataset: str,
                 overrides: Optional[Mapping[str, Any]] = None,
                 tune_model_size: bool = False,
                 source: str = "search space",
                 model_options: Optional[Mapping[str, Any]] = None
                ) -> Dict[str, Dimension]:
  """The searched dimensions: defaults around the published values.

  Args:
    dataset: a features.DATASETS name (its base_hparams are the defaults).
    overrides: name -> `[low, high]`, choices, or a fixed value (see the
      module doc).
    tune_model_size: also search embedding_dim, dnn_units and dnn_layers
      (halved, kept, doubled; one layer less, same, one more).
    source: named in errors (the file the overrides came from).
    model_options: the run's ModelOptions overrides, which center the sizes.

  Returns:
    name -> Dimension, base hyperparameters first.

  Raises:
    ValueError: an unknown name, a size without tune_model_size, or a
      malformed bound.
  """
  spec = features.get_spec(dataset)
  space = {}
  for name, value in spec.base_hparams.items():
    low, high = _DEFAULT_FACTORS[name]
    space[name] = _float_dimension(name, [value * low, value * high], value,
                                   f"{dataset} defaults")
  sizes = _configured_sizes(model_options or {})
  if tune_model_size:
    dim, units, layers = (sizes["embedding_dim"], sizes["dnn_units"],
                          sizes["dnn_layers"])
    space["embedding_dim"] = _size_dimension(
        "embedding_dim", sorted({max(1, dim // 2), dim, dim * 2}), dim,
        "model defaults")
    space["dnn_units"] = _size_dimension(
        "dnn_units", sorted({max(1, units // 2), units, units * 2}), units,
        "model defaults")
    space["dnn_layers"] = _size_dimension(
        "dnn_layers", sorted({max(1, layers - 1), layers, layers + 1}), layers,
        "model defaults")
  for name, value in (overrides or {}).items():
    if name in contract.MODEL_SIZE_KEYS:
      if not tune_model_size:
        raise ValueError(f"{source}: {name!r} sizes the model; it is searched "
                         "only with --tune-model-size (tune_model_size)")
      space[name] = _size_dimension(name, value, sizes[name], source)
    elif name in spec.base_hparams:
      space[name] = _float_dimension(name, value, spec.base_hparams[name],
                                     source)
    else:
      raise ValueError(f"{source}: unknown hyperparameter {name!r}; "
                       f"searchable: {list(spec.base_hparams)} and, with "
                       f"--tune-model-size, {list(contract.MODEL_SIZE_KEYS)}")
  return space


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
  """Each trial's model from trainer.build_and_compile, as run_fn builds it."""

  def __init__(self, custom_config: Mapping[str, Any],
               space: Mapping[str, Dimension],
               tf_transform_output: tft.TFTransformOutput,
               train_examples: int, click_rate: float):
    super().__init__(name=custom_config["model"])
    self._config = custom_config
    self._space = space
    self._tf_transform_output = tf_transform_output
    self._train_examples = train_examples
    self._click_rate = click_rate

  def declare_hyperparameters(self, hp: keras_tuner.HyperParameters) -> None:
    for dimension in self._space.values():
      dimension.declare(hp)

  def build(self, hp: keras_tuner.HyperParameters) -> keras.Model:
    model, _ = trainer.build_and_compile(
        self._config, hp.values, self._tf_transform_output,
        self._train_examples, self._click_rate)
    return model

  def fit(self, hp, model, *args, **kwargs) -> Dict[str, float]:
    del hp  # The model was built with it.
    return best_epoch_metrics(model.fit(*args, **kwargs).history)


def make_tuner(name: str, hypermodel: keras_tuner.HyperModel, trials: int,
               epochs: int, directory: str) -> keras_tuner.Tuner:
  """A KerasTuner tuner maximising the objective over at most `trials` trials.

  Hyperband has no trial budget of its own (its brackets over `epochs`
  decide), so the budget caps its oracle.
  """
  if name not in TUNER_CLASSES:
    raise ValueError(f"unknown tuner {name!r}; choose one of {TUNERS}")
  common = dict(hypermodel=hypermodel,
                objective=keras_tuner.Objective(contract.OBJECTIVE, "max"),
                directory=directory, project_name="search", overwrite=True,
                seed=SEARCH_SEED)
  if name == "hyperband":
    tuner = keras_tuner.Hyperband(max_epochs=epochs, **common)
    tuner.oracle.max_trials = trials  # Read by Oracle.create_trial.
    return tuner
  return TUNER_CLASSES[name](max_trials=trials, **common)


def tuner_fn(fn_args) -> tfx.components.TunerFnResult:
  """TFX Tuner entry point: the search of custom_config["tuning"].

  custom_config is the Trainer's (pipeline.config.PipelineConfig
  .trainer_config) plus "tuning": {"tuner", "trials", "search_space",
  "tune_model_size"}. Trials train `epochs` epochs at most, at
  custom_config's batch size, on the Transform output.
  """
  config = fn_args.custom_config
  settings = config["tuning"]
  spec = features.get_spec(config["dataset"])
  space = search_space(config["dataset"], settings["search_space"],
                       settings["tune_model_size"],
                       source="custom_config tuning.search_space",
                       model_options=config.get("model_options"))
  tf_transform_output = tft.TFTransformOutput(fn_args.transform_graph_path)
  batch_size = config["batch_size"]
  data = trainer.training_data(fn_args.train_files, tf_transform_output,
                               spec.label, batch_size)
  hypermodel = CtrHyperModel(config, space, tf_transform_output,
                             data.train_examples, data.click_rate)
  tuner = make_tuner(settings["tuner"], hypermodel, settings["trials"],
                     config["epochs"],
                     os.path.join(fn_args.working_dir, "keras_tuner"))
  return tfx.components.TunerFnResult(
      tuner=tuner,
      fit_kwargs={"x": data.train, "validation_data": data.validation,
                  "epochs": config["epochs"], "verbose": 2,
                  "callbacks": [training.early_stopping()]})
