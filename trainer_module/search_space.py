"""The tuner's search space over the base hyperparameters (no TensorFlow).

What is searched are the hyperparameters at the dataset's base batch size
(features.DatasetSpec.base_hparams), each by default over
hparams.BaseHParam.search_factors around a center, on a log scale where
hparams says so. The center is the value the run would train with untuned:
the tuner passes the auto base for its data size (scaling.auto_base_hparams),
since on small data that lies decades away from the published value and a
range around the published one would search only worse settings; optionally the model's sizes (contract.MODEL_SIZE_KEYS).
Bounds are overridden by a JSON object, e.g.
``{"dense_lr": [1e-4, 1e-2], "r": 1.0, "embedding_dim": [8, 16, 32]}``:
``[low, high]`` for a float, a list of choices for a size, one number to
fix a value. trainer_module.tuner declares these dimensions to KerasTuner;
the pipeline config checks a search space with them before any run.
"""

import dataclasses
import math
import numbers
from typing import Any, Dict, Mapping, Optional, Tuple, Union

from trainer_module import contract
from trainer_module import features
from trainer_module import hparams
from trainer_module import settings


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

  def declare(self, hp) -> None:
    """Registers this dimension in `hp` (keras_tuner.HyperParameters)."""
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


def _float_dimension(name: str, value: Any, center: float,
                     source: str) -> Dimension:
  """A float dimension from `[low, high]` or a number (fixed)."""
  log = hparams.BY_NAME[name].log

  def number(v) -> bool:
    return (isinstance(v, numbers.Real) and not isinstance(v, bool) and
            math.isfinite(v) and v >= 0)

  if number(value):
    return Dimension(name, float(value))
  if (isinstance(value, (list, tuple)) and len(value) == 2 and
      all(number(v) for v in value) and value[0] < value[1] and
      (value[0] > 0 or not log)):
    low, high = float(value[0]), float(value[1])
    if low <= center <= high:
      default = center
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


def _configured_sizes(model_options: Union[settings.ModelOptions,
                                           Mapping[str, Any]]
                     ) -> Dict[str, int]:
  """The model sizes run_fn uses when they are not tuned."""
  options = (model_options
             if isinstance(model_options, settings.ModelOptions)
             else settings.ModelOptions(**model_options))
  return {"embedding_dim": options.embedding_dim,
          "dnn_units": options.hidden_units[0],
          "dnn_layers": len(options.hidden_units)}


def search_space(dataset: str,
                 overrides: Optional[Mapping[str, Any]] = None,
                 tune_model_size: bool = False,
                 source: str = "search space",
                 model_options: Union[settings.ModelOptions,
                                      Mapping[str, Any], None] = None,
                 centers: Optional[Mapping[str, float]] = None
                ) -> Dict[str, Dimension]:
  """The searched dimensions: defaults around the centers.

  Args:
    dataset: a features.DATASETS name (its base_hparams are the defaults).
    overrides: name -> `[low, high]`, choices, or a fixed value (see the
      module doc).
    tune_model_size: also search embedding_dim, dnn_units and dnn_layers
      (halved, kept, doubled; one layer less, same, one more).
    source: named in errors (the file the overrides came from).
    model_options: the run's ModelOptions (or their overrides), which
      center the sizes.
    centers: base values the default ranges are around and start from,
      by name (default: the dataset's published values).

  Returns:
    name -> Dimension, base hyperparameters first.

  Raises:
    ValueError: an unknown name, a size without tune_model_size, or a
      malformed bound.
  """
  spec = features.get_spec(dataset)
  centers = {**spec.base_hparams, **hparams.check_overrides(
      centers or {}, "search space centers")}
  space = {}
  for name in spec.base_hparams:
    # A zero center (e.g. --warmup-epochs 0) spans no range: search around
    # the published value instead.
    value = centers[name] or spec.base_hparams[name]
    low, high = hparams.BY_NAME[name].search_factors
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
      space[name] = _float_dimension(name, value, centers[name], source)
    else:
      raise ValueError(f"{source}: unknown hyperparameter {name!r}; "
                       f"searchable: {list(spec.base_hparams)} and, with "
                       f"--tune-model-size, {list(contract.MODEL_SIZE_KEYS)}")
  return space
