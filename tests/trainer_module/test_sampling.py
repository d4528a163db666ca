"""Negative down-sampling: the hash decision, the importance weights, the
sampled training data, and calibration without a post-hoc correction (the
weighted training step's own tests are in test_training.py)."""

import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf

import raw_records
from trainer_module import features
from trainer_module import input_pipeline
from trainer_module import models
from trainer_module import plan as plan_lib
from trainer_module import trainer
from trainer_module import training
from trainer_module.settings import StepOptions
from trainer_module.settings import TrainerSettings

# Field "a" of the calibration test's logistic regression.
VOCAB = {"a": 7}
# What the input pipeline reads of a Transform output.
_TRANSFORM = raw_records.TransformOutput(("row", "a"))


def _np(value):
  return keras.ops.convert_to_numpy(value)


def _examples(labels, seed=0):
  """Serialized transformed examples: a row id, a field 'a', the label."""
  rng = np.random.default_rng(seed)
  ids = rng.integers(0, VOCAB["a"], len(labels))
  return [raw_records.raw_example(label, row=i, a=a)
          for i, (a, label) in enumerate(zip(ids, labels))]


def test_hash_keeps_every_click_and_a_fixed_share_of_non_clicks():
  labels = (np.random.default_rng(0).random(20_000) < 0.2).astype(
      np.float32)
  records = tf.constant(_examples(labels))
  keys, _ = input_pipeline.example_keys(records, _TRANSFORM.raw_feature_spec(),
                                        "click")
  rate = 0.25
  kept = input_pipeline.kept_by_sampling(keys, labels, rate).numpy()
  assert kept[labels > 0].all()  # Every click.
  non_clicks = (labels == 0).sum()
  kept_non_clicks = kept[labels == 0].sum()
  # Binomial(non_clicks, rate): within 4 standard deviations.
  sd = np.sqrt(non_clicks * rate * (1 - rate))
  assert abs(kept_non_clicks - rate * non_clicks) < 4 * sd
  # The same decision per record, whatever else is in the batch.
  reversed_kept = input_pipeline.kept_by_sampling(keys[::-1], labels[::-1],
                                                  rate).numpy()[::-1]
  np.testing.assert_array_equal(kept, reversed_kept)
  # The weights: 1 per click, 1/rate per kept non-click, so on this fixed
  # hash they sum to clicks + kept_non_clicks / rate exactly, and in
  # expectation to the unsampled count.
  weights = input_pipeline.importance_weights(labels[kept], rate).numpy()
  assert set(weights[labels[kept] > 0]) == {1.0}
  assert set(weights[labels[kept] == 0]) == {4.0}
  assert weights.sum() == labels.sum() + kept_non_clicks / rate
  assert abs(weights.sum() - len(labels)) < 4 * sd / rate
  # Independent of the validation slice's fingerprint: its non-clicks are
  # kept at the same rate.
  validation = input_pipeline.in_part(
      input_pipeline.record_buckets(keys), "validation", 100).numpy()
  share = kept[validation & (labels == 0)].mean()
  assert abs(share - rate) < 4 * np.sqrt(rate * (1 - rate) / (
      validation & (labels == 0)).sum())


def _write(path, records):
  with tf.io.TFRecordWriter(path, options="GZIP") as writer:
    for record in records:
      writer.write(record)


def test_training_data_samples_both_parts_with_weights(tmp_path):
  labels = (np.random.default_rng(1).random(4000) < 0.2).astype(np.float32)
  _write(str(tmp_path / "train.gz"), _examples(labels))
  files = [str(tmp_path / "train.gz")]
  full = input_pipeline.training_data(files, _TRANSFORM, "click", 100)
  sampled = input_pipeline.training_data(files, _TRANSFORM, "click", 100,
                                  seed=4, negative_sampling_rate=0.5)
  again = input_pipeline.training_data(files, _TRANSFORM, "click", 100,
                                seed=9, negative_sampling_rate=0.5)

  def rows(dataset):
    return {int(r): (float(l), float(w)) for f, l, w in dataset
            for r, l, w in zip(f["row"], l, w)}

  train, validation = rows(sampled.train), rows(sampled.validation)
  assert train == rows(again.train)  # The same rows in every run.
  assert len(train) == sampled.train_examples
  assert len(validation) == sampled.validation_examples
  full_train = {int(r) for f, _ in full.train for r in f["row"]}
  assert set(train) <= full_train
  clicks = {i for i in full_train if labels[i] > 0}
  assert clicks <= set(train)  # Every click of the training part.
  assert {w for l, w in train.values() if l > 0} == {1.0}
  assert {w for l, w in train.values() if l == 0} == {2.0}
  # The weighted click rate is the unsampled estimate.
  weights = sum(w for _, w in train.values())
  assert sampled.click_rate == pytest.approx(len(clicks) / weights)
  assert sampled.negative_sampling["rate"] == 0.5
  assert full.negative_sampling == {}


def test_every_replica_trains_on_the_same_sampled_weighted_rows(
    tmp_path, monkeypatch):
  """train_replicas reshuffles the training part per replica; the rows and
  weights stay the sampled ones (only the order changes)."""
  labels = (np.random.default_rng(2).random(2000) < 0.2).astype(np.float32)
  _write(str(tmp_path / "train.gz"), _examples(labels))
  files = [str(tmp_path / "train.gz")]
  data = input_pipeline.training_data(files, _TRANSFORM, "click", 100,
                               negative_sampling_rate=0.5)
  seen = []

  def fake_train(settings, replica_data, *args, **kwargs):
    seen.append({int(r): float(w) for f, _, w in replica_data.train
                 for r, w in zip(f["row"], w)})
    return object(), {"epochs_run": 1, "best_epoch": 1, "best": {},
                      "bias_shift": 0.0}

  monkeypatch.setattr(trainer, "train", fake_train)
  settings = TrainerSettings(dataset="criteo", replicas=2,
                             negative_sampling_rate=0.5, batch_size=100)
  monkeypatch.setattr(TrainerSettings, "spec", property(
      lambda self: dataclasses.replace(features.CRITEO, label="click")))
  trainer.train_replicas(plan_lib.resolve(settings, {}, data.train_examples),
                         data, files, _TRANSFORM, str(tmp_path / "logs"))
  want = {int(r): float(w) for f, _, w in data.train
          for r, w in zip(f["row"], w)}
  assert seen == [want, want]


def test_sampling_record_warns_when_a_non_click_outweighs_the_clicks():
  calm = input_pipeline.sampling_record(0.5, 0.25, 1024)
  assert calm["warning"] is None
  # Kept click share c / (c + p (1 - c)) = 0.25 / 0.625 = 0.4.
  assert calm["kept_click_share"] == pytest.approx(0.4)
  assert calm["clicks_per_batch"] == pytest.approx(409.6)
  # ESS share: (0.4 + 0.6 * 2)^2 / (0.4 + 0.6 * 4) = 2.56 / 2.8.
  assert calm["effective_batch_share"] == pytest.approx(2.56 / 2.8)
  shaky = input_pipeline.sampling_record(0.01, 0.001, 1024)
  # 1/p = 100 > 1024 * 0.001 / (0.001 + 0.01 * 0.999) = 93.2 clicks.
  assert shaky["clicks_per_batch"] == pytest.approx(
      1024 * 0.001 / (0.001 + 0.00999))
  assert "outweighs the batch's clicks" in shaky["warning"]


def test_settings_check_the_rate():
  assert TrainerSettings(dataset="criteo").negative_sampling_rate == 1.0
  for bad in (0.0, 1.5, -0.1, True):
    with pytest.raises(ValueError, match="negative_sampling_rate"):
      TrainerSettings(dataset="criteo", negative_sampling_rate=bad)


def test_weighted_training_on_sampled_data_stays_calibrated(tmp_path):
  """A logistic regression trained on down-sampled data with the weights
  predicts the UNSAMPLED click rate per id, no correction; without them it
  predicts the sampled (inflated) rate."""
  rng = np.random.default_rng(7)
  examples = 16_000
  ids = rng.integers(0, VOCAB["a"], examples)
  true_rate = 0.05 + 0.03 * ids  # 5% .. 23% by id.
  labels = (rng.random(examples) < true_rate).astype(np.float32)
  # The row id makes every record distinct (identical records share the
  # hash's decision).
  records = [raw_records.raw_example(label, row=i, a=a)
             for i, (a, label) in enumerate(zip(ids, labels))]
  _write(str(tmp_path / "train.gz"), records)
  rate = 0.25
  data = input_pipeline.training_data([str(tmp_path / "train.gz")], _TRANSFORM,
                               "click", 512, negative_sampling_rate=rate)

  # The sampled training part, read once (the hash decided which rows).
  kept = [(f["row"].numpy(), l.numpy(), w.numpy()) for f, l, w in data.train]
  rows, kept_labels, weights = (np.concatenate(c) for c in zip(*kept))
  kept_ids = ids[rows]

  def train(sample_weights):
    keras.utils.set_random_seed(0)
    model = models.build_model("lr", {"a": VOCAB["a"]}, ())
    training.compile_model(model, training.TrainingConfig(
        dense_lr=0.05, embed_lr=0.05, l2=0.0, r=1.0, zeta=1e-5,
        warmup_epochs=0.0, steps_per_epoch=1,
        step=StepOptions(cowclip=False)))
    # Full-batch steps: the optimum of the loss, without minibatch noise.
    model.fit(tf.data.Dataset.from_tensor_slices(
        ({"a": kept_ids}, kept_labels, sample_weights)).batch(
            len(kept_ids)).cache().repeat(300), verbose=0)
    logits = _np(model({"a": np.arange(VOCAB["a"])})).reshape(-1)
    return 1 / (1 + np.exp(-logits.astype(np.float64)))

  # The training part's unsampled click rate per id (the validation slice's
  # rows are not in it: every click of the part is kept, so its clicks are
  # the kept ones).
  part = np.zeros(examples, bool)
  part[rows] = True
  validation = input_pipeline.in_part(
      input_pipeline.record_buckets(input_pipeline.example_keys(
          tf.constant(records), _TRANSFORM.raw_feature_spec(), "click")[0]),
      "validation",
      data.validation_buckets).numpy()
  part |= ~validation
  # Each fits the optimum of its loss: per id, the (weighted) click rate of
  # the kept rows.
  def rate_by_id(w):
    return np.array([np.average(kept_labels[kept_ids == a],
                                weights=w[kept_ids == a])
                     for a in range(VOCAB["a"])])

  weighted = train(weights)
  np.testing.assert_allclose(weighted, rate_by_id(weights), atol=0.005)
  unweighted = train(np.ones_like(weights))
  np.testing.assert_allclose(unweighted, rate_by_id(np.ones_like(weights)),
                             atol=0.005)
  # Calibrated on the UNSAMPLED rows of the training part with the
  # weights (a 1.6% relative standard error at these counts), far off
  # without them.
  click_rate = labels[part].mean()
  assert weighted[ids[part]].mean() == pytest.approx(click_rate, rel=0.06)
  assert unweighted[ids[part]].mean() > 1.5 * click_rate
