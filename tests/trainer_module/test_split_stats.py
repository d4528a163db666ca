"""The input pipeline's one counting pass (split_stats) and the parts it
holds in memory: the same rows, labels and weights as selecting record by
record."""

import types

import numpy as np
import pytest
import tensorflow as tf

import raw_records
from trainer_module import in_memory
from trainer_module import input_pipeline
from trainer_module import kept_split

# What the input pipeline reads of a Transform output.
_TRANSFORM = raw_records.TransformOutput()


def _examples(labels):
  return [raw_records.raw_example(label, row=i)
          for i, label in enumerate(labels)]


def _write(tmp_path, labels):
  """Two gzipped shards; returns the records in shard order and the
  pattern."""
  records = _examples(labels)
  shards = [records[0::2], records[1::2]]
  for index, shard in enumerate(shards):
    with tf.io.TFRecordWriter(str(tmp_path / f"train-{index}.gz"),
                              options="GZIP") as writer:
      for record in shard:
        writer.write(record)
  return records, [str(tmp_path / "train-*.gz")]


def _reference(records, labels, rate, buckets):
  """Record by record: (part of each record, kept by sampling, weight)."""
  keys = [input_pipeline.example_keys(
      tf.constant([r]), _TRANSFORM.raw_feature_spec(), "click")[0]
          for r in records]
  fingerprint = np.array([int(input_pipeline.record_buckets(k)[0])
                          for k in keys])
  kept = np.array([bool(input_pipeline.kept_by_sampling(
      k, tf.constant([l]), rate)[0]) if rate < 1 else True
                   for k, l in zip(keys, labels)])
  weight = np.where(labels > 0.5, 1.0, np.float32(1 / rate))
  return fingerprint < buckets, kept, weight, fingerprint


@pytest.mark.parametrize("rate", [1.0, 0.3])
def test_one_pass_counts_every_part_as_the_record_by_record_rule(
    tmp_path, rate):
  labels = (np.random.default_rng(3).random(3000) < 0.2).astype(np.float32)
  records, files = _write(tmp_path, labels)
  stats = input_pipeline.split_stats(files, _TRANSFORM.raw_feature_spec(),
                                     "click", rate)
  buckets = input_pipeline.validation_buckets(len(records))
  validation, kept, weight, fingerprint = _reference(records, labels, rate,
                                                     buckets)
  np.testing.assert_array_equal(
      stats.records, np.bincount(fingerprint,
                                 minlength=input_pipeline.VALIDATION_BUCKETS))
  for part, rows in (("all", np.ones_like(kept)), ("train", ~validation),
                     ("validation", validation)):
    chosen = rows & kept
    want = (int(chosen.sum()),
            labels[chosen].sum() / max(weight[chosen].sum(), 1.0))
    got = stats.label_stats(part, buckets)
    assert got[0] == want[0]
    assert got[1] == pytest.approx(want[1], rel=1e-12)
  # training_data's counts come from the one pass and match the rows its
  # two datasets yield (selected chunk by chunk in make_dataset).
  data = input_pipeline.training_data(files, _TRANSFORM, "click", 100,
                               negative_sampling_rate=rate)
  assert data.validation_buckets == buckets
  for dataset, rows, count in ((data.train, ~validation, data.train_examples),
                               (data.validation, validation,
                                data.validation_examples)):
    got = sorted(int(r) for batch in dataset for r in batch[0]["row"])
    assert got == sorted(np.flatnonzero(rows & kept).tolist())
    assert len(got) == count
  assert data.click_rate == stats.label_stats("train", buckets)[1]
  with pytest.raises(ValueError, match="unknown part 'test'"):
    stats.label_stats("test", buckets)


def test_in_memory_part_yields_the_same_rows_and_weights_every_pass(
    tmp_path):
  labels = (np.random.default_rng(4).random(2000) < 0.2).astype(np.float32)
  _, files = _write(tmp_path, labels)

  def rows(dataset):
    return sorted((int(r), float(l), float(w)) for f, l, ws in dataset
                  for r, l, w in zip(f["row"], l, ws))

  def order(dataset):
    return [int(r) for f, _, _ in dataset for r in f["row"]]

  plain = input_pipeline.make_dataset(files, _TRANSFORM, "click", 64,
                                      shuffle=False, part="train",
                                      buckets=100, negative_sampling_rate=0.5)
  want = rows(plain)
  part = in_memory.load_in_memory(plain, len(want))
  shuffled = part.batches(64, shuffle=True, seed=5)
  first, second = order(shuffled), order(shuffled)
  assert rows(shuffled) == want
  assert sorted(first) == sorted(second) == [r for r, _, _ in want]
  assert first != second  # A new permutation every pass...
  # ... the same ones for the same seed (a seeded run repeats).
  assert order(part.batches(64, shuffle=True, seed=5)) == first
  assert [len(f["row"]) for f, _, _ in shuffled] == [64] * (
      len(want) // 64) + ([len(want) % 64] if len(want) % 64 else [])
  # Unshuffled, the files' order.
  assert order(part.batches(64, shuffle=False)) == order(plain)
  with pytest.raises(ValueError, match="counting pass found"):
    in_memory.load_in_memory(plain, len(want) + 1)


def test_memory_fits_the_budget():
  # The fake Transform output: an int64 feature and a float32 label, and
  # the shuffle's int64 index.
  row_bytes = in_memory.transformed_row_bytes(_TRANSFORM, False)
  assert row_bytes == 20
  assert in_memory.transformed_row_bytes(_TRANSFORM, True) == 24
  memory = 1000 * row_bytes / in_memory.MEMORY_SHARE
  assert in_memory.memory_fits(1000, row_bytes, int(memory))
  assert not in_memory.memory_fits(1000, row_bytes, int(memory) - 10)
  assert not in_memory.memory_fits(1, None, 10**12)


def test_validation_slice_is_held_alone_when_the_split_does_not_fit(
    tmp_path, monkeypatch):
  labels = (np.random.default_rng(5).random(3000) < 0.2).astype(np.float32)
  records, files = _write(tmp_path, labels)
  # A machine whose budget holds twice the validation slice, a fraction of
  # the split (the slice is ~10% of it).
  slice_bytes = (len(records) * input_pipeline.VALIDATION_FRACTION *
                 in_memory.transformed_row_bytes(_TRANSFORM, False))
  memory = types.SimpleNamespace(
      total=int(2 * slice_bytes / in_memory.MEMORY_SHARE))
  monkeypatch.setattr(input_pipeline.psutil, "virtual_memory", lambda: memory)
  data = input_pipeline.training_data(files, _TRANSFORM, "click",
                               100)
  assert data.in_memory is None
  first = sorted(int(r) for f, _ in data.validation for r in f["row"])
  for path in tmp_path.glob("train-*.gz"):
    path.unlink()
  # Later validations (and the bias refit) read the slice from memory.
  assert sorted(int(r) for f, _ in data.validation
                for r in f["row"]) == first
  assert len(first) == data.validation_examples


def test_in_memory_part_keeps_every_column_of_every_dtype_and_shape():
  """One block per dtype of single-valued columns, a block of its own for
  a column of several values: the batches give back each column."""
  rows = 30
  features = {"id": np.arange(rows), "count": np.arange(rows) * 1.5,
              "other_id": np.arange(rows) * 7,
              "pair": np.stack([np.arange(rows), -np.arange(rows)], 1)}
  labels = (np.arange(rows) % 2).astype(np.float32)
  part = in_memory.load_in_memory(
      tf.data.Dataset.from_tensor_slices((features, labels)).batch(8), rows)
  assert len(part.blocks) == 4  # int64, float64, float32 and the pair.
  (got, got_labels), = part.batches(rows, shuffle=False)
  for name, want in features.items():
    np.testing.assert_array_equal(got[name].numpy(), want)
    assert got[name].dtype == tf.as_dtype(want.dtype)
  np.testing.assert_array_equal(got_labels.numpy(), labels)


def _same_split(got, want):
  """Two HeldSplits with the same counts and the same parts, block by
  block."""
  assert [getattr(got, n) for n in kept_split.COUNTS] == [
      getattr(want, n) for n in kept_split.COUNTS]
  for got_part, want_part in ((got.in_memory, want.in_memory),
                              (got.validation_in_memory,
                               want.validation_in_memory)):
    assert (got_part is None) == (want_part is None)
    if want_part is not None:
      assert got_part.rows == want_part.rows
      assert got_part.slots == want_part.slots
      assert got_part.structure == want_part.structure
      for got_block, want_block in zip(got_part.blocks, want_part.blocks,
                                       strict=True):
        assert got_block.dtype == want_block.dtype
        np.testing.assert_array_equal(got_block.numpy(), want_block.numpy())


def _no_reading(monkeypatch):
  """Counting or loading the files fails from here on."""
  def read(*args, **kwargs):
    raise AssertionError("the files were read")
  monkeypatch.setattr(input_pipeline, "split_stats", read)
  monkeypatch.setattr(in_memory, "load_in_memory", read)


def test_a_kept_split_is_read_back_without_reading_the_files(
    tmp_path, monkeypatch):
  labels = (np.random.default_rng(6).random(3000) < 0.2).astype(np.float32)
  _, files = _write(tmp_path, labels)
  kept = str(tmp_path / "held")
  want = input_pipeline.hold_split(files, _TRANSFORM, "click", 0.5,
                                   keep_in=kept)
  assert want.in_memory is not None and want.validation_in_memory is not None
  _no_reading(monkeypatch)
  got = input_pipeline.hold_split(files, _TRANSFORM, "click", 0.5,
                                  keep_in=kept)
  _same_split(got, want)
  # The epochs trained from it are the same batches.
  for a, b in zip(got.in_memory.batches(100, shuffle=True, seed=1),
                  want.in_memory.batches(100, shuffle=True, seed=1)):
    tf.nest.map_structure(np.testing.assert_array_equal, a, b)
  # Another sampling rate is other data: the files are read again.
  with pytest.raises(AssertionError, match="files were read"):
    input_pipeline.hold_split(files, _TRANSFORM, "click", 1.0, keep_in=kept)


def test_a_changed_file_or_another_machine_reads_the_files_again(
    tmp_path, monkeypatch):
  labels = (np.random.default_rng(7).random(2000) < 0.2).astype(np.float32)
  records, files = _write(tmp_path, labels)
  kept = str(tmp_path / "held")
  input_pipeline.hold_split(files, _TRANSFORM, "click", keep_in=kept)
  with tf.io.TFRecordWriter(str(tmp_path / "train-1.gz"),
                            options="GZIP") as writer:
    for record in records[1::2][:-1]:  # One record fewer.
      writer.write(record)
  shorter = input_pipeline.hold_split(files, _TRANSFORM, "click",
                                      keep_in=kept)
  assert shorter.train_examples + shorter.validation_examples == len(
      records) - 1
  # A machine too small to hold the training part: the kept one, with it
  # held, is not this machine's split.
  row_bytes = in_memory.transformed_row_bytes(_TRANSFORM, False)
  memory = types.SimpleNamespace(
      total=int(2 * shorter.validation_examples * row_bytes /
                in_memory.MEMORY_SHARE))
  monkeypatch.setattr(input_pipeline.psutil, "virtual_memory", lambda: memory)
  _no_reading(monkeypatch)
  with pytest.raises(AssertionError, match="files were read"):
    input_pipeline.hold_split(files, _TRANSFORM, "click", keep_in=kept)


def test_a_split_that_cannot_be_kept_is_a_warning(tmp_path, caplog):
  labels = (np.random.default_rng(8).random(1000) < 0.2).astype(np.float32)
  _, files = _write(tmp_path, labels)
  blocked = tmp_path / "a_file"
  blocked.write_text("")
  held = input_pipeline.hold_split(files, _TRANSFORM, "click",
                                   keep_in=str(blocked / "held"))
  assert held.in_memory is not None
  assert "could not keep the held split" in caplog.text
  assert not (tmp_path / "a_file" / "held.partial").exists()


def test_a_kept_part_of_another_layout_is_refused(tmp_path):
  rows = 12
  dataset = tf.data.Dataset.from_tensor_slices(
      ({"id": np.arange(rows)}, np.zeros(rows, np.float32))).batch(5)
  part = in_memory.load_in_memory(dataset, rows)
  in_memory.save_part(part, str(tmp_path))
  again = in_memory.read_part(str(tmp_path), dataset.element_spec, rows)
  for got, want in zip(again.blocks, part.blocks, strict=True):
    np.testing.assert_array_equal(got.numpy(), want.numpy())
  with pytest.raises(ValueError, match="block 0 holds int64"):
    in_memory.read_part(str(tmp_path), dataset.element_spec, rows + 1)
