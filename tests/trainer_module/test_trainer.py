"""trainer_module.trainer pieces that need no pipeline: bucketing, hparams,
the validation slice of early stopping."""

import dataclasses
import json
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

import raw_records
from components.raw_example_gen import example_encoding
from trainer_module import callbacks
from trainer_module import contract
from trainer_module import input_pipeline
from trainer_module import models
from trainer_module import model_building
from trainer_module import plan as plan_lib
from trainer_module import scaling
from trainer_module import serving
from trainer_module import trainer
from trainer_module import training
from trainer_module.settings import TrainerSettings

# What the input pipeline reads of a Transform output.
_TRANSFORM = raw_records.TransformOutput()


def test_resume_directory_is_the_same_for_the_same_inputs_only():
  """The Trainer's backups and the Tuner's trials: found again by the next
  execution on the same inputs (issue #45), beside the outputs."""
  here = contract.resume_directory("/root/Trainer/model_run/7", "backup",
                                   [{"b": 1, "a": [2]}, "files"])
  assert here == contract.resume_directory("/root/Trainer/model/9", "backup",
                                           [{"a": [2], "b": 1}, "files"])
  assert here.startswith("/root/Trainer/backup/") and len(
      here.rsplit("/", 1)[1]) == 16
  assert here != contract.resume_directory("/root/Trainer/model/9", "backup",
                                           [{"a": [2], "b": 1}, "other"])


def test_frequency_buckets_boundaries_belong_to_the_higher_bucket():
  counts = tf.constant([0.0, 99.9, 100.0, 9999.0, 10000.0, 1e9])
  got = serving.frequency_buckets(counts, (100, 10000)).numpy().tolist()
  assert got == [b"rare", b"rare", b"medium", b"medium", b"frequent",
                 b"frequent"]


def test_frequency_buckets_of_geometric_mean_like_serving_does():
  # Two fields: counts (1, 10000) -> geometric mean ~100 -> medium.
  log_counts = tf.math.log1p(tf.constant([[1.0], [10000.0]]))
  typical = tf.math.expm1(tf.reduce_mean(log_counts, axis=0))
  np.testing.assert_allclose(typical.numpy(), [np.sqrt(2 * 10001) - 1],
                             rtol=1e-5)
  assert serving.frequency_buckets(typical, (100, 10000)).numpy() == [
      b"medium"]


def test_training_hparams_scale_tuned_base_values():
  config = TrainerSettings(
      dataset="criteo", scaling_rule="cowclip", base_batch_size=1024,
      batch_size=8192,
      hparams={"dense_lr": 8e-4, "embed_lr": 1e-4, "l2": 1e-5,
               "r": 1.0, "zeta": 1e-5, "warmup_epochs": 1.0})
  record = plan_lib.training_hparams(config, {"dense_lr": 1e-3,
                                             "embedding_dim": 16}, 8192)
  assert record["base"]["dense_lr"] == 1e-3
  assert "embedding_dim" not in record["base"]
  assert record["scaled"] == scaling.scale_hparams(
      "cowclip", record["base"], 1024, 8192)


def test_check_training_fits_reports_sizes_and_refuses_what_cannot_fit():
  sizes = {"C1": 1001, "C2": 11}
  summary = model_building.check_training_fits(sizes, 10, 2**30)
  assert "2 embedding tables, 1,012 rows" in summary
  with pytest.raises(ValueError, match="raise --min-frequency"):
    model_building.check_training_fits({"C1": 10**9}, 10, 2**30)
  # Tables of 1,012 rows x 11 floats x 3 (Adam): 133,584 bytes per model;
  # run_fn holds every replica at once (and a distilled student with them).
  one = 1012 * 11 * 4 * 3
  assert "for 2 models" in model_building.check_training_fits(
      sizes, 10, 2 * one, models=2)
  with pytest.raises(ValueError, match="for 3 models"):
    model_building.check_training_fits(sizes, 10, 2 * one, models=3)


def test_label_stats_counts_examples_and_clicks(tmp_path):
  path = str(tmp_path / "part-0.gz")
  with tf.io.TFRecordWriter(path, options="GZIP") as writer:
    for label in [1.0, 0.0, 0.0, 1.0, 0.0]:
      writer.write(raw_records.raw_example(label))
  spec = _TRANSFORM.raw_feature_spec()
  stats = input_pipeline.split_stats([str(tmp_path / "*.gz")], spec, "click")
  assert stats.label_stats() == (5, 0.4)
  with pytest.raises(FileNotFoundError, match="no examples match"):
    input_pipeline.split_stats([str(tmp_path / "none-*")], spec, "click")


def test_training_hparams_derive_auto_keys_from_the_data_size():
  base = {"dense_lr": 8e-4, "embed_lr": 1e-4, "l2": 1e-5, "r": 1.0,
          "zeta": 1e-5, "warmup_epochs": 1.0}
  config = TrainerSettings(
      dataset="criteo", scaling_rule="cowclip", base_batch_size=1024,
      batch_size=2048, hparams={"dense_lr": 8e-4},  # Overridden: not auto.
      reference_examples=40_000_000)
  assert config.base_hparams == base
  record = plan_lib.training_hparams(config, {"l2": 3e-4}, 2048, 400_000)
  # 100x fewer rows: embed_lr x 100 ** 0.8; l2 was tuned, so it stays.
  assert record["auto"] == ["embed_lr"]
  assert record["base"]["embed_lr"] == pytest.approx(1e-4 * 100 ** 0.8)
  assert record["base"]["l2"] == 3e-4
  assert record["base"]["dense_lr"] == 8e-4  # Not an auto key here.
  assert record["scaled"] == scaling.scale_hparams(
      "cowclip", record["base"], 1024, 2048)
  # Without a data size (showing a tuning result) nothing is derived.
  assert plan_lib.training_hparams(config, {}, 2048)["base"] == base


def _write_records(path, labels):
  with tf.io.TFRecordWriter(path, options="GZIP") as writer:
    for i, label in enumerate(labels):
      writer.write(raw_records.raw_example(label, row=i))


def _rows(dataset):
  return [int(r) for features, _ in dataset for r in features["row"]]


def test_record_chunks_hold_records_of_one_file_each_read_once(tmp_path,
                                                             monkeypatch):
  """Files are interleaved a chunk at a time, never record by record (that
  cost 13x the read, docs/benchmark_data.md), and no record is lost."""
  for shard in range(2):
    with tf.io.TFRecordWriter(str(tmp_path / f"train-{shard}.gz"),
                              options="GZIP") as writer:
      for row in range(100):
        writer.write(b"%d-%03d" % (shard, row))
  files = sorted(str(f) for f in tmp_path.glob("train-*.gz"))
  monkeypatch.setattr(input_pipeline, "_RECORD_CHUNK", 32)
  for shuffle in (False, True):
    chunks = [[r.decode() for r in chunk.numpy()] for chunk in
              input_pipeline._record_chunks(  # pylint: disable=protected-access
                  files, shuffle, seed=1)]
    assert all(len(chunk) <= 32 and len({r[0] for r in chunk}) == 1
               for chunk in chunks)
    assert sorted(r for chunk in chunks for r in chunk) == [
        "%d-%03d" % (shard, row) for shard in range(2) for row in range(100)]


def test_validation_slice_partitions_the_train_split_deterministically(
    tmp_path):
  labels = np.random.default_rng(0).integers(0, 2, 3000).astype(float)
  for shard in range(2):
    _write_records(str(tmp_path / f"train-{shard}.gz"),
                   labels[shard::2])
  files = [str(tmp_path / "train-*.gz")]
  buckets = input_pipeline.validation_buckets(3000)
  assert buckets == 100  # 10% of the hash buckets.

  def rows(part, shuffle, seed=0):
    return _rows(input_pipeline.make_dataset(files, _TRANSFORM, "click", 64,
                                      shuffle=shuffle, seed=seed, part=part,
                                      buckets=buckets))

  validation = rows("validation", shuffle=False)
  train = rows("train", shuffle=True, seed=1)
  # Disjoint and complete (row ids are per shard: pair them with the shard
  # through the label-free count instead).
  assert len(validation) + len(train) == 3000
  assert 200 < len(validation) < 400  # ~10%.
  # The same rows whatever the order they are read in.
  assert sorted(rows("train", shuffle=True, seed=2)) == sorted(train)
  assert sorted(rows("validation", shuffle=True, seed=3)) == sorted(
      validation)
  stats = input_pipeline.split_stats(files, _TRANSFORM.raw_feature_spec(),
                                     "click")
  assert stats.label_stats("validation", buckets)[0] == len(validation)
  assert stats.label_stats("train", buckets)[0] == len(train)


def _encoded(row: int, label: int, reverse: bool) -> bytes:
  """Raw example {row, a = row % 7, click} in ExampleGen's wire format, its
  features map in name order or reversed: other bytes, the same example."""
  entries = [example_encoding.int64_feature(
      example_encoding.feature_key(name), value)
             for name, value in (("a", row % 7), ("click", label),
                                 ("row", row))]
  return example_encoding.example(entries[::-1] if reverse else entries)


def test_slice_and_sampling_follow_the_example_not_its_encoding(tmp_path):
  """Two encodings of the same examples (features map in another order:
  different bytes, the same parse) give the same keys, so the same
  validation slice and the same sampled rows; the key follows values."""
  spec = raw_records.TransformOutput(("row", "a"))
  labels = [int(l) for l in np.random.default_rng(6).random(2000) < 0.2]
  files = {}
  for reverse in (False, True):
    records = [_encoded(i, l, reverse) for i, l in enumerate(labels)]
    files[reverse] = str(tmp_path / f"train-{reverse}.gz")
    with tf.io.TFRecordWriter(files[reverse], options="GZIP") as writer:
      for record in records:
        writer.write(record)
  ordered, reversed_ = ([_encoded(i, l, r) for i, l in enumerate(labels)]
                        for r in (False, True))
  assert all(a != b for a, b in zip(ordered, reversed_))
  parsed = [tf.io.parse_example(r, spec.raw_feature_spec())
            for r in (ordered, reversed_)]
  for name in ("row", "a", "click"):
    np.testing.assert_array_equal(parsed[0][name], parsed[1][name])
  keys = [input_pipeline.example_keys(tf.constant(r), spec.raw_feature_spec(),
                                      "click")[0].numpy()
          for r in (ordered, reversed_)]
  np.testing.assert_array_equal(keys[0], keys[1])
  assert len(set(keys[0])) == len(labels)  # Other values, other keys.

  def rows(path, part, rate):
    return [int(r) for batch in input_pipeline.make_dataset(
        [path], spec, "click", 256, shuffle=False, part=part, buckets=100,
        negative_sampling_rate=rate) for r in batch[0]["row"]]

  for part, rate in (("validation", 1.0), ("train", 0.3)):
    chosen = rows(files[False], part, rate)
    assert 0 < len(chosen) < len(labels)
    assert rows(files[True], part, rate) == chosen, (part, rate)
  assert input_pipeline.validation_buckets(10**9) == 1  # Capped, never empty.
  assert input_pipeline.validation_buckets(4_000_000) == 50


def test_an_absent_feature_is_not_a_value():
  spec = raw_records.TransformOutput(("row", "a")).raw_feature_spec()
  with_a = raw_records.raw_example(0, row=1, a=0)
  without_a = raw_records.raw_example(0, row=1)
  keys = input_pipeline.example_keys(tf.constant([with_a, without_a]), spec,
                                     "click")[0].numpy()
  assert keys[0] != keys[1]


def test_training_data_reads_only_the_train_split(tmp_path, monkeypatch):
  """No eval row is used to train or to select the epoch: run_fn, the
  tuner and the study get both parts from the train files alone."""
  _write_records(str(tmp_path / "train.gz"), [1.0, 0.0] * 500)
  opened = []
  real = tf.data.TFRecordDataset

  def recording(files, *args, **kwargs):
    opened.append(files)
    return real(files, *args, **kwargs)

  monkeypatch.setattr(tf.data, "TFRecordDataset", recording)
  data = input_pipeline.training_data([str(tmp_path / "train.gz")], _TRANSFORM,
                               "click", 100)
  train, validation = _rows(data.train), _rows(data.validation)
  assert not set(train) & set(validation)
  assert sorted(train + validation) == list(range(1000))
  assert (data.train_examples, data.validation_examples) == (
      len(train), len(validation))
  assert data.click_rate == pytest.approx(
      sum(1 - r % 2 for r in train) / len(train))
  assert all("eval" not in str(f) for f in opened), opened


def test_a_held_split_batches_as_a_fresh_read_and_is_not_read_again(
    tmp_path, monkeypatch):
  """The study reads the train split once (hold_split) and batches it per
  run: the same batches, in the same order, as training_data reading it,
  at any batch size and seed, with no file opened again."""
  _write_records(str(tmp_path / "train.gz"), [1.0, 0.0, 0.0] * 400)
  files = [str(tmp_path / "train.gz")]
  held = input_pipeline.hold_split(files, _TRANSFORM, "click")
  assert held.in_memory is not None and held.validation_in_memory is not None
  opened = []
  real = tf.data.TFRecordDataset
  monkeypatch.setattr(tf.data, "TFRecordDataset",
                      lambda *a, **k: opened.append(a) or real(*a, **k))
  for batch_size, seed in ((64, 1), (256, 2)):
    shared = input_pipeline.training_data(files, _TRANSFORM, "click",
                                          batch_size, seed=seed, held=held)
    assert not opened
    fresh = input_pipeline.training_data(files, _TRANSFORM, "click",
                                         batch_size, seed=seed)
    for part in ("train", "validation"):
      assert ([len(f["row"]) for f, _ in getattr(shared, part)] ==
              [len(f["row"]) for f, _ in getattr(fresh, part)])
      assert _rows(getattr(shared, part)) == _rows(getattr(fresh, part))
    for field in ("train_examples", "validation_examples", "click_rate",
                  "validation_buckets"):
      assert getattr(shared, field) == getattr(fresh, field)
    opened.clear()


def test_the_kept_model_is_recentred_on_the_training_click_rate():
  """fit's recentring targets the training part's click rate, not the
  validation slice's labels: a few hundred rows' click rate is off by its
  noise, and the whole model would follow it (issue #42)."""
  keras.utils.set_random_seed(0)
  rng = np.random.default_rng(0)

  def part(rows, click_rate):
    features = {"a": rng.integers(0, 7, rows), "b": rng.integers(0, 5, rows),
                "x": rng.normal(size=rows).astype(np.float32)}
    labels = (rng.random(rows) < click_rate).astype(np.float32)
    return tf.data.Dataset.from_tensor_slices((features, labels)).batch(32)

  model = models.build_model("deepfm", {"a": 7, "b": 5}, ("x",),
                             models.ModelOptions(embedding_dim=2,
                                                 hidden_units=(4,)))
  training.compile_model(model, training.TrainingConfig(
      dense_lr=1e-3, embed_lr=1e-3, l2=0.0, r=0.5, zeta=1e-3,
      warmup_epochs=0.0, steps_per_epoch=8))
  data = input_pipeline.TrainingData(
      train=part(256, 0.3), validation=part(200, 0.1), train_examples=256,
      validation_examples=200, click_rate=0.3, validation_buckets=1)
  trainer.fit(model, data, epochs=1, verbose=0)
  predictions = np.concatenate([
      tf.sigmoid(model(features, training=False)).numpy().ravel()
      for features, _ in data.validation])
  assert predictions.mean() == pytest.approx(0.3, abs=1e-4)


class _SlowEpochsThenStop(keras.callbacks.Callback):
  """Each epoch takes at least `seconds`; Ctrl-C as epoch `stop_at` (0-based)
  begins."""

  def __init__(self, seconds, stop_at=None):
    super().__init__()
    self.seconds, self.stop_at = seconds, stop_at

  def on_epoch_begin(self, epoch, logs=None):
    if epoch == self.stop_at:
      raise KeyboardInterrupt

  def on_epoch_end(self, epoch, logs=None):
    time.sleep(self.seconds)


def test_a_resumed_fit_counts_the_earlier_attempts_seconds(tmp_path):
  """The backup keeps the wall seconds of the epochs it holds; the resumed
  fit's record gives them (the study adds them to its train_seconds)."""
  keras.utils.set_random_seed(0)
  rng = np.random.default_rng(0)
  features = {"a": rng.integers(0, 7, 64), "x": rng.normal(size=64).astype(
      np.float32)}
  labels = (rng.random(64) < 0.3).astype(np.float32)
  batches = tf.data.Dataset.from_tensor_slices((features, labels)).batch(32)
  data = input_pipeline.TrainingData(
      train=batches, validation=batches, train_examples=64,
      validation_examples=64, click_rate=0.3, validation_buckets=1)

  def fit(callback):
    model = models.build_model("deepfm", {"a": 7}, ("x",),
                               models.ModelOptions(embedding_dim=2,
                                                   hidden_units=(4,)))
    training.compile_model(model, training.TrainingConfig(
        dense_lr=1e-3, embed_lr=1e-3, l2=0.0, r=0.5, zeta=1e-3,
        warmup_epochs=0.0, steps_per_epoch=2))
    return trainer.fit(model, data, epochs=3, callbacks=[callback],
                       verbose=0, backup_dir=str(tmp_path / "backup"))

  with pytest.raises(KeyboardInterrupt):
    fit(_SlowEpochsThenStop(0.5, stop_at=2))
  state = json.loads((tmp_path / "backup" / callbacks.TrainingBackup.STATE
                      ).read_text())
  assert state["epoch"] == 2 and state["seconds"] >= 2 * 0.5
  record = fit(_SlowEpochsThenStop(0.0))
  assert record["resumed_after"] == 2
  assert record["resumed_seconds"] == state["seconds"]
  finished = json.loads((tmp_path / "backup" / callbacks.TrainingBackup.STATE
                         ).read_text())
  assert finished["epoch"] == 3 and finished["seconds"] > state["seconds"]
