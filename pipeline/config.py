"""The run configuration: one typed object every runner and tool reads.

The CLI only parses arguments into a `PipelineConfig`; `create_pipeline`
turns it into TFX components. Defaults that depend on the dataset come from
`trainer_module.features` specs, not from literals here.
"""

import dataclasses
import functools
import gzip
import os
from typing import Any, Dict, List, Mapping, Optional
from typing import Tuple

from pipeline.code_fingerprint import REPO_ROOT
from trainer_module import features
from trainer_module import hparams
from trainer_module import scaling
from trainer_module import search_space as search_space_lib
from trainer_module import settings

SCHEMA_ROOT = os.path.join(REPO_ROOT, "schema")

RUNNERS = ("beam", "local")
BEAM_RUNNERS = ("direct", "dataflow", "flink", "spark")
# How a portable runner (Flink, Spark) starts the Python SDK workers.
BEAM_ENVIRONMENTS = ("DOCKER", "EXTERNAL", "PROCESS", "LOOPBACK")

# The DirectRunner's engine (FnApiRunner) in the calling process: one
# in-memory worker keeps memory use predictable on a laptop and in a pod.
# Named explicitly because Beam's DirectRunner otherwise tries to download
# and start its Prism runner for every component (and falls back offline),
# so runs would differ between machines.
DIRECT_BEAM_ARGS = ("--runner=FnApiRunner", "--direct_running_mode=in_memory",
                    "--direct_num_workers=1")

# The Kubernetes resource NVIDIA's device plugin exposes. The KFP v2 driver
# copies the accelerator type verbatim into the pod's resource limits.
DEFAULT_ACCELERATOR = "nvidia.com/gpu"

# The evaluation gate (overall slice). The first run of a pipeline has no
# baseline and is judged by the absolute checks alone: an AUC floor just
# above chance (0.5) that catches a broken model on any dataset, and a
# calibration band of +-10% (mean prediction / mean label): beyond it every
# auction is mispriced by more than a typical bid adjustment. Later runs must
# also match the latest blessed model: AUC may not drop by more than 0.001
# (the "0.1% AUC" CTR teams treat as a real loss) and log loss may not rise
# by more than 0.001.
DEFAULT_MIN_AUC = 0.55
DEFAULT_CALIBRATION_BAND = (0.9, 1.1)
DEFAULT_MAX_AUC_DROP = 0.001
DEFAULT_MAX_LOGLOSS_INCREASE = 0.001
# Slices smaller than this are not reported (noise, and privacy).
DEFAULT_MIN_SLICE_SIZE = 100
# The logistic-regression check of the gate: the model's overall AUC may be
# below the logistic-regression baseline's (trained beside it on the same
# features) by at most this much. 0.001 is the AUC loss CTR teams treat as
# real (DEFAULT_MAX_AUC_DROP); a model that does not beat a linear one by
# that margin is not worth serving.
DEFAULT_MAX_AUC_BELOW_LR = 0.001
# Bytes read from the head of the data to estimate its row count.
_ROW_ESTIMATE_SAMPLE_BYTES = 1 << 20
_GZIP_MAGIC = b"\x1f\x8b"


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
  """Everything one pipeline run needs.

  Attributes:
    dataset: 'criteo' or 'avazu' (selects the spec, schema and defaults).
    data: a raw file, or a directory whose files are all read.
    output: DIR holding the pipeline root, the metadata store and the
      pushed models; re-running with the same DIR reuses cached results.
    model: one of trainer_module.models.MODELS.
    batch_size: training batch size (the scaling rule maps the base
      hyperparameters from the dataset's base batch size to this one).
    epochs: the most training epochs; early stopping on a validation slice
      of the train split stops sooner and restores the best epoch.
    runner: 'beam' (BeamDagRunner) or 'local' (LocalDagRunner).
    scaling_rule: one of trainer_module.scaling.RULES.
    cowclip: clip embedding gradients with CowClip.
    hparams: overrides of the dataset's base hyperparameters. The ones not
      overridden among scaling.AUTO_KEYS are derived from the training
      set's size (scaling.auto_base_hparams) when auto_hparams is set.
    auto_hparams: derive dense_lr, embed_lr and l2 from the data size.
    min_frequency: vocabulary frequency threshold (None: the dataset's
      threshold for the estimated size of `data`, spec.auto_min_frequency).
    eval_fraction: share of rows in eval (None: dataset default).
    split: 'hash' (deterministic per row) or 'sequential' (the tail is eval).
    max_bad_fraction: share of malformed rows dropped before failing.
    skip_foreign_files: skip the files of `data` that are not the dataset's
      training data (a test file, a readme) instead of refusing them.
    min_auc: the Evaluator's absolute AUC floor on the overall slice.
    calibration_band: (low, high) allowed calibration, overall slice.
    max_auc_drop: allowed AUC drop against the latest blessed model.
    max_logloss_increase: allowed log-loss rise against that model.
    max_auc_below_lr: allowed overall AUC shortfall of the model against
      the logistic-regression baseline of the same run (None: no check).
    slice_features: categorical raw features to slice the evaluation by
      (None: the dataset's defaults).
    min_slice_size: slices with fewer eval examples are left out of the
      report (they are noise).
    frequency_field: 'all' or one categorical feature: what the id-frequency
      slice buckets examples by.
    frequency_thresholds: (rare/medium, medium/frequent) training counts.
    embedding_update: 'dense' (the paper) or 'sparse' (rows in the batch).
    cowclip_variant: 'paper' or 'reference' threshold formula.
    model_options: overrides of trainer_module.models.ModelOptions fields.
    beam_args: extra Beam pipeline arguments.
    schema_root: directory holding <dataset>/schema.pbtxt (a container path
      when the pipeline is compiled for Kubeflow).
    local_metadata: keep ML Metadata in <output>/metadata.sqlite; False on
      orchestrators that own the store (Kubeflow: the cluster's MySQL).
    trainer_gpus: accelerators the Trainer's pod requests (0: none).
    trainer_accelerator: the accelerator type of that request.
    tune: insert the Tuner (KerasTuner over the base hyperparameters) before
      the Trainer, which then trains with the best values found.
    trials: the Tuner's trial budget.
    tuner: one of trainer_module.tuner.TUNERS.
    search_space: bounds replacing the default ones, by name (see
      trainer_module.tuner: [low, high], choices, or a fixed value).
    tune_model_size: also search embedding_dim, dnn_units and dnn_layers.
    hparams_from: a directory holding only best_hyperparameters.txt (a
      Tuner's best_hyperparameters artifact) that the Trainer uses instead
      of tuning again.
    stop_after_tuner: end the pipeline at the Tuner (the tuning job).
    negative_sampling_rate: the share of the train split's non-clicks the
      Trainer keeps (settings.TrainerSettings.negative_sampling_rate).
    bias_constraints: slices whose per-bucket calibration bias training
      constrains (settings.TrainerSettings.bias_constraints).
    bias_constraint_lr: the constraint multipliers' ascent step.
    replicas: train the model this many times with different seeds
      (settings.TrainerSettings.replicas); the Evaluator reports their
      Prediction Difference.
    push: settings.PUSH_MODES: with replicas, serve their mean or replica 0.
    max_pd: the gate's bound on the replicas' Prediction Difference,
      overall slice (None: no check; needs replicas > 1).
    distribution, cpu_devices: how training spreads over devices
      (settings.TrainerSettings.distribution and cpu_devices).
    seed: the Trainer's and the Tuner's seed
      (settings.TrainerSettings.seed; None: unseeded).
  """
  dataset: str
  data: str
  output: str
  model: str = settings.DEFAULT_MODEL
  batch_size: int = settings.DEFAULT_BATCH_SIZE
  epochs: int = settings.DEFAULT_EPOCHS
  runner: str = "beam"
  scaling_rule: str = scaling.DEFAULT_RULE
  cowclip: bool = True
  hparams: Mapping[str, float] = dataclasses.field(default_factory=dict)
  auto_hparams: bool = True
  min_frequency: Optional[int] = None
  eval_fraction: Optional[float] = None
  split: str = "hash"
  max_bad_fraction: float = features.DEFAULT_MAX_BAD_FRACTION
  skip_foreign_files: bool = False
  min_auc: float = DEFAULT_MIN_AUC
  calibration_band: Tuple[float, float] = DEFAULT_CALIBRATION_BAND
  max_auc_drop: float = DEFAULT_MAX_AUC_DROP
  max_logloss_increase: float = DEFAULT_MAX_LOGLOSS_INCREASE
  max_auc_below_lr: Optional[float] = DEFAULT_MAX_AUC_BELOW_LR
  slice_features: Optional[Tuple[str, ...]] = None
  min_slice_size: int = DEFAULT_MIN_SLICE_SIZE
  frequency_field: str = settings.ALL_FIELDS
  frequency_thresholds: Tuple[int, int] = (
      settings.DEFAULT_FREQUENCY_THRESHOLDS)
  embedding_update: str = settings.DEFAULT_EMBEDDING_UPDATE
  cowclip_variant: str = settings.DEFAULT_COWCLIP_VARIANT
  model_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  beam_args: Tuple[str, ...] = DIRECT_BEAM_ARGS
  schema_root: str = SCHEMA_ROOT
  local_metadata: bool = True
  trainer_gpus: int = 0
  trainer_accelerator: str = DEFAULT_ACCELERATOR
  tune: bool = False
  trials: int = settings.DEFAULT_TRIALS
  tuner: str = settings.DEFAULT_TUNER
  search_space: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  tune_model_size: bool = False
  hparams_from: Optional[str] = None
  stop_after_tuner: bool = False
  negative_sampling_rate: float = settings.DEFAULT_NEGATIVE_SAMPLING_RATE
  bias_constraints: Tuple[str, ...] = ()
  bias_constraint_lr: float = settings.DEFAULT_BIAS_CONSTRAINT_LR
  replicas: int = 1
  push: str = settings.DEFAULT_PUSH
  max_pd: Optional[float] = None
  distribution: str = settings.DEFAULT_DISTRIBUTION
  cpu_devices: int = 1
  seed: Optional[int] = None

  def __post_init__(self):
    features.get_spec(self.dataset)  # Fails early on an unknown dataset.
    if self.runner not in RUNNERS:
      raise ValueError(f"unknown runner {self.runner!r}; choose from {RUNNERS}")
    if self.split not in features.SPLIT_MODES:
      raise ValueError(f"unknown split {self.split!r}; choose from "
                       f"{features.SPLIT_MODES}")
    if self.trainer_gpus < 0:
      raise ValueError(f"trainer_gpus must be >= 0, got {self.trainer_gpus}")
    if self.trainer_gpus and not self.trainer_accelerator:
      raise ValueError("trainer_accelerator is empty but trainer_gpus is "
                       f"{self.trainer_gpus}")
    if self.max_auc_below_lr is not None and not self.max_auc_below_lr >= 0:
      raise ValueError("max_auc_below_lr must be >= 0 (or None: no check), "
                       f"got {self.max_auc_below_lr}")
    low, high = self.calibration_band
    if not 0 < low < 1 < high:
      raise ValueError(f"calibration band must be (low < 1 < high), got "
                       f"{self.calibration_band}")
    bad_slices = set(self.eval_slice_features) - set(
        self.spec.int_categorical + self.spec.str_categorical)
    if bad_slices:
      raise ValueError(f"cannot slice by {sorted(bad_slices)}: not raw "
                       f"categorical features of {self.dataset}")
    if self.max_pd is not None and (self.replicas < 2 or
                                    not self.max_pd > 0):
      raise ValueError("max_pd (--max-pd) bounds the Prediction Difference "
                       "between replicas: it needs replicas >= 2 and a "
                       f"value > 0, got max_pd={self.max_pd}, "
                       f"replicas={self.replicas}")
    hparams.check_overrides(self.hparams)
    self.trainer_settings  # pylint: disable=pointless-statement
    self._check_tuning()

  def _check_tuning(self) -> None:
    if self.hparams_from and (self.tune or self.hparams):
      raise ValueError("hparams_from (--hparams-from) brings in tuned values: "
                       "it cannot be combined with tune (--tune) or with "
                       "hyperparameter overrides, which it would replace")
    if self.stop_after_tuner and not self.tune:
      raise ValueError("stop_after_tuner needs tune")
    if not self.tune:
      if self.search_space or self.tune_model_size:
        raise ValueError("search_space (--search-space) and tune_model_size "
                         "(--tune-model-size) are only used with tune "
                         "(--tune)")
      return
    if self.hparams:
      raise ValueError(f"hyperparameter overrides {sorted(self.hparams)} "
                       "conflict with tune: the Tuner picks every base value; "
                       "fix one in the search space instead, e.g. "
                       '{"r": 1.0}')
    search_space_lib.search_space(
        self.dataset, self.tuning_settings.search_space,
        self.tune_model_size, source="search_space",
        model_options=self.trainer_settings.model_options)

  @property
  def spec(self) -> features.DatasetSpec:
    return features.get_spec(self.dataset)

  @property
  def pipeline_name(self) -> str:
    return f"cowclip-{self.dataset}"

  @property
  def pipeline_root(self) -> str:
    return os.path.join(self.output, "pipeline")

  @property
  def metadata_path(self) -> str:
    return os.path.join(self.output, "metadata.sqlite")

  @property
  def serving_dir(self) -> str:
    return os.path.join(self.output, "serving")

  @property
  def schema_path(self) -> str:
    return os.path.join(self.schema_root, self.dataset, "schema.pbtxt")

  @property
  def base_hparams(self) -> Dict[str, float]:
    """The dataset's base hyperparameters with the user's overrides."""
    return {**self.spec.base_hparams, **self.hparams}

  @functools.cached_property
  def estimated_rows(self) -> Optional[int]:
    """estimate_rows(data), read once: Transform's threshold and
    StatisticsGen's sampling both size themselves by it."""
    return estimate_rows(self.data)

  @property
  def vocabulary_min_frequency(self) -> int:
    """The threshold Transform uses: the configured one, else the dataset's
    for the estimated train rows of `data` (its published one when `data`
    cannot be read from here, e.g. a gs:// path at compile time)."""
    if self.min_frequency is not None:
      return self.min_frequency
    rows = self.estimated_rows
    if rows is None:
      return self.spec.min_frequency
    eval_fraction = (self.spec.eval_fraction if self.eval_fraction is None
                     else self.eval_fraction)
    return self.spec.auto_min_frequency(round(rows * (1 - eval_fraction)))

  @property
  def transform_config(self) -> Dict[str, object]:
    """custom_config of the Transform component (JSON-serialisable)."""
    return {"dataset": self.dataset,
            "min_frequency": self.vocabulary_min_frequency}

  @property
  def eval_slice_features(self) -> Tuple[str, ...]:
    return (self.spec.slice_features if self.slice_features is None
            else tuple(self.slice_features))

  @property
  def auto_hparam_keys(self) -> List[str]:
    """The base hyperparameters run_fn derives from the data size."""
    if not self.auto_hparams:
      return []
    return [k for k in scaling.AUTO_KEYS if k not in self.hparams]

  @functools.cached_property
  def trainer_settings(self) -> settings.TrainerSettings:
    """The Trainer's settings (validated when the config is made)."""
    return settings.TrainerSettings(
        dataset=self.dataset, model=self.model, batch_size=self.batch_size,
        epochs=self.epochs, scaling_rule=self.scaling_rule,
        cowclip=self.cowclip, base_hparams=self.base_hparams,
        auto_hparams=tuple(self.auto_hparam_keys),
        embedding_update=self.embedding_update,
        cowclip_variant=self.cowclip_variant,
        model_options=self.model_options,
        frequency_field=self.frequency_field,
        frequency_thresholds=self.frequency_thresholds,
        negative_sampling_rate=self.negative_sampling_rate,
        bias_constraints=tuple(self.bias_constraints),
        bias_constraint_lr=self.bias_constraint_lr,
        replicas=self.replicas, push=self.push,
        distribution=self.distribution, cpu_devices=self.cpu_devices,
        seed=self.seed)

  @functools.cached_property
  def tuning_settings(self) -> settings.TuningSettings:
    """The Tuner's search settings (used with tune)."""
    return settings.TuningSettings(
        tuner=self.tuner, trials=self.trials,
        search_space=self.search_space,
        tune_model_size=self.tune_model_size)

  @property
  def trainer_config(self) -> Dict[str, object]:
    """custom_config of the Trainer: recorded in ML Metadata with the run."""
    return self.trainer_settings.to_custom_config()

  @property
  def tuner_config(self) -> Dict[str, object]:
    """custom_config of the Tuner: the Trainer's plus the search settings."""
    return self.tuning_settings.to_custom_config(self.trainer_settings)


def _lines_per_stored_byte(path: str) -> float:
  """Lines per byte on disk in the head of a file (decompressed if gzipped:
  lines over the compressed bytes read)."""
  with open(path, "rb") as raw:
    gzipped = raw.read(2) == _GZIP_MAGIC
    raw.seek(0)
    if gzipped:
      with gzip.GzipFile(fileobj=raw) as text:
        lines = text.read(_ROW_ESTIMATE_SAMPLE_BYTES).count(b"\n")
      return (lines or 1) / max(raw.tell(), 1)
    head = raw.read(_ROW_ESTIMATE_SAMPLE_BYTES)
  return (head.count(b"\n") or 1) / max(len(head), 1)


def estimate_rows(data: str) -> Optional[int]:
  """About how many rows the raw file(s) at `data` hold, or None.

  Each file's bytes times the lines per byte of its first MiB: cheap on any
  size, and close enough to pick a vocabulary threshold. None for a remote
  path (gs://...) or when nothing is readable.
  """
  if "://" in data:
    return None
  if os.path.isdir(data):
    paths = sorted(os.path.join(data, n) for n in os.listdir(data)
                   if not n.startswith("."))
  else:
    paths = [data]
  paths = [p for p in paths if os.path.isfile(p)]
  if not paths:
    return None
  try:
    rows = sum(os.path.getsize(p) * _lines_per_stored_byte(p) for p in paths)
  except (OSError, EOFError):  # Not gzip after all: the input check says so.
    return None
  return max(1, round(rows))


def beam_pipeline_args(runner: str,
                       image: Optional[str] = None,
                       project: Optional[str] = None,
                       region: Optional[str] = None,
                       temp_location: Optional[str] = None,
                       job_endpoint: Optional[str] = None,
                       environment_type: str = "DOCKER",
                       environment_config: Optional[str] = None
                      ) -> Tuple[str, ...]:
  """The Beam arguments of one Beam runner: the one place each set lives.

  Args:
    runner: one of BEAM_RUNNERS. 'direct' runs Beam inside the component's
      own process; 'dataflow' on Google Cloud Dataflow; 'flink' and 'spark'
      through the portable runner of a Beam job server for that engine.
    image: the pipeline image. Remote workers run it as their SDK container
      so the dotted-path functions import there too.
    project: Dataflow: the Google Cloud project.
    region: Dataflow: the region.
    temp_location: Dataflow: a gs:// directory for temporary files.
    job_endpoint: Flink/Spark: host:port of the Beam job server.
    environment_type: Flink/Spark: one of BEAM_ENVIRONMENTS.
    environment_config: Flink/Spark: the SDK environment's config (DOCKER:
      the image, the default; EXTERNAL: host:port of a worker pool).

  Returns:
    The arguments, in a fixed order.

  Raises:
    ValueError: an unknown runner or environment, or a value the runner needs
      is missing.
  """
  if runner not in BEAM_RUNNERS:
    raise ValueError(f"unknown Beam runner {runner!r}; choose from "
                     f"{BEAM_RUNNERS}")
  if runner == "direct":
    return DIRECT_BEAM_ARGS
  if runner == "dataflow":
    needed = {"project": project, "region": region,
              "temp_location": temp_location, "image": image}
  else:
    if environment_type not in BEAM_ENVIRONMENTS:
      raise ValueError(f"unknown Beam environment type {environment_type!r}; "
                       f"choose from {BEAM_ENVIRONMENTS}")
    if environment_type == "DOCKER":
      environment_config = environment_config or image
    needed = {"job_endpoint": job_endpoint}
    if environment_type in ("DOCKER", "EXTERNAL"):
      needed["environment_config"] = environment_config
  missing = [name for name, value in needed.items() if not value]
  if missing:
    raise ValueError(f"the {runner} Beam runner needs {', '.join(missing)}")
  if runner == "dataflow":
    return ("--runner=DataflowRunner", f"--project={project}",
            f"--region={region}", f"--temp_location={temp_location}",
            f"--sdk_container_image={image}")
  args = ("--runner=PortableRunner", f"--job_endpoint={job_endpoint}",
          f"--environment_type={environment_type}")
  if environment_config:
    args += (f"--environment_config={environment_config}",)
  return args
