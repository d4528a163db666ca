"""trainer_module.trainer pieces that need no pipeline: bucketing, hparams."""

import numpy as np
import pytest
import tensorflow as tf

from trainer_module import scaling
from trainer_module import trainer


def test_frequency_buckets_boundaries_belong_to_the_higher_bucket():
  counts = tf.constant([0.0, 99.9, 100.0, 9999.0, 10000.0, 1e9])
  got = trainer.frequency_buckets(counts, (100, 10000)).numpy().tolist()
  assert got == [b"rare", b"rare", b"medium", b"medium", b"frequent",
                 b"frequent"]


def test_frequency_buckets_of_geometric_mean_like_serving_does():
  # Two fields: counts (1, 10000) -> geometric mean ~100 -> medium.
  log_counts = tf.math.log1p(tf.constant([[1.0], [10000.0]]))
  typical = tf.math.expm1(tf.reduce_mean(log_counts, axis=0))
  np.testing.assert_allclose(typical.numpy(), [np.sqrt(2 * 10001) - 1],
                             rtol=1e-5)
  assert trainer.frequency_buckets(typical, (100, 10000)).numpy() == [
      b"medium"]


def test_training_hparams_scale_tuned_base_values():
  config = {"scaling_rule": "cowclip", "base_batch_size": 1024,
            "batch_size": 8192,
            "base_hparams": {"dense_lr": 8e-4, "embed_lr": 1e-4, "l2": 1e-5,
                             "r": 1.0, "zeta": 1e-5, "warmup_epochs": 1.0}}
  record = trainer.training_hparams(config, {"dense_lr": 1e-3,
                                             "embedding_dim": 16})
  assert record["base"]["dense_lr"] == 1e-3
  assert "embedding_dim" not in record["base"]
  assert record["scaled"] == scaling.scale_hparams(
      "cowclip", record["base"], 1024, 8192)


def test_check_training_fits_reports_sizes_and_refuses_what_cannot_fit():
  sizes = {"C1": 1001, "C2": 11}
  summary = trainer.check_training_fits(sizes, 10, 512, 10_000, 2**30)
  assert "2 embedding tables, 1,012 rows" in summary
  with pytest.raises(ValueError, match="batch size 8192 is larger than the "
                     "1000 training examples"):
    trainer.check_training_fits(sizes, 10, 8192, 1000, 2**30)
  with pytest.raises(ValueError, match="raise --min-frequency"):
    trainer.check_training_fits({"C1": 10**9}, 10, 512, 10_000, 2**30)
  with pytest.raises(ValueError, match="training split is empty"):
    trainer.check_training_fits(sizes, 10, 512, 0, 2**30)


def test_label_stats_counts_examples_and_clicks(tmp_path):
  path = str(tmp_path / "part-0.gz")
  with tf.io.TFRecordWriter(path, options="GZIP") as writer:
    for label in [1.0, 0.0, 0.0, 1.0, 0.0]:
      writer.write(tf.train.Example(features=tf.train.Features(feature={
          "click": tf.train.Feature(float_list=tf.train.FloatList(
              value=[label]))})).SerializeToString())
  assert trainer.label_stats([str(tmp_path / "*.gz")], "click") == (5, 0.4)
  with pytest.raises(FileNotFoundError, match="no transformed examples"):
    trainer.label_stats([str(tmp_path / "none-*")], "click")
