"""Tests of data-parallel training: the mirrored CowClip step gives the
one-device update (distributed_parity.py, in its own process), and the
choice of strategy."""

import json
import os

import pytest

import script_output
from trainer_module import distribution
from trainer_module import settings

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def parity():
  """distributed_parity.py's results: every case, one process."""
  return script_output.json_of(os.path.join(HERE, "distributed_parity.py"))


CASES = ("dense-cowclip-paper", "sparse-cowclip-paper",
         "dense-cowclip-reference", "sparse-cowclip-reference",
         "dense-noclip", "sparse-noclip", "dense-weighted", "sparse-weighted",
         "dcnv2-sparse", "lr-baseline")


@pytest.mark.slow  # Trains, in another process (the parity fixture).
@pytest.mark.parametrize("case", CASES)
def test_two_replicas_make_the_one_device_update(parity, case):
  """3 steps (Adam's first is nearly sign-only and hides scale errors; the
  last batch splits 5/4) at the same global batch: weights within 1e-5
  relative, and the logged metrics (train and validation: loss, logloss,
  auc, clipped_fraction) the same. Before the step summed and gathered
  itself, the embedding rows moved up to 1.2x too far."""
  result = parity[case]
  assert result["replicas"] == 2
  assert result["update"] > 1e-3  # The weights did move.
  assert result["weight_relative_difference"] < 1e-5
  assert max(result["metric_difference"].values()) < 1e-5
  assert {"loss", "logloss", "auc", "val_logloss", "val_auc"} <= set(
      result["metric_difference"])


MULTI_WORKER_CASES = ("sparse-cowclip-paper", "dense-weighted")


@pytest.mark.slow  # Trains, in two worker processes.
def test_two_workers_make_the_one_device_update():
  """Two worker processes on localhost (TF_CONFIG), one CPU device each,
  MultiWorkerMirroredStrategy: the chief's weights after 3 steps match
  one device at the same global batch, as the mirrored ones do."""
  script = os.path.join(HERE, "distributed_parity.py")
  ports = ",".join(str(p) for p in script_output.free_ports(2))
  other = script_output.start(script, "--worker", "1", ports,
                              *MULTI_WORKER_CASES)
  results = script_output.json_of(script, "--worker", "0", ports,
                                  *MULTI_WORKER_CASES)
  assert script_output.finish(other) == results  # The same step.

  assert set(results) == set(MULTI_WORKER_CASES)
  for result in results.values():
    assert result["replicas"] == 2
    assert result["update"] > 1e-3
    assert result["weight_relative_difference"] < 1e-5
    assert max(result["metric_difference"].values()) < 1e-5


@pytest.mark.slow  # Reads the parity fixture, which trains.
def test_parity_covers_every_case(parity):
  assert set(parity) == set(CASES)


def test_auto_picks_multi_worker_from_tf_config(monkeypatch):
  monkeypatch.setenv("TF_CONFIG", json.dumps({
      "cluster": {"worker": ["localhost:1", "localhost:2"]},
      "task": {"type": "worker", "index": 0}}))
  assert distribution.tf_config_workers() == 2
  assert distribution.resolve("auto") == "multi-worker"
  assert distribution.resolve("none") == "none"


def test_auto_without_tf_config_or_devices_is_one_device(monkeypatch):
  monkeypatch.delenv("TF_CONFIG", raising=False)
  assert distribution.tf_config_workers() == 0
  assert distribution.resolve("auto") == "none"


def test_bad_tf_config_and_distribution_are_named(monkeypatch):
  monkeypatch.setenv("TF_CONFIG", "{not json")
  with pytest.raises(ValueError, match="TF_CONFIG is not a JSON object"):
    distribution.tf_config_workers()
  with pytest.raises(ValueError, match="unknown distribution 'gpu'"):
    distribution.resolve("gpu")
  with pytest.raises(ValueError, match="distribution"):
    settings.TrainerSettings(dataset="criteo", distribution="gpu")


def test_a_batch_the_replicas_do_not_divide_is_refused():
  distribution.check_batch_size(1024, 8)
  with pytest.raises(ValueError, match="1000 does not split evenly over 3 "
                     "replicas; use a multiple of 3"):
    distribution.check_batch_size(1000, 3)


def test_the_cpu_cannot_be_split_once_initialised():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.constant(1.0)  # Initialises the devices (one CPU).
  distribution.configure_cpu_devices(1)  # Nothing to do.
  with pytest.raises(ValueError, match="set --cpu-devices when the process "
                     "starts"):
    distribution.configure_cpu_devices(2)


@pytest.mark.parametrize("cluster,task,chief", [
    ({"chief": ["h:1"], "worker": ["h:2"]}, ("chief", 0), True),
    ({"chief": ["h:1"], "worker": ["h:2"]}, ("worker", 0), False),
    ({"worker": ["h:1", "h:2"]}, ("worker", 0), True),
    ({"worker": ["h:1", "h:2"]}, ("worker", 1), False),
])
def test_only_the_chief_writes_the_model(cluster, task, chief):
  """The Trainer's export goes to its output from the cluster's chief (or
  worker 0 without one); the other workers save to a scratch directory."""
  import types  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
      tf.train.ClusterSpec(cluster), task_type=task[0], task_id=task[1])
  assert distribution.is_chief(
      types.SimpleNamespace(cluster_resolver=resolver)) is chief
  assert distribution.is_chief(tf.distribute.get_strategy())
