"""Data-parallel training: which tf.distribute strategy, and the cross-
replica sums and gathers that keep the CowClip step exact.

An exact data-parallel CowClip step over R replicas at global batch B makes
the update one device makes at batch B (training.Step.train_step):

* the loss is normalised by the GLOBAL batch (its importance weights
  summed over replicas), so the replicas' dense gradients SUM to the
  single-device gradient; the step sums them itself (``global_sum``) and
  the optimizers apply what they get (optimizers.GlobalGradients);
* every replica gathers the batch's ids, their gradient slices and weights
  from all replicas (``gather_columns``) and runs the single-device table
  update on them: counts over the global batch, each row's gradient summed
  over replicas BEFORE CowClip clips it, the L2 term once. Each replica
  computes the same update, so the mirrored tables stay identical;
* metrics are updated with the gathered labels and logits: every replica
  holds the global batch's metrics.

With one device the helpers return their input: the same step, no
collective in its graph.

Strategies (``--distribution``):
  none: the default strategy (one device).
  mirrored: MirroredStrategy over the GPUs, or over the logical CPU
    devices (``--cpu-devices N``: the same path on a machine without GPUs).
  multi-worker: MultiWorkerMirroredStrategy from TF_CONFIG (Kubeflow's
    TFJob and Vertex AI's worker pools set it).
  auto: multi-worker when TF_CONFIG lists several workers, else mirrored
    when there is more than one GPU (or logical CPU device), else none.
"""

import json
import os
from typing import List, Optional, Sequence

import tensorflow as tf

from trainer_module import settings

DISTRIBUTIONS = settings.DISTRIBUTIONS


def configure_cpu_devices(count: int) -> None:
  """Splits the CPU into ``count`` logical devices (1: leave it whole).

  Must run before TensorFlow initialises its devices; a second call with
  the same count does nothing.

  Raises:
    ValueError: the devices are already initialised with another count.
  """
  settings.check_positive_int("cpu_devices", count)
  if count == 1:
    return
  (cpu,) = tf.config.list_physical_devices("CPU")
  current = tf.config.get_logical_device_configuration(cpu)
  if current is not None and len(current) == count:
    return
  try:
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * count)
  except RuntimeError:
    raise ValueError(
        f"cannot split the CPU into {count} devices: TensorFlow already "
        f"initialised {len(tf.config.list_logical_devices('CPU'))}; set "
        "--cpu-devices when the process starts") from None


def tf_config_workers() -> int:
  """Workers (chief included) that TF_CONFIG lists; 0 without TF_CONFIG."""
  text = os.environ.get("TF_CONFIG")
  if not text:
    return 0
  try:
    cluster = json.loads(text).get("cluster", {})
  except (ValueError, AttributeError):
    raise ValueError(f"TF_CONFIG is not a JSON object: {text!r}") from None
  return sum(len(cluster.get(kind, ())) for kind in ("chief", "worker"))


def _devices() -> List[str]:
  """The devices a mirrored strategy spans: every GPU, else every logical
  CPU device."""
  gpus = tf.config.list_logical_devices("GPU")
  return [d.name for d in gpus or tf.config.list_logical_devices("CPU")]


def resolve(distribution: str) -> str:
  """``distribution`` with "auto" replaced by what it means here."""
  if distribution not in DISTRIBUTIONS:
    raise ValueError(f"unknown distribution {distribution!r}; choose one of "
                     f"{DISTRIBUTIONS}")
  if distribution != "auto":
    return distribution
  if tf_config_workers() > 1:
    return "multi-worker"
  return "mirrored" if len(_devices()) > 1 else "none"


_STRATEGIES = {}


def strategy(distribution: str, cpu_devices: int = 1
            ) -> tf.distribute.Strategy:
  """The tf.distribute strategy of ``distribution`` over the CPU split into
  ``cpu_devices`` (configure_cpu_devices). One per process and kind:
  TensorFlow allows one multi-worker strategy per process."""
  configure_cpu_devices(cpu_devices)
  kind = resolve(distribution)
  if kind == "none":
    return tf.distribute.get_strategy()
  if kind not in _STRATEGIES:
    if kind == "mirrored":
      _STRATEGIES[kind] = tf.distribute.MirroredStrategy(_devices())
    else:
      if tf_config_workers() < 1:
        raise ValueError("--distribution multi-worker needs TF_CONFIG to "
                         "list the cluster's workers")
      _STRATEGIES[kind] = tf.distribute.MultiWorkerMirroredStrategy()
  return _STRATEGIES[kind]


def check_batch_size(batch_size: int, replicas: int) -> None:
  """Each replica trains on batch_size / replicas rows: refuses a batch
  size the replicas do not divide."""
  if batch_size % replicas:
    raise ValueError(
        f"batch size {batch_size} does not split evenly over {replicas} "
        f"replicas; use a multiple of {replicas}")


def is_chief(strategy_: tf.distribute.Strategy) -> bool:
  """Whether this process writes the outputs (the only one, or the
  multi-worker cluster's chief)."""
  resolver = getattr(strategy_, "cluster_resolver", None)
  if resolver is None or not resolver.cluster_spec().as_dict():
    return True
  kind, index = resolver.task_type, resolver.task_id
  has_chief = "chief" in resolver.cluster_spec().as_dict()
  return kind == "chief" or (not has_chief and kind == "worker" and
                             index == 0)


def chiefs_answer(strategy_: tf.distribute.Strategy, answer: bool) -> bool:
  """The chief's `answer` on every worker of a multi-worker cluster, else
  `answer`: what each worker measured alone (--precision auto's probe)
  must not split the cluster. A collective: every worker calls it at the
  same point (plan.resolve)."""
  if tf_config_workers() < 2:
    return answer
  vote = float(answer and is_chief(strategy_))

  @tf.function
  def votes():
    return strategy_.reduce(tf.distribute.ReduceOp.SUM, strategy_.run(
        lambda: tf.constant(vote)), axis=None)

  return bool(votes().numpy() > 0)


def split_by_examples(dataset: tf.data.Dataset) -> tf.data.Dataset:
  """The dataset, split between workers by examples, not by files.

  Each worker reads the whole input and keeps its share of every global
  batch, so the global batches are the one-device ones (the parity) and
  every worker runs the same number of steps. (Split by files, the workers
  would get different rows per batch, and uneven files uneven step counts,
  on which a multi-worker epoch hangs.) One device or one machine: the
  dataset runs once and Keras splits its batches.
  """
  options = tf.data.Options()
  options.experimental_distribute.auto_shard_policy = (
      tf.data.experimental.AutoShardPolicy.DATA)
  return dataset.with_options(options)


# Replica-context helpers of the training step (see the module doc).


def _context() -> Optional[tf.distribute.ReplicaContext]:
  """The replica context when the step runs on several replicas."""
  context = tf.distribute.get_replica_context()
  if context is None or context.num_replicas_in_sync == 1:
    return None
  return context


def global_sum(values):
  """Sums a tensor (or a list of tensors) over the replicas."""
  context = _context()
  if context is None or not tf.nest.flatten(values):
    return values
  return context.all_reduce(tf.distribute.ReduceOp.SUM, values)


def gather_columns(values: Sequence[tf.Tensor]) -> List[tf.Tensor]:
  """Each tensor's rows from every replica, in replica order: the global
  batch. The tensors (one dtype, the same rows: a batch's columns) travel
  as one: each collective has a fixed cost, and a step has a hundred of
  these tensors."""
  context = _context()
  if context is None or not values:
    return list(values)
  widths = [1 if v.shape.rank == 1 else v.shape[1] for v in values]
  block = tf.concat([tf.reshape(v, [-1, w]) for v, w in zip(values, widths)],
                    axis=1)
  gathered = context.all_gather(block, axis=0)
  # Column slices, not tf.split: SplitV has no int64 GPU kernel.
  starts = [sum(widths[:i]) for i in range(len(widths))]
  return [tf.reshape(gathered[:, start], [-1]) if v.shape.rank == 1 else
          gathered[:, start:start + width]
          for v, start, width in zip(values, starts, widths)]


def replica_logs(logs):
  """A step's logs as Keras 3.6 can reduce them over the replicas.

  Every replica logs the same global-batch metrics, and Keras averages
  them; under MultiWorkerMirroredStrategy it averages along axis 0, which a
  scalar lacks, so there each becomes a [1] tensor.
  """
  if not isinstance(tf.distribute.get_strategy(),
                    tf.distribute.MultiWorkerMirroredStrategy):
    return logs
  return {name: tf.reshape(value, [1]) for name, value in logs.items()}
