"""The Trainer's and the Tuner's settings: typed, validated, serialisable.

The Trainer's custom_config crosses the TFX boundary as JSON (it is stored
in ML Metadata with the run). ``TrainerSettings`` is that config as one
frozen dataclass: the pipeline config builds it (and so validates it once,
with messages that name the field), ``to_custom_config`` writes the dict
the component gets, and run_fn, tuner_fn, the study and the benchmark read
it back with ``from_custom_config`` or hold it directly. No string keys are
read anywhere else. ``TuningSettings`` adds the Tuner's search settings
under "tuning". Like components.raw_example_gen's IngestOptions for
ExampleGen.

No TensorFlow here: the pipeline definition and the CLI import it. So the
option names that the models, the training step and CowClip implement are
defined here and imported there.
"""

import dataclasses
import numbers
from typing import Any, Dict, Mapping, Optional, Tuple, Union

from trainer_module import features
from trainer_module import hparams as hparams_lib
from trainer_module import options
from trainer_module import scaling

MODELS = ("deepfm", "wdl", "dcn", "dcnv2", "lr")
DEFAULT_MODEL = "deepfm"
# The baseline architecture: no embeddings wider than 1, no interactions.
LOGISTIC_REGRESSION = "lr"
# Keras dtype policies of the DNN and cross layers (see ModelOptions).
PRECISIONS = ("auto", "float32", "mixed_bfloat16")
# How embedding rows are updated (training.py's module doc).
EMBEDDING_UPDATES = ("dense", "sparse")
DEFAULT_EMBEDDING_UPDATE = "dense"
# CowClip's threshold formulas (cowclip.py's module doc).
COWCLIP_VARIANTS = ("paper", "reference")
DEFAULT_COWCLIP_VARIANT = "paper"
# The batch size of a run when none is given: chosen from the training rows
# (scaling.auto_batch_size), resolved once per run (plan.resolve).
DEFAULT_BATCH_SIZE = scaling.AUTO_BATCH_SIZE
# Training runs at most this many epochs; early stopping on a validation
# slice of the train split ends it sooner and keeps the best epoch.
DEFAULT_EPOCHS = 10
# Id-frequency slice: an example's typical training-set id count (geometric
# mean over its fields, or the count in one field) below the first threshold
# is "rare", below the second "medium", else "frequent".
ALL_FIELDS = "all"
DEFAULT_FREQUENCY_THRESHOLDS = (100, 10000)
# KerasTuner search algorithms (trainer_module.tuner.TUNER_CLASSES).
TUNERS = ("random", "bayesian", "hyperband")
DEFAULT_TUNER = "random"
DEFAULT_TRIALS = 10
# Activations of the DNN layers (ModelOptions.activation): ReLU, or SmeLU,
# the smooth ReLU of "On the Factory Floor" (Anil et al., 2022, sec. 5),
# which cuts the prediction difference between retrains.
ACTIVATIONS = ("relu", "smelu")
DEFAULT_ACTIVATION = "relu"
DEFAULT_SMELU_BETA = 1.0
# What the exported model serves when trained as replicas (TrainerSettings.
# replicas > 1): the mean of the replicas' probabilities (a self-ensemble),
# or replica 0 alone.
PUSH_MODES = ("ensemble", "single")
DEFAULT_PUSH = "ensemble"
# What the exported model serves: the model only when its validation AUC is
# above its logistic-regression baseline's beyond the noise of a paired
# test, else the simpler baseline (served_model.choose_served); or the
# model whatever its AUC (the gate may then refuse it).
SERVE_MODES = ("best", "model")
DEFAULT_SERVE = "best"
# How training spreads over devices and machines (distribution.py's module
# doc): auto picks from the GPUs, the logical CPU devices and TF_CONFIG.
DISTRIBUTIONS = ("auto", "none", "mirrored", "multi-worker")
DEFAULT_DISTRIBUTION = "auto"
# Negative down-sampling keeps this share of the train split's non-clicks
# (TrainerSettings.negative_sampling_rate); 1: all of them, no sampling.
DEFAULT_NEGATIVE_SAMPLING_RATE = 1.0
# The dense (DNN, cross, output) layers' optimizer: Adam, or Shampoo with
# its step size grafted from Adam (shampoo.py); the embedding tables keep
# Adam and CowClip either way.
DENSE_OPTIMIZERS = ("adam", "shampoo")


def batch_size_flag(text: str):
  """--batch-size: 'auto' or a positive integer."""
  return text if text == scaling.AUTO_BATCH_SIZE else int(text)


batch_size_flag.__name__ = f"'{scaling.AUTO_BATCH_SIZE}' or an integer"


def check_positive_int(name: str, value) -> None:
  if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
    raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _check_positive_number(name: str, value, at_most: Optional[float] = None
                          ) -> None:
  """A real number > 0 (and <= at_most), booleans refused."""
  if (isinstance(value, bool) or not isinstance(value, numbers.Real) or
      not value > 0 or (at_most is not None and value > at_most)):
    bound = "> 0" if at_most is None else f"in (0, {at_most:g}]"
    raise ValueError(f"{name} must be a number {bound}, got {value!r}")


_INTS = options.comma_separated(int, "integers")
_NAMES = options.comma_separated(str, "names")


@dataclasses.dataclass(frozen=True)
class ModelOptions:
  """Architecture hyperparameters (defaults: the CowClip reference).

  Attributes:
    embedding_dim: d, the size of every field embedding.
    hidden_units: DNN layer sizes (ReLU, no dropout: large-batch CTR
      training does not overfit within its 10 epochs, and the reference runs
      with dropout 0).
    cross_layers: number of cross layers of DCN and DCN-V2.
    dcnv2_low_rank: None for DCN-V2's full-matrix cross layers; an int r for
      its mixture of low-rank experts (the reference used r=32, 4 experts).
    dcnv2_experts: number of low-rank experts when dcnv2_low_rank is set.
    embedding_stddev: std of the N(0, s) init of the deep embedding tables.
      1e-2 for CowClip runs (the paper's setting: the clipping threshold is
      relative to the row norm, and tiny rows would be stuck at the zeta
      floor); 1e-4 is the classic DeepCTR baseline.
    dense_initializer: kernel initializer of the DNN, cross layers and the
      output layer. glorot_normal, as in DeepCTR/the reference, so the
      paper's learning rates keep their meaning; He init (he_normal) would
      suit the ReLU stack in theory but gives 2x larger initial activations
      than the setting the scaled hyperparameters were tuned for.
    precision: dtype policy of the DNN and cross layers, the matrix
      products. "auto" measures this machine's matmul rates and picks
      mixed_bfloat16 where bf16 is at least 1.3x faster, else float32
      (trainer_module/precision.py). "mixed_bfloat16" computes them in
      bfloat16 with float32
      weights (Keras mixed precision), so their gradients, the embedding
      tables, the FM term, the logit, CowClip and the L2 term stay float32
      (bf16 keeps float32's exponent range: no loss scaling, zeta keeps its
      meaning). The same code runs on a GPU. Whether it is faster depends on
      the hardware (bf16 matrix units); see docs/benchmark.md.
    activation: of the DNN layers of every model, one of ACTIVATIONS.
    smelu_beta: SmeLU's half-width beta (> 0): quadratic on [-beta, beta].
  """
  embedding_dim: int = options.option(10, "size of every field embedding")
  hidden_units: Tuple[int, ...] = options.option(
      (400, 400, 400), "DNN layer sizes", parse=_INTS, metavar="U1,U2,...")
  cross_layers: int = options.option(3, "cross layers of DCN and DCNv2")
  dcnv2_low_rank: Optional[int] = options.option(
      None, "DCNv2 mixture of low-rank experts of this rank (default: "
      "full-matrix cross layers)", parse=int)
  dcnv2_experts: int = 4
  embedding_stddev: float = 1e-2
  dense_initializer: str = "glorot_normal"
  precision: str = options.option(
      "auto", "dtype policy of the DNN/cross layers (auto: mixed_bfloat16 "
      "where a matmul probe finds bf16 at least 1.3x faster than float32, "
      "see docs/benchmark.md)", choices=PRECISIONS)
  activation: str = options.option(
      DEFAULT_ACTIVATION, "activation of the DNN layers (smelu: the smooth "
      "ReLU, more reproducible retrains)", choices=ACTIVATIONS)
  smelu_beta: float = options.option(
      DEFAULT_SMELU_BETA, "SmeLU's half-width beta (needs --activation "
      "smelu)")

  def __post_init__(self):
    # Accept lists (e.g. from a JSON config) but keep the dataclass hashable.
    object.__setattr__(self, "hidden_units", tuple(self.hidden_units))
    for name in ("embedding_dim", "cross_layers", "dcnv2_experts"):
      check_positive_int(f"ModelOptions.{name}", getattr(self, name))
    if not self.hidden_units:
      raise ValueError("ModelOptions.hidden_units must not be empty")
    for units in self.hidden_units:
      check_positive_int("ModelOptions.hidden_units entry", units)
    if self.dcnv2_low_rank is not None:
      check_positive_int("ModelOptions.dcnv2_low_rank", self.dcnv2_low_rank)
    if not self.embedding_stddev > 0:
      raise ValueError("ModelOptions.embedding_stddev must be > 0, got "
                       f"{self.embedding_stddev!r}")
    if self.dense_initializer != ModelOptions.dense_initializer:
      # Keras knows its initializers' names; it is loaded only to check one
      # that is not the default (no flag sets it).
      import keras  # pylint: disable=g-import-not-at-top
      keras.initializers.get(self.dense_initializer)  # Fails if unknown.
    options.check_choices(self)
    _check_positive_number("smelu_beta", self.smelu_beta)
    if self.smelu_beta != DEFAULT_SMELU_BETA and self.activation != "smelu":
      raise ValueError("smelu_beta (--smelu-beta) only applies with "
                       "activation smelu (--activation smelu)")


@dataclasses.dataclass(frozen=True)
class StepOptions:
  """What the training step does besides the model's gradient
  (training.Step).

  Attributes:
    cowclip: clip the deep embedding gradients with CowClip.
    cowclip_variant: CowClip's threshold formula, one of COWCLIP_VARIANTS.
    embedding_update: one of EMBEDDING_UPDATES.
    dense_optimizer: one of DENSE_OPTIMIZERS.
    precondition_every: Shampoo's steps between preconditioner updates.
    rank_loss_weight: w >= 0: the objective adds w times the batch's
      sampled pairwise ranking loss (losses.sampled_pairwise_rank_loss).
  """
  cowclip: bool = options.option(
      True, "clip the embedding gradients with CowClip")
  cowclip_variant: str = options.option(
      DEFAULT_COWCLIP_VARIANT, "paper: cnt*max(r*||w||, zeta); reference: "
      "the authors' code, cnt*r*max(||w||, r*sqrt(d)*zeta)",
      choices=COWCLIP_VARIANTS)
  embedding_update: str = options.option(
      DEFAULT_EMBEDDING_UPDATE, "dense: L2 and Adam on every row every step "
      "(the paper); sparse: only rows of ids in the batch",
      choices=EMBEDDING_UPDATES)
  dense_optimizer: str = options.option(
      "adam", "optimizer of the dense and cross layers: adam, or shampoo "
      "(second order, its step size grafted from Adam's, so the learning "
      "rates and the scaling rule keep their meaning)",
      choices=DENSE_OPTIMIZERS)
  precondition_every: int = options.option(
      10, "shampoo: recompute its preconditioners (inverse 4th roots) every "
      "N steps", metavar="N")
  rank_loss_weight: float = options.option(
      0.0, "add W times a pairwise logistic ranking loss (each click of the "
      "batch against sampled non-clicks of the batch) to the log loss",
      metavar="W")

  def __post_init__(self):
    options.check_choices(self)
    check_positive_int("precondition_every", self.precondition_every)
    if (isinstance(self.rank_loss_weight, bool) or
        not isinstance(self.rank_loss_weight, numbers.Real) or
        not self.rank_loss_weight >= 0):
      raise ValueError(f"rank_loss_weight must be a number >= 0, got "
                       f"{self.rank_loss_weight!r}")

@dataclasses.dataclass(frozen=True)
class TrainerSettings:
  """How the Trainer trains: the typed form of its custom_config.

  Each field is a setting with its flag (options.option), or a nested
  group of them (the architecture).

  Attributes:
    dataset: 'criteo' or 'avazu' (features.DATASETS).
    model: one of MODELS.
    batch_size: training batch size, or scaling.AUTO_BATCH_SIZE: chosen
      from the training rows (scaling.auto_batch_size); the scaling rule
      maps the base hyperparameters from base_batch_size to it.
    epochs: the most training epochs (early stopping ends sooner).
    scaling_rule: one of scaling.RULES.
    hparams: overrides of the dataset's base hyperparameters (hparams.NAMES,
      at base_batch_size, before the scaling rule).
    auto_hparams: derive the members of scaling.AUTO_KEYS that are not
      overridden (or tuned) from the training rows
      (scaling.auto_base_hparams).
    step: the training step's options (CowClip, the embedding update, the
      bias constraints).
    model_options: the architecture.
    frequency_field: ALL_FIELDS or one categorical feature: what the
      exported model's id-frequency slice buckets examples by.
    frequency_thresholds: (rare/medium, medium/frequent) training counts.
    base_batch_size: the batch size the base hyperparameters are for (None:
      the dataset's).
    reference_examples: training rows the published values assume (None:
      the dataset's).
    negative_sampling_rate: p in (0, 1]: the Trainer keeps each non-click
      of the train split with probability p (a hash of the example decides,
      the same rows in every run) and weighs the kept ones 1/p; clicks are
      all kept (input_pipeline.training_data). 1: no sampling.
    replicas: train the model this many times, identically but for the
      seed (initialisation and data order); their Prediction Difference
      measures reproducibility (Anil et al. 2022, section 5).
    push: one of PUSH_MODES: what the exported model serves with replicas.
    baseline_rows: fit the logistic-regression baseline on at most this
      many training rows, the first ones (None: all that fit in memory).
      Its cost grows faster than the rows (docs/lr_baseline.md).
    serve: one of SERVE_MODES: "best" serves the model only when its
      validation AUC is above the logistic-regression baseline's beyond
      noise (served_model.choose_served; at small data sizes a linear
      model often ranks better), else the baseline; "model" the model.
    warm_start: start from the model served when the pipeline first
      trained on this data (its Trainer's base_model), embedding rows
      carried over by id (warm_start.py); a served model of another
      architecture is not used (the run says so).
    distill: train one more model on the replicas' ensemble (the student)
      and serve it alone (Anil et al. 2022, section 6).
    distill_label_weight: the student's target is this share of the label
      plus the rest of the ensemble's probability (losses.distillation_loss).
    distribution: one of DISTRIBUTIONS: how training spreads over devices
      and machines (distribution.py); the result is the same update.
    cpu_devices: split the CPU into this many logical devices (a mirrored
      run without GPUs: the same path, tested and benchmarked); 1: whole.
    seed: seeds initialisation, the data order and every random op, and
      reads the files in a fixed order, so two runs on the same machine
      give the same model (replica i: seed + i). None: unseeded (replicas
      still 0..N-1).
  """
  dataset: str
  model: str = options.option(DEFAULT_MODEL, "the model", choices=MODELS)
  batch_size: Union[int, str] = options.option(
      DEFAULT_BATCH_SIZE, "training batch size: the scaling rule maps the "
      f"base hyperparameters to it. {scaling.AUTO_BATCH_SIZE}: the largest "
      f"power of two from the base batch size up to "
      f"{scaling.MAX_AUTO_BATCH_SIZE} that gives an epoch "
      f"{scaling.MIN_STEPS_PER_EPOCH} steps", parse=batch_size_flag,
      metavar="N|auto")
  epochs: int = options.option(
      DEFAULT_EPOCHS, "most training epochs; early stopping on a validation "
      "slice of the train split ends sooner and keeps the best epoch")
  scaling_rule: str = options.option(
      scaling.DEFAULT_RULE, "how the base hyperparameters follow the batch "
      "size", choices=scaling.RULES)
  hparams: Mapping[str, float] = options.option(
      {}, "overrides of the dataset's base hyperparameters",
      keys=tuple((h.name, f"--{h.flag}", f"{h.help}: overrides the "
                  "dataset's base value (at its base batch size; the "
                  "scaling rule maps it)") for h in hparams_lib.BASE_HPARAMS))
  auto_hparams: bool = options.option(
      True, "derive dense_lr, embed_lr and l2 from the training set's size "
      "(off: the published base values)")
  step: StepOptions = options.group(
      StepOptions, "step", "the training step")
  model_options: ModelOptions = options.group(
      ModelOptions, "model", "the architecture (defaults: the CowClip "
      "reference)")
  frequency_field: str = options.option(
      ALL_FIELDS, f"'{ALL_FIELDS}' or one categorical feature: what the "
      "id-frequency slice buckets examples by")
  frequency_thresholds: Tuple[int, int] = options.option(
      DEFAULT_FREQUENCY_THRESHOLDS, "training-count boundaries of the "
      "rare/medium/frequent buckets", parse=_INTS, metavar="RARE,FREQUENT")
  base_batch_size: Optional[int] = None
  reference_examples: Optional[int] = None
  negative_sampling_rate: float = options.option(
      DEFAULT_NEGATIVE_SAMPLING_RATE, "keep each non-click of the train "
      "split with probability P (0 < P <= 1; 1: all), decided by a hash of "
      "the example; kept non-clicks weigh 1/P in training. The eval split "
      "is never sampled", metavar="P")
  replicas: int = options.option(
      1, "train the model this many times with different seeds; their "
      "Prediction Difference is reported by slice (docs/production_pd.md)")
  push: str = options.option(
      DEFAULT_PUSH, "with replicas, serve their mean probability (ensemble) "
      "or replica 0 (single)", choices=PUSH_MODES)
  baseline_rows: Optional[int] = options.option(
      None, "fit the logistic-regression baseline on at most N training "
      "rows, the first ones: its cost grows faster than the rows (default: "
      "all that fit in memory)", parse=int, metavar="N")
  serve: str = options.option(
      DEFAULT_SERVE, "best: serve the model only when its AUC on the "
      "validation slice is above the logistic-regression baseline's beyond "
      "the noise of a paired test, else the baseline (the run says which, "
      "and why); model: always serve the model (the gate may refuse it)",
      choices=SERVE_MODES)
  warm_start: bool = options.option(
      True, "start from the model DIR served when this data was first "
      "trained on, embedding rows carried over by id (docs/daily.md); off: "
      "train from scratch")
  distill: bool = options.option(
      False, "with replicas, distil their ensemble into one model of the "
      "same shape (trained on the ensemble's predictions beside the labels) "
      "and serve that one")
  distill_label_weight: float = options.option(
      0.5, "distillation target: this share of the label, the rest the "
      "ensemble's predicted click rate")
  distribution: str = options.option(
      DEFAULT_DISTRIBUTION, "auto: multi-worker when TF_CONFIG lists "
      "several workers, mirrored over all GPUs (or logical CPU devices) "
      "when there are several, else none. Each step's batch is split over "
      "the replicas and gives the one-device update (exact CowClip)",
      choices=DISTRIBUTIONS)
  cpu_devices: int = options.option(
      1, "split the CPU into N logical devices (mirrored training without "
      "GPUs)", metavar="N")
  seed: Optional[int] = options.option(
      None, "seed the Trainer and the Tuner (initialisation, data order, "
      "random ops; files read in a fixed order): two runs with the same "
      "seed on the same machine serve the same predictions (default: "
      "unseeded)", parse=int)

  def __post_init__(self):
    spec = features.get_spec(self.dataset)  # Fails on an unknown dataset.
    fill = object.__setattr__  # Frozen: normalise once, here.
    fill(self, "hparams", hparams_lib.check_overrides(self.hparams))
    if self.base_batch_size is None:
      fill(self, "base_batch_size", spec.base_batch_size)
    if self.reference_examples is None:
      fill(self, "reference_examples", spec.reference_examples)
    if isinstance(self.model_options, Mapping):
      fill(self, "model_options", ModelOptions(**self.model_options))
    if isinstance(self.step, Mapping):
      fill(self, "step", StepOptions(**self.step))
    fill(self, "frequency_thresholds", tuple(self.frequency_thresholds))
    options.check_choices(self)
    if self.batch_size != scaling.AUTO_BATCH_SIZE and (
        isinstance(self.batch_size, bool) or
        not isinstance(self.batch_size, int) or self.batch_size <= 0):
      raise ValueError(f"batch_size must be '{scaling.AUTO_BATCH_SIZE}' or "
                       f"a positive integer, got {self.batch_size!r}")
    for name in ("epochs", "base_batch_size",
                 "reference_examples", "replicas", "cpu_devices"):
      check_positive_int(name, getattr(self, name))
    if self.baseline_rows is not None:
      check_positive_int("baseline_rows", self.baseline_rows)
    if self.frequency_field not in (ALL_FIELDS,) + spec.categorical_features:
      raise ValueError(f"frequency field {self.frequency_field!r} is not "
                       f"'{ALL_FIELDS}' or a categorical feature of "
                       f"{self.dataset}")
    rare, frequent = self.frequency_thresholds
    if not 0 < rare < frequent:
      raise ValueError("frequency thresholds must be 0 < rare < frequent, "
                       f"got {self.frequency_thresholds}")
    _check_positive_number("negative_sampling_rate",
                           self.negative_sampling_rate, at_most=1)
    if self.distill and self.replicas < 2:
      raise ValueError("distill (--distill) needs an ensemble to distil: "
                       f"replicas >= 2, got {self.replicas}")
    if not 0 <= self.distill_label_weight <= 1:
      raise ValueError("distill_label_weight must be in [0, 1], got "
                       f"{self.distill_label_weight!r}")
    if self.seed is not None and (isinstance(self.seed, bool) or
                                  not isinstance(self.seed, int) or
                                  self.seed < 0):
      raise ValueError(f"seed must be a non-negative integer or None, got "
                       f"{self.seed!r}")

  @property
  def base_hparams(self) -> Dict[str, float]:
    """The dataset's base hyperparameters with the overrides."""
    return hparams_lib.check_values({**self.spec.base_hparams,
                                     **self.hparams})

  @property
  def served_replicas(self) -> int:
    """The models the exported signature serves: the replicas, or the one
    distilled from them."""
    return 1 if self.distill else self.replicas

  @property
  def auto_hparam_keys(self) -> Tuple[str, ...]:
    """The base hyperparameters derived from the data size: those of
    scaling.AUTO_KEYS not overridden, with auto_hparams."""
    return tuple(k for k in scaling.AUTO_KEYS
                 if self.auto_hparams and k not in self.hparams)

  @property
  def spec(self) -> features.DatasetSpec:
    return features.get_spec(self.dataset)

  def to_custom_config(self) -> Dict[str, Any]:
    """The Trainer's custom_config (JSON values)."""
    config = dataclasses.asdict(self)
    config.update(hparams=dict(self.hparams),
                  frequency_thresholds=list(self.frequency_thresholds),
                  step=_json_options(self.step),
                  model_options=_json_options(self.model_options))
    return config

  @classmethod
  def from_custom_config(cls, config: Mapping[str, Any]) -> "TrainerSettings":
    """The settings of a custom_config (to_custom_config's, or the Tuner's,
    whose "tuning" entry is left to TuningSettings)."""
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(config) - names - {TuningSettings.KEY})
    if unknown:
      raise ValueError(f"the Trainer's custom_config has unknown keys "
                       f"{unknown}; known: {sorted(names)}")
    return cls(**{k: v for k, v in config.items() if k in names})


def _json_options(nested: Any) -> Dict[str, Any]:
  """Nested options (ModelOptions, StepOptions) as JSON values: only the
  fields that differ from the defaults (what the user set), tuples as
  lists."""
  default = type(nested)()
  return {f.name: (list(v) if isinstance(v, tuple) else v)
          for f in dataclasses.fields(nested)
          if (v := getattr(nested, f.name)) != getattr(default, f.name)}


@dataclasses.dataclass(frozen=True)
class TuningSettings:
  """The Tuner: whether the pipeline has one, and its search
  (custom_config["tuning"] of the CtrTuner).

  Attributes:
    tune: insert the Tuner (KerasTuner over the base hyperparameters)
      before the Trainer, which then trains with the best values found.
    tuner: one of TUNERS.
    trials: the trial budget.
    search_space: bounds replacing the default ones, by name (see
      trainer_module.search_space: [low, high], choices, or a fixed value).
      Its flag names a JSON file (commands.cli.flags reads it).
    tune_model_size: also search embedding_dim, dnn_units and dnn_layers.
    hparams_from: a directory holding only best_hyperparameters.txt (a
      Tuner's best_hyperparameters artifact) that the Trainer uses instead
      of tuning again.
    stop_after_tuner: end the pipeline at the Tuner (the `tune` command).
  """
  KEY = "tuning"
  # What the Tuner itself reads; the other fields shape the pipeline.
  SEARCH_FIELDS = ("tuner", "trials", "search_space", "tune_model_size")

  tune: bool = options.option(
      False, "insert the Tuner before the Trainer, which then trains with "
      "the best values")
  tuner: str = options.option(DEFAULT_TUNER, "search algorithm",
                              choices=TUNERS)
  trials: int = options.option(DEFAULT_TRIALS, "trial budget")
  search_space: Mapping[str, Any] = options.option(
      {}, 'bounds replacing the defaults, e.g. {"dense_lr": [1e-4, 1e-2], '
      '"r": 1.0}: [low, high], choices for sizes, one number to fix a value',
      metavar="FILE.json", parse=str)  # The flag names the file.
  tune_model_size: bool = options.option(
      False, "also search embedding_dim, dnn_units, dnn_layers")
  hparams_from: Optional[str] = options.option(
      None, "train with an earlier tuning result instead: a Tuner's "
      "best_hyperparameters artifact directory or the --output DIR of `tune`",
      metavar="PATH")
  stop_after_tuner: bool = False

  def __post_init__(self):
    options.check_choices(self)
    check_positive_int("trials", self.trials)
    object.__setattr__(self, "search_space", dict(self.search_space))
    if self.hparams_from and self.tune:
      raise ValueError("hparams_from (--hparams-from) brings in tuned values: "
                       "it cannot be combined with tune (--tune)")
    if self.stop_after_tuner and not self.tune:
      raise ValueError("stop_after_tuner needs tune")
    if not self.tune and (self.search_space or self.tune_model_size):
      raise ValueError("search_space (--search-space) and tune_model_size "
                       "(--tune-model-size) are only used with tune (--tune)")

  def to_custom_config(self, trainer: TrainerSettings) -> Dict[str, Any]:
    """The Tuner's custom_config: the Trainer's plus the search."""
    return {**trainer.to_custom_config(),
            self.KEY: {name: getattr(self, name)
                       for name in self.SEARCH_FIELDS}}

  @classmethod
  def from_custom_config(cls, config: Mapping[str, Any]) -> "TuningSettings":
    if cls.KEY not in config:
      raise ValueError(f"the Tuner's custom_config has no {cls.KEY!r} entry")
    return cls(tune=True, **config[cls.KEY])
