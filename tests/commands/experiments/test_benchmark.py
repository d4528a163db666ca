"""The training-speed benchmark: its inputs, its cases and its CSV."""

import argparse
import csv

import keras
import numpy as np
import pytest
import tensorflow as tf

from commands.cli import flags
from commands.cli import main as cli
from commands.experiments import benchmark
from conftest import STUDY_MIN_FREQUENCY
from trainer_module import features
from trainer_module import input_pipeline
from trainer_module import models
from trainer_module import precision
from trainer_module import preprocessing
from trainer_module import settings
from trainer_module import training




@pytest.fixture(name="criteo_file")
def _criteo_file(criteo_study_dir):
  """The study tests' data (its ExampleGen and Transform are cached in
  work_dir's pipeline DIR: conftest.criteo_study_dir)."""
  return criteo_study_dir[0]


@pytest.fixture(name="work_dir")
def _work_dir(criteo_study_dir):
  """The benchmark's kept work directory: the shared Transform."""
  return criteo_study_dir[1]


@pytest.mark.slow
def test_adapter_reads_the_real_transform_output(criteo_file, work_dir):
  """The benchmark trains on ExampleGen's rows through the real Transform
  graph (the transformed-feature contract of trainer_module.features), not
  on a re-implementation of it."""
  data = benchmark.transform(features.CRITEO, str(criteo_file), STUDY_MIN_FREQUENCY,
                             str(work_dir / "pipeline"))
  sizes = preprocessing.vocabulary_sizes(data.tf_transform_output,
                                         features.CRITEO)
  split = input_pipeline.training_data(list(data.train_files),
                                data.tf_transform_output, "label", 4096)
  batch, labels = next(iter(split.train))
  for field in features.CRITEO.categorical_features:
    ids = batch[field].numpy()
    assert ids.dtype == np.int64
    assert ids.min() >= 0 and ids.max() < sizes[field]
  for field in features.CRITEO.dense:
    assert 0.0 <= batch[field].numpy().min() <= batch[field].numpy().max() <= 1
  assert set(np.unique(labels.numpy())) <= {0.0, 1.0}
  # The Transform's frequency threshold: every kept id was seen at least
  # that often in the train split.
  counts = preprocessing.vocabulary_frequencies(data.tf_transform_output,
                                                "C1")
  assert counts.min() >= STUDY_MIN_FREQUENCY


def test_cases_cover_batch_update_cowclip_and_larger_vocabularies():
  cases = benchmark.benchmark_cases([64, 512], vocab_scale=10)
  assert len(cases) == 2 * 2 * 2 + 4
  assert {(c.batch_size, c.embedding_update, c.cowclip)
          for c in cases if c.vocab_scale == 1} == {
              (b, u, c) for b in (64, 512) for u in ("dense", "sparse")
              for c in (True, False)}
  assert {c.batch_size for c in cases if c.vocab_scale == 10} == {64}
  assert all(c.vocab_scale == 1 for c in benchmark.benchmark_cases([64], 1))
  # Each input side by side; the larger vocabulary reads the Trainer's.
  both = benchmark.benchmark_cases([64], 3, inputs=benchmark.INPUTS)
  assert [c.input for c in both[:8]] == list(benchmark.INPUTS) * 4
  assert {c.input for c in both[8:]} == {"pipeline"}


def test_cases_cover_each_precision():
  cases = benchmark.benchmark_cases([64], 1, models.PRECISIONS)
  assert {c.precision for c in cases} == set(models.PRECISIONS)
  assert len(cases) == 2 * 2 * len(models.PRECISIONS)
  assert flags.choice_list(models.PRECISIONS, "precision")(
      "float32, mixed_bfloat16") == [
      "float32", "mixed_bfloat16"]
  with pytest.raises(argparse.ArgumentTypeError, match="float16"):
    flags.choice_list(models.PRECISIONS, "precision")("float16")


def test_mlp_flops_count_the_three_matrix_products_per_weight():
  model = models.build_model(
      "deepfm", {"a": 5, "b": 3}, ("x",),
      models.ModelOptions(embedding_dim=2, hidden_units=(4, 3)))
  # DNN input 2 * 2 + 1 = 5: kernels 5x4, 4x3 and the 3x1 output layer.
  assert benchmark.mlp_flops_per_example(model) == 6 * (20 + 12 + 3)


def test_parse_int_list_rejects_bad_lists():
  assert flags.int_list("1024, 8192") == [1024, 8192]
  for text in ("", "a,2", "0,4"):
    with pytest.raises(argparse.ArgumentTypeError):
      flags.int_list(text)


@pytest.mark.slow
def test_benchmark_command_writes_positive_rates(criteo_file, work_dir,
                                                tmp_path):
  out = tmp_path / "bench.csv"
  code = cli.main(["benchmark", "--data", str(criteo_file),
                   "--batch-sizes", "64", "--hidden-units", "16",
                   "--min-frequency", str(STUDY_MIN_FREQUENCY), "--vocab-scale", "3",
                   "--warmup-steps", "1", "--steps", "2",
                   "--inputs", "fixed",
                   "--work-dir", str(work_dir), "--output", str(out)])
  assert code == 0
  with open(out, newline="") as f:
    reader = csv.DictReader(f)
    assert tuple(reader.fieldnames) == benchmark.COLUMNS
    rows = list(reader)
  # Batch 64 x 2 updates x CowClip on/off on the fixed batches, then on
  # the Trainer's input at vocab x3 (both inputs side by side: the cases'
  # test above).
  assert len(rows) == 8
  assert [r["input"] for r in rows] == ["fixed"] * 4 + ["pipeline"] * 4
  for row in rows:
    assert float(row["seconds_per_step"]) > 0
    assert float(row["examples_per_second"]) > 0
    assert int(row["steps"]) == 2
    # The default, auto, resolved as the Trainer resolves it.
    assert row["precision"] == precision.resolve("auto")[0]
    assert float(row["input_share"]) > 0
    assert float(row["matmul_peak_gflops"]) > 0
    assert float(row["gflops_per_second"]) > 0
    for name in benchmark.COMPONENTS:
      assert float(row[f"{name}_share"]) >= 0
    assert (float(row["cowclip_share"]) > 0) == (row["cowclip"] == "True")
  small = {int(r["vocab_rows"]) for r in rows if r["vocab_scale"] == "1"}
  large = {int(r["vocab_rows"]) for r in rows if r["vocab_scale"] == "3"}
  assert len(small) == 1 and large == {3 * small.pop()}


@pytest.mark.slow
def test_a_timed_case_runs_the_callbacks_it_is_given(criteo_file, work_dir):
  """Extra callbacks (docs/scripts/step_profile.py's profiler) see every step of
  the timed fit, warm-up included, beside the step timer."""
  class CountSteps(keras.callbacks.Callback):

    def __init__(self):
      super().__init__()
      self.steps = 0

    def on_train_batch_end(self, batch, logs=None):
      self.steps += 1

  counter = CountSteps()

  data = benchmark.transform(features.CRITEO, str(criteo_file), STUDY_MIN_FREQUENCY,
                             str(work_dir / "pipeline"))
  result = benchmark.time_training_step(
      "deepfm", features.CRITEO, data,
      benchmark.BenchmarkCase(64, "dense", True, input="fixed"),
      models.ModelOptions(hidden_units=(16,)), warmup_steps=1, steps=2,
      components=False, callbacks=[counter])
  assert counter.steps == 3
  assert result["steps"] == 2 and result["examples_per_second"] > 0


@pytest.mark.parametrize("cowclip_on", [True, False])
def test_the_step_parts_time_through_the_chains_pieces(cowclip_on):
  """component_seconds times the step's parts from the gradient chain's
  public pieces (gradient_chain), on a compiled model: no pipeline."""
  model = models.build_model("deepfm", {"a": 7, "b": 5}, ("x",),
                             models.ModelOptions(embedding_dim=3,
                                                 hidden_units=(8,)))
  training.compile_model(model, training.TrainingConfig(
      dense_lr=1e-2, embed_lr=1e-2, l2=1e-3, r=0.5, zeta=1e-3,
      warmup_epochs=0.0, steps_per_epoch=1,
      step=settings.StepOptions(cowclip=cowclip_on)))
  rng = np.random.default_rng(0)
  batch = {"a": tf.constant(rng.integers(0, 7, 16)),
           "b": tf.constant(rng.integers(0, 5, 16)),
           "x": tf.constant(rng.normal(size=16).astype(np.float32))}
  seconds = benchmark.component_seconds(model, batch, repeats=1)
  assert set(seconds) == set(benchmark.COMPONENTS)
  assert all(v >= 0 for v in seconds.values())
  assert (seconds["cowclip"] > 0) == cowclip_on


def test_the_collectives_time_through_the_chains_gather():
  """collective_seconds runs the chain's own gather (gradient_chain.
  gather_replicas) and sums on tensors of the step's shapes: here on the
  default strategy's one replica, so a change to the chain's pieces breaks
  it in the fast tests, not first in a real run (the slow benchmark test
  times it on two)."""
  model = models.build_model("deepfm", {"a": 7, "b": 5}, ("x",),
                             models.ModelOptions(embedding_dim=3,
                                                 hidden_units=(8,)))
  training.compile_model(model, training.TrainingConfig(
      dense_lr=1e-2, embed_lr=1e-2, l2=1e-3, r=0.5, zeta=1e-3,
      warmup_epochs=0.0, steps_per_epoch=1, step=settings.StepOptions()))
  seconds = benchmark.collective_seconds(model, batch_size=16, repeats=1)
  assert isinstance(seconds, float) and seconds >= 0
