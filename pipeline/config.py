"""The run configuration: one typed object every runner and tool reads.

The CLI only parses arguments into a `PipelineConfig`; `create_pipeline`
turns it into TFX components. Defaults that depend on the dataset come from
`trainer_module.features` specs, not from literals here.
"""

import dataclasses
import os
from typing import Dict, Mapping, Optional, Tuple

from trainer_module import features

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEMA_ROOT = os.path.join(REPO_ROOT, "schema")

RUNNERS = ("beam", "local")
SPLITS = ("hash", "sequential")
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

# The first run of a pipeline has no baseline: it is judged by this floor.
# 0.5 is chance for a binary classifier; anything at or below it is broken.
DEFAULT_MIN_AUC = 0.55


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
    epochs: training epochs.
    runner: 'beam' (BeamDagRunner) or 'local' (LocalDagRunner).
    scaling_rule: one of trainer_module.scaling.RULES.
    cowclip: clip embedding gradients with CowClip.
    hparams: overrides of the dataset's base hyperparameters.
    min_frequency: vocabulary frequency threshold (None: dataset default).
    eval_fraction: share of rows in eval (None: dataset default).
    split: 'hash' (deterministic per row) or 'sequential' (the tail is eval).
    max_bad_fraction: share of malformed rows dropped before failing.
    min_auc: the Evaluator's absolute AUC floor on the overall slice.
    beam_args: extra Beam pipeline arguments.
    schema_root: directory holding <dataset>/schema.pbtxt (a container path
      when the pipeline is compiled for Kubeflow).
    local_metadata: keep ML Metadata in <output>/metadata.sqlite; False on
      orchestrators that own the store (Kubeflow: the cluster's MySQL).
    trainer_gpus: accelerators the Trainer's pod requests (0: none).
    trainer_accelerator: the accelerator type of that request.
  """
  dataset: str
  data: str
  output: str
  model: str = "deepfm"
  batch_size: int = 1024
  epochs: int = 1
  runner: str = "beam"
  scaling_rule: str = "cowclip"
  cowclip: bool = True
  hparams: Mapping[str, float] = dataclasses.field(default_factory=dict)
  min_frequency: Optional[int] = None
  eval_fraction: Optional[float] = None
  split: str = "hash"
  max_bad_fraction: float = 0.001
  min_auc: float = DEFAULT_MIN_AUC
  beam_args: Tuple[str, ...] = DIRECT_BEAM_ARGS
  schema_root: str = SCHEMA_ROOT
  local_metadata: bool = True
  trainer_gpus: int = 0
  trainer_accelerator: str = DEFAULT_ACCELERATOR

  def __post_init__(self):
    features.get_spec(self.dataset)  # Fails early on an unknown dataset.
    if self.runner not in RUNNERS:
      raise ValueError(f"unknown runner {self.runner!r}; choose from {RUNNERS}")
    if self.split not in SPLITS:
      raise ValueError(f"unknown split {self.split!r}; choose from {SPLITS}")
    if self.batch_size <= 0 or self.epochs <= 0:
      raise ValueError("batch size and epochs must be positive")
    if self.trainer_gpus < 0:
      raise ValueError(f"trainer_gpus must be >= 0, got {self.trainer_gpus}")
    if self.trainer_gpus and not self.trainer_accelerator:
      raise ValueError("trainer_accelerator is empty but trainer_gpus is "
                       f"{self.trainer_gpus}")
    unknown = set(self.hparams) - set(self.spec.base_hparams)
    if unknown:
      raise ValueError(f"unknown hyperparameters {sorted(unknown)}; known: "
                       f"{sorted(self.spec.base_hparams)}")

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

  @property
  def transform_config(self) -> Dict[str, object]:
    """custom_config of the Transform component (JSON-serialisable)."""
    return {"dataset": self.dataset,
            "min_frequency": (self.spec.min_frequency
                              if self.min_frequency is None
                              else self.min_frequency)}

  @property
  def trainer_config(self) -> Dict[str, object]:
    """custom_config of the Trainer: recorded in ML Metadata with the run."""
    return {"dataset": self.dataset,
            "model": self.model,
            "batch_size": self.batch_size,
            "epochs": self.epochs,
            "scaling_rule": self.scaling_rule,
            "cowclip": self.cowclip,
            "base_batch_size": self.spec.base_batch_size,
            "base_hparams": self.base_hparams}


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
