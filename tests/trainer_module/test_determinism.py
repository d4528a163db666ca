"""Seeded runs: the Trainer's run_fn twice with the same seed, on the same
Transform output of generated rows read from several files, exports models
that serve the same predictions (to 1e-6); another seed does not. Also the
seeded Tuner's trials, and the training cache's release."""

import json
import os
import signal
import subprocess
import sys
import types
import weakref

import keras_tuner
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_transform as tft

from conftest import split_records
import script_output
from trainer_module import contract
from trainer_module import input_pipeline
from trainer_module import kept_split
from trainer_module import trainer
from trainer_module import tuner
from trainer_module.settings import ModelOptions
from trainer_module.settings import TrainerSettings

pytestmark = pytest.mark.slow

# The train split in this many files: a shuffled read interleaves them.
_FILES = 4
# Served probabilities, data-parallel against one device: float noise of
# the replicas' summation order (the model). The baseline is fitted by
# scikit-learn from the same rows either way (trainer.train_baseline); its
# bound stays the looser one it had when it trained on the replicas too.
_PARITY = {contract.PREDICTION_KEY: 1e-5, contract.LR_OUTPUT: 1e-4}


@pytest.fixture(name="inputs", scope="module")
def _inputs(criteo_examples, criteo_transform, tmp_path_factory):
  """(train files, Transform graph directory, eval records) of
  criteo_examples."""
  root = tmp_path_factory.mktemp("determinism")
  records = split_records(criteo_examples, "train")
  files = []
  for index in range(_FILES):
    files.append(str(root / f"train-{index}.gz"))
    with tf.io.TFRecordWriter(files[-1], options="GZIP") as writer:
      for record in records[index::_FILES]:
        writer.write(record)
  return files, criteo_transform, split_records(criteo_examples, "eval")


# Two epochs: a kill after the first leaves one to resume.
_EPOCHS = 2


def _custom_config(seed):
  """The Trainer's settings of these runs, seeded."""
  return TrainerSettings(
      dataset="criteo", batch_size=128, epochs=_EPOCHS, seed=seed,
      serve="model",
      # float32 whatever the cores: the module fixture seed_3 runs before
      # the autouse one that pins `auto` (conftest).
      model_options=ModelOptions(embedding_dim=4, hidden_units=(16, 16),
                                 precision="float32")).to_custom_config()


def _served(inputs, seed, out_dir):
  """run_fn with `seed`; the exported model's outputs on the eval split."""
  files, output, eval_records = inputs
  serving_dir = os.path.join(out_dir, "serving")
  trainer.run_fn(types.SimpleNamespace(
      custom_config=_custom_config(seed),
      transform_output=output, hyperparameters=None, train_files=files,
      model_run_dir=os.path.join(out_dir, "run"),
      serving_model_dir=serving_dir))
  serve = tf.saved_model.load(serving_dir).signatures["serving_default"]
  return {k: v.numpy() for k, v in serve(
      examples=tf.constant(eval_records)).items()}


@pytest.fixture(name="seed_3", scope="module")
def _seed_3(inputs, tmp_path_factory):
  """The served outputs of run_fn with seed 3, run once for the tests
  that compare with it; also, in "alive_at_export", whether each of the
  datasets its training data held was still alive when it exported."""
  datasets, alive_at_export = [], []
  real_data, real_export = trainer.training_data, trainer.export_serving_model

  def recording_data(*args, **kwargs):
    data = real_data(*args, **kwargs)
    assert data.in_memory is not None
    datasets.extend([weakref.ref(data.train), weakref.ref(data.validation)])
    return data

  def export(*args):
    alive_at_export.extend(ref() is not None for ref in datasets)
    return real_export(*args)

  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(trainer, "training_data", recording_data)
    patch.setattr(trainer, "export_serving_model", export)
    served = _served(inputs, 3, str(tmp_path_factory.mktemp("seed_3") / "run"))
  return {**served, "alive_at_export": alive_at_export}


def test_same_seed_same_predictions_other_seed_other(inputs, seed_3,
                                                     tmp_path):
  first = seed_3
  again = _served(inputs, 3, str(tmp_path / "b"))
  for name in (contract.PREDICTION_KEY, contract.LR_OUTPUT):
    np.testing.assert_allclose(again[name], first[name], rtol=0, atol=1e-6,
                               err_msg=name)
  other = _served(inputs, 4, str(tmp_path / "c"))
  assert np.abs(other[contract.PREDICTION_KEY] -
                first[contract.PREDICTION_KEY]).max() > 1e-4


def test_a_killed_trainer_resumes_after_its_last_epoch_and_serves_the_same(
    inputs, seed_3, tmp_path):
  """run_fn killed by SIGKILL after epoch 1 of 2 (its own process: what a
  preempted node does), then run again as the next Trainer execution (new
  output directories, the same pipeline root): it continues from its
  backup (weights, optimizer, early stopping, data order, the held train
  split) at epoch 2 and serves what an uninterrupted run serves, to 1e-6
  (issue #45)."""
  whole = seed_3
  files, output, _ = inputs
  killed = subprocess.run(
      [sys.executable, os.path.join(os.path.dirname(__file__),
                                    "killed_run_fn.py"),
       "1", json.dumps(_custom_config(3)), output,
       str(tmp_path / "root" / "killed"), *files],
      cwd=script_output.ROOT, env=script_output.environment(),
      capture_output=True, text=True, check=False, timeout=900)
  assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
  (state,) = (tmp_path / "root" / trainer.BACKUP_DIR).glob(
      f"*/{contract.replica_output(0)}/fit_state.json")
  assert json.loads(state.read_text())["epoch"] == 1
  # The held split was kept with the backups, and the resumed Trainer
  # reads it back instead of the files.
  (held,) = (tmp_path / "root" / trainer.BACKUP_DIR).glob(
      f"*/{kept_split.HELD_SPLIT_DIR}/held.json")
  assert sorted(json.loads(held.read_text())["parts"]) == ["train",
                                                           "validation"]

  def unread(*args, **kwargs):
    raise AssertionError("the resumed Trainer read the train files")

  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(input_pipeline, "split_stats", unread)
    resumed = _served(inputs, 3, str(tmp_path / "root" / "resumed"))
  for name in (contract.PREDICTION_KEY, contract.LR_OUTPUT):
    np.testing.assert_allclose(resumed[name], whole[name], rtol=0, atol=1e-6,
                               err_msg=name)
  record = json.loads((tmp_path / "root" / "resumed" / "serving" /
                       contract.TRAINING_RECORD).read_text())
  assert record["resumed_after"] == 1 and record["epochs_run"] == 2
  # Completed: no backup is left.
  assert not (tmp_path / "root" / trainer.BACKUP_DIR).exists()


def test_run_fn_lets_the_training_cache_go_before_the_export(seed_3):
  """The datasets holding the parts in memory are gone when run_fn
  exports (and the Evaluator, which may run in the same process, starts):
  nothing but the garbage they leave is measured in
  docs/benchmark_data.md."""
  assert seed_3["alive_at_export"] == [False, False]


def test_seeded_tuner_trials_start_from_the_same_model(inputs):
  """With settings.seed, every trial's model is built from the same
  initialisation (CtrHyperModel.build seeds), whatever ran before."""
  files, output, _ = inputs
  settings = TrainerSettings(
      dataset="criteo", batch_size=128, epochs=1, seed=3,
      model_options=ModelOptions(embedding_dim=4, hidden_units=(16,)))
  transform_output = tft.TFTransformOutput(output)
  data = input_pipeline.training_data(files, transform_output, "label", 128,
                                      seed=settings.seed)
  hypermodel = tuner.CtrHyperModel(
      settings, tuner.search_space("criteo",
                                   model_options=settings.model_options),
      transform_output, data)
  hp = keras_tuner.HyperParameters()
  hypermodel.declare_hyperparameters(hp)
  first, second = ([w.numpy() for w in hypermodel.build(hp).weights]
                   for _ in range(2))
  assert len(first) == len(second) > 0
  for a, b in zip(first, second):
    np.testing.assert_array_equal(a, b)


def test_a_resumed_tuner_reads_the_held_split_it_kept(inputs, tmp_path):
  """tuner_fn keeps the held split in the search's directory (given again
  to a search resumed after a kill): the next tuner_fn reads it back, not
  the train files."""
  files, output, _ = inputs
  fn_args = types.SimpleNamespace(
      custom_config={**_custom_config(3), "tuning": {"trials": 1}},
      transform_graph_path=output, train_files=files,
      working_dir=str(tmp_path / "root" / "Tuner" / "search" / "key"))
  first = tuner.tuner_fn(fn_args)
  held = (tmp_path / "root" / "Tuner" / "search" / "key" /
          kept_split.HELD_SPLIT_DIR / "held.json")
  assert held.exists()

  def unread(*args, **kwargs):
    raise AssertionError("the resumed Tuner read the train files")

  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(input_pipeline, "split_stats", unread)
    resumed = tuner.tuner_fn(fn_args)
  assert (resumed.tuner.hypermodel.batch_record() ==
          first.tuner.hypermodel.batch_record())


def _distributed(inputs, tmp_path, *worker):
  """(script, its arguments after `worker`) of a distributed_run_fn.py run
  with the seed_3 run's settings."""
  files, output, eval_records = inputs
  records = str(tmp_path / "eval.tfrecord")
  with tf.io.TFRecordWriter(records) as writer:
    for record in eval_records:
      writer.write(record)
  return (os.path.join(os.path.dirname(__file__), "distributed_run_fn.py"),
          [json.dumps(_custom_config(3)), output, records,
           str(tmp_path / "runs"), *files])


def _assert_serves_the_one_device_predictions(result, seed_3):
  assert result["replicas"] == 2
  one = seed_3[contract.PREDICTION_KEY].reshape(-1)
  assert np.std(one) > 0.01  # The model predicts more than a constant.
  for name, tolerance in _PARITY.items():
    difference = np.abs(np.asarray(result["outputs"][name]) -
                        seed_3[name].reshape(-1)).max()
    assert difference < tolerance, (name, difference)


def test_mirrored_run_fn_serves_the_one_device_predictions(inputs, seed_3,
                                                           tmp_path):
  """run_fn with --distribution mirrored over 2 logical CPU devices, in its
  own process (distributed_run_fn.py), and the module's one-device run,
  same seed: the same served predictions, model and baseline, within float
  noise."""
  script, args = _distributed(inputs, tmp_path)
  _assert_serves_the_one_device_predictions(
      script_output.json_of(script, *args), seed_3)


def test_multi_worker_run_fn_serves_the_one_device_predictions(inputs, seed_3,
                                                              tmp_path):
  """run_fn on two worker processes on localhost (TF_CONFIG, one CPU
  each): the chief exports the one-device model's predictions, the other
  worker trains alongside and writes no model. With --precision auto the
  workers' probes disagree (float32 on the chief, bf16 on the other): the
  chief's choice holds on both, or the other's bf16 gradients would move
  the predictions."""
  script, args = _distributed(inputs, tmp_path)
  ports = ",".join(str(p) for p in script_output.free_ports(2))
  other = script_output.start(script, "--worker", "1", ports,
                              "--probed-speedup", "2.0", *args)
  chief = script_output.json_of(script, "--worker", "0", ports,
                                "--probed-speedup", "0.5", *args)
  assert script_output.finish(other) == {"serving_files": []}
  _assert_serves_the_one_device_predictions(chief, seed_3)
