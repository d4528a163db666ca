"""The run configuration: one typed object every runner and tool reads.

The CLI only parses arguments into a `PipelineConfig`; `create_pipeline`
turns it into TFX components. Defaults that depend on the dataset come from
`trainer_module.features` specs, not from literals here.
"""

import dataclasses
import functools
import gzip
import os
from typing import Any, Dict, Optional, Sequence
from typing import Tuple

from components.raw_example_gen import spans
from pipeline.code_fingerprint import REPO_ROOT
from trainer_module import features
from trainer_module import options
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
#
# The SDK container image is named only for TFX, which otherwise packages
# itself as an sdist for remote workers at every Beam component's start
# (tfx.utils.dependency_utils: 3.4 s and 2,700 files left in the temporary
# directory, per component) unless a dependency flag is set. The runner in
# this process stages nothing and reads no image.
DIRECT_BEAM_ARGS = ("--runner=FnApiRunner", "--direct_running_mode=in_memory",
                    "--direct_num_workers=1",
                    "--sdk_container_image=apache/beam_python3.10_sdk")
# The runners Beam takes by a short name in --runner, case aside, with or
# without "Runner": its StandardOptions.KNOWN_RUNNER_NAMES (a test checks),
# written out so that the config does not import Beam (2 s). Any other,
# Dask's for one, by its class's dotted path.
BEAM_RUNNER_NAMES = ("DataflowRunner", "BundleBasedDirectRunner",
                     "DirectRunner", "SwitchingDirectRunner",
                     "InteractiveRunner", "FlinkRunner", "FnApiRunner",
                     "PortableRunner", "PrismRunner", "SparkRunner",
                     "TestDirectRunner", "TestDataflowRunner")

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


_FLOATS = options.comma_separated(float, "numbers")
_NAMES = options.comma_separated(str, "names")


@dataclasses.dataclass(frozen=True)
class IngestionSettings:
  """How raw files become examples and vocabularies (ExampleGen and
  Transform).

  Attributes:
    min_frequency: vocabulary frequency threshold (None: the dataset's
      threshold for the estimated size of the data, spec.auto_min_frequency).
    eval_fraction: share of rows in eval (None: the dataset's).
    split: 'hash' (deterministic per row) or 'sequential' (the tail is eval).
    max_bad_fraction: share of malformed rows dropped before failing.
    skip_foreign_files: skip the files of the data that are not the
      dataset's training data (a test file, a readme) instead of refusing
      them.
    span: with daily data (`{SPAN}` in --data), the span ExampleGen reads:
      'latest' (None: the same) or a span number; or 'rolling:K', the
      latest span, with Transform and the Trainer reading it and the K-1
      spans before it; or 'A-B', span B, read with spans A to B
      (components/raw_example_gen/spans.py).
  """
  min_frequency: Optional[int] = options.option(
      None, "vocabulary frequency threshold (default: the dataset's for the "
      "data's size: Criteo 10 at its 41M training rows, proportionally "
      "fewer, at least 2; Avazu 2)", parse=int)
  eval_fraction: Optional[float] = options.option(
      None, "share of rows in eval (default: Criteo 0.1, Avazu 0.2)",
      parse=float)
  split: str = options.option(
      "hash", "hash: deterministic per row; sequential: the last rows are "
      "eval (Criteo is in time order)", choices=features.SPLIT_MODES)
  max_bad_fraction: float = options.option(
      features.DEFAULT_MAX_BAD_FRACTION, "malformed rows above this share "
      "fail the run")
  skip_foreign_files: bool = options.option(
      False, "skip the files of --data that are not the dataset's training "
      "data (an unlabelled test file, a readme, an archive), naming them, "
      "instead of failing")
  span: Optional[str] = options.option(
      None, "with daily data (--data 'logs/day-{SPAN}/'), the day "
      "ExampleGen ingests: latest (the default) or a span number N; "
      "rolling:K ingests the latest and trains on it and the K-1 days before "
      "it, each ingested by its own day's run; A-B ingests day B and trains "
      "on days A to B (a backfill with a window)")

  def __post_init__(self):
    options.check_choices(self)
    spans.parse_span_choice(self.span)  # Its ValueError names the choices.


@dataclasses.dataclass(frozen=True)
class GateSettings:
  """What the Evaluator reports and what it must see to bless a model.

  Attributes:
    min_auc: the absolute AUC floor on the overall slice.
    calibration_band: (low, high) allowed calibration, overall slice.
    max_auc_drop: allowed AUC drop against the latest blessed model.
    max_logloss_increase: allowed log-loss rise against that model.
    max_auc_below_lr: allowed overall AUC shortfall of the model against
      the logistic-regression baseline of the same run (None: no check).
    slice_features: categorical raw features to slice the evaluation by
      (None: the dataset's defaults).
    min_slice_size: slices with fewer eval examples are left out of the
      report (they are noise).
    max_pd: the bound on the replicas' Prediction Difference, overall slice
      (None: no check; needs replicas > 1).
  """
  min_auc: float = options.option(DEFAULT_MIN_AUC,
                                  "AUC floor (overall slice) for pushing")
  calibration_band: Tuple[float, float] = options.option(
      DEFAULT_CALIBRATION_BAND, "allowed calibration (mean prediction / mean "
      "label), overall slice", parse=_FLOATS, metavar="LOW,HIGH")
  max_auc_drop: float = options.option(
      DEFAULT_MAX_AUC_DROP, "allowed AUC drop vs the last blessed model")
  max_logloss_increase: float = options.option(
      DEFAULT_MAX_LOGLOSS_INCREASE,
      "allowed log-loss rise vs the last blessed model")
  max_auc_below_lr: Optional[float] = options.option(
      DEFAULT_MAX_AUC_BELOW_LR, "allowed AUC shortfall vs the "
      "logistic-regression baseline trained beside the model (--no-lr-check: "
      "no check; it is still trained and reported)", none_flag="--no-lr-check")
  slice_features: Optional[Tuple[str, ...]] = options.option(
      None, "categorical features to slice the evaluation by (default: per "
      "dataset)", parse=_NAMES, metavar="F1,F2")
  min_slice_size: int = options.option(
      DEFAULT_MIN_SLICE_SIZE, "leave out slices with fewer eval examples")
  max_pd: Optional[float] = options.option(
      None, "the replicas' PD on the overall slice may be at most this "
      "(default: no check)", parse=float)

  def __post_init__(self):
    if self.max_auc_below_lr is not None and not self.max_auc_below_lr >= 0:
      raise ValueError("max_auc_below_lr must be >= 0 (or None: no check), "
                       f"got {self.max_auc_below_lr}")
    low, high = self.calibration_band
    if not 0 < low < 1 < high:
      raise ValueError(f"calibration band must be (low < 1 < high), got "
                       f"{self.calibration_band}")
    if self.max_pd is not None and not self.max_pd > 0:
      raise ValueError(f"max_pd (--max-pd) must be > 0, got {self.max_pd}")


def _beam_flag(arg: str) -> str:
  """'--name' of a Beam argument '--name=value'."""
  return arg.split("=", 1)[0]


def add_beam_args(defaults: Sequence[str], given: Sequence[str]
                 ) -> Tuple[str, ...]:
  """`defaults` with the `given` Beam arguments added after them; a given
  value of a flag the defaults set replaces the default's."""
  flags = {_beam_flag(arg) for arg in given}
  return tuple(arg for arg in defaults
               if _beam_flag(arg) not in flags) + tuple(given)


def check_beam_runner(beam_args: Sequence[str]) -> None:
  """Refuses a --runner Beam would not find, naming the names it takes
  (Beam's own message comes only when the first component runs)."""
  known = {name.lower() for name in BEAM_RUNNER_NAMES}
  for arg in beam_args:
    if _beam_flag(arg) != "--runner":
      continue
    runner = arg.partition("=")[2]
    if ("." not in runner and runner.lower() not in known and
        runner.lower() + "runner" not in known):
      raise ValueError(
          f"unknown Beam runner {runner!r} in {arg}: Beam takes these by "
          f"name: {', '.join(BEAM_RUNNER_NAMES)}; any other by its class's "
          "dotted path, e.g. --runner=apache_beam.runners.dask.dask_runner."
          "DaskRunner")


@dataclasses.dataclass(frozen=True)
class RunnerSettings:
  """Where the pipeline runs.

  Attributes:
    dag_runner: 'beam' (BeamDagRunner) or 'local' (LocalDagRunner).
    beam_args: the Beam pipeline arguments.
    schema_root: the directory of the curated schemas.
    local_metadata: a local ML Metadata store (off in a Kubeflow spec).
    gpus: GPUs the Trainer's (and Tuner's) pod requests on Kubeflow.
    gpu_type: their Kubernetes resource name.
  """
  dag_runner: str = options.option(
      "beam", "beam: BeamDagRunner; local: LocalDagRunner", choices=RUNNERS,
      flag="--runner")
  beam_args: Tuple[str, ...] = options.option(
      DIRECT_BEAM_ARGS, "a Beam pipeline argument added to the defaults; "
      "one of a flag they set replaces it (repeatable), e.g. "
      "--beam-arg=--direct_num_workers=2", flag="--beam-arg", repeat=True,
      add=add_beam_args)
  schema_root: str = SCHEMA_ROOT
  local_metadata: bool = True
  gpus: int = options.option(0, "GPUs the Trainer's pod requests")
  gpu_type: str = options.option(
      DEFAULT_ACCELERATOR, "Kubernetes resource name of the GPUs")

  def __post_init__(self):
    options.check_choices(self)
    object.__setattr__(self, "beam_args", tuple(self.beam_args))
    check_beam_runner(self.beam_args)
    if self.gpus < 0:
      raise ValueError(f"gpus must be >= 0, got {self.gpus}")
    if self.gpus and not self.gpu_type:
      raise ValueError(f"gpu_type is empty but gpus is {self.gpus}")


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
  """Everything one pipeline run needs: where, and each component's
  settings (create_pipeline hands each its own).

  Attributes:
    dataset: 'criteo' or 'avazu' (selects the spec, schema and defaults).
    data: a raw file, or a directory whose files are all read.
    output: DIR holding the pipeline root, the metadata store and the
      pushed models; re-running with the same DIR reuses cached results.
    ingestion: ExampleGen's and Transform's settings.
    trainer: the Trainer's (None: the defaults for `dataset`).
    tuning: whether there is a Tuner, and its search.
    gate: the Evaluator's.
    runner: where it runs.
  """
  dataset: str
  data: str
  output: str
  ingestion: IngestionSettings = options.group(
      IngestionSettings, "ingestion", "ExampleGen and Transform")
  trainer: settings.TrainerSettings = options.group(
      settings.TrainerSettings, "training", "the Trainer", default=None)
  tuning: settings.TuningSettings = options.group(
      settings.TuningSettings, "tuning", "KerasTuner search over the BASE "
      "hyperparameters (at the base batch size); trials train at "
      "--batch-size with the scaling rule")
  gate: GateSettings = options.group(
      GateSettings, "gate", "what the Evaluator must see to push the model")
  runner: RunnerSettings = options.group(
      RunnerSettings, "runner", "where the pipeline runs")

  def __post_init__(self):
    features.get_spec(self.dataset)  # Fails early on an unknown dataset.
    if self.trainer is None:
      object.__setattr__(self, "trainer",
                         settings.TrainerSettings(dataset=self.dataset))
    if self.trainer.dataset != self.dataset:
      raise ValueError(f"the trainer's settings are for "
                       f"{self.trainer.dataset}, the pipeline's data for "
                       f"{self.dataset}")
    bad_slices = set(self.eval_slice_features) - set(
        self.spec.int_categorical + self.spec.str_categorical)
    if bad_slices:
      raise ValueError(f"cannot slice by {sorted(bad_slices)}: not raw "
                       f"categorical features of {self.dataset}")
    if self.gate.max_pd is not None and self.trainer.served_replicas < 2:
      raise ValueError("max_pd (--max-pd) bounds the Prediction Difference "
                       "between replicas: it needs replicas >= 2, got "
                       f"replicas={self.trainer.replicas}")
    self._check_tuning()

  def _check_tuning(self) -> None:
    tuning = self.tuning
    if tuning.hparams_from and self.trainer.hparams:
      raise ValueError("hparams_from (--hparams-from) brings in tuned values: "
                       "it cannot be combined with hyperparameter overrides, "
                       "which it would replace")
    if not tuning.tune:
      return
    if self.trainer.hparams:
      raise ValueError(f"hyperparameter overrides {sorted(self.trainer.hparams)}"
                       " conflict with tune: the Tuner picks every base "
                       "value; fix one in the search space instead, e.g. "
                       '{"r": 1.0}')
    search_space_lib.search_space(
        self.dataset, tuning.search_space, tuning.tune_model_size,
        source="search_space", model_options=self.trainer.model_options)

  @classmethod
  def from_fields(cls, dataset: str, data: str, output: str,
                  **fields: Any) -> "PipelineConfig":
    """A config from settings named flat (`min_auc=0.5`, `replicas=2`,
    `embedding_dim=16`): each goes to the group that declares it, as the
    command-line flags do. Unknown names are refused."""
    unused = dict(fields)
    config = options.from_values(cls, unused, dataset=dataset, data=data,
                                 output=output)
    if unused:
      raise ValueError(f"unknown settings {sorted(unused)}")
    return config

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
    return os.path.join(self.runner.schema_root, self.dataset, "schema.pbtxt")

  @functools.cached_property
  def estimated_rows(self) -> Optional[int]:
    """estimate_rows(data) of the span ingested, read once: StatisticsGen's
    sampling sizes itself by it."""
    return estimate_rows(self.data, self.ingestion.span)

  @functools.cached_property
  def estimated_window_rows(self) -> Optional[int]:
    """estimate_rows of what Transform reads: with a window of days
    (`rolling:K`, `A-B`), its spans that are on disk; else the span
    ingested."""
    if spans.window_days(self.ingestion.span) == 1:
      return self.estimated_rows
    return estimate_rows(self.data, self.ingestion.span, whole_window=True)

  @property
  def span_registry_dir(self) -> str:
    """Where each daily run records its span's Examples, for the rolling
    windows of later runs (components/span_window.py)."""
    return os.path.join(self.output, "examples_by_span")

  @property
  def vocabulary_min_frequency(self) -> int:
    """The threshold Transform uses: the configured one, else the dataset's
    for the estimated train rows of `data` (its published one when `data`
    cannot be read from here, e.g. a gs:// path at compile time)."""
    if self.ingestion.min_frequency is not None:
      return self.ingestion.min_frequency
    rows = self.estimated_window_rows
    if rows is None:
      return self.spec.min_frequency
    return self.spec.auto_min_frequency(round(rows * (1 - self.eval_fraction)))

  @property
  def eval_fraction(self) -> float:
    """The share of rows in eval: the configured one, else the dataset's."""
    if self.ingestion.eval_fraction is None:
      return self.spec.eval_fraction
    return self.ingestion.eval_fraction

  @property
  def transform_config(self) -> Dict[str, object]:
    """custom_config of the Transform component (JSON-serialisable)."""
    return {"dataset": self.dataset,
            "min_frequency": self.vocabulary_min_frequency}

  @property
  def eval_slice_features(self) -> Tuple[str, ...]:
    return (self.spec.slice_features if self.gate.slice_features is None
            else tuple(self.gate.slice_features))

  @property
  def trainer_config(self) -> Dict[str, object]:
    """custom_config of the Trainer: recorded in ML Metadata with the run."""
    return self.trainer.to_custom_config()

  @property
  def tuner_config(self) -> Dict[str, object]:
    """custom_config of the Tuner: the Trainer's plus the search settings."""
    return self.tuning.to_custom_config(self.trainer)


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


def estimate_rows(data: str, span: Optional[str] = None,
                  whole_window: bool = False) -> Optional[int]:
  """About how many rows the raw file(s) at `data` hold, or None; with
  daily data ({SPAN}), those of the `span` ExampleGen reads (whole_window:
  and of the earlier spans of its window on disk, spans.window_files).

  Each file's bytes times the lines per byte of its first MiB: cheap on any
  size, and close enough to pick a vocabulary threshold. None for a remote
  path (gs://...) or when nothing is readable.
  """
  if "://" in data:
    return None
  if spans.has_span(data):
    try:
      paths = list(spans.window_files(data, span) if whole_window else
                   spans.span_files(data, span)[1])
    except ValueError:  # The input check says so.
      return None
  elif os.path.isdir(data):
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
                       environment_config: Optional[str] = None,
                       setup_file: Optional[str] = None
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
    setup_file: Flink/Spark: the project's pyproject.toml, for workers that
      are not the pipeline image (a local worker pool): Beam stages its
      sdist and the workers install it (kubeflow/sdk_worker_boot.py).

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
  if setup_file:
    args += (f"--setup_file={setup_file}",)
  return args
