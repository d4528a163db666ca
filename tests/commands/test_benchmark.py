"""The training-speed benchmark: its inputs, its cases and its CSV."""

import argparse
import csv

import numpy as np
import pytest

from commands import benchmark
from commands import cli
from commands import generate
from trainer_module import features
from trainer_module import models


@pytest.fixture(scope="module")
def criteo_file(tmp_path_factory):
  path = tmp_path_factory.mktemp("bench") / "criteo.txt"
  generate.write_synthetic("criteo", 2000, 3, str(path))
  return path


def test_load_transformed_follows_the_transform_contract(criteo_file):
  data = benchmark.load_transformed(features.CRITEO, str(criteo_file), 5)
  assert data.rows == 2000
  assert set(data.features) == set(features.CRITEO.categorical_features +
                                   features.CRITEO.dense)
  for field in features.CRITEO.categorical_features:
    ids = data.features[field]
    assert ids.dtype == np.int64
    assert ids.min() >= 0 and ids.max() < data.vocab_sizes[field]
    # Id 0 is the most frequent token, as in a tf.Transform vocabulary.
    in_vocab = ids[ids < data.vocab_sizes[field] - 1]
    if in_vocab.size:
      counts = np.bincount(in_vocab)
      assert counts[0] == counts.max() and counts[counts > 0].min() >= 5
  for field in features.CRITEO.dense:
    assert 0.0 <= data.features[field].min() <= data.features[field].max() <= 1
  assert set(np.unique(data.labels)) <= {0.0, 1.0}


def test_rare_and_missing_tokens_share_the_oov_id(tmp_path):
  spec = features.CRITEO
  rows = []
  for i in range(12):
    dense = [str(i)] * len(spec.dense)
    # C1: 'a' 10 times, 'b' once, missing once; other fields constant.
    c1 = "a" if i < 10 else ("b" if i == 10 else "")
    rows.append("\t".join([str(i % 2)] + dense +
                          [c1] + ["x"] * (len(spec.str_categorical) - 1)))
  path = tmp_path / "tiny.txt"
  path.write_text("\n".join(rows) + "\n")
  data = benchmark.load_transformed(spec, str(path), 2)
  assert data.vocab_sizes["C1"] == 1 + features.NUM_OOV_BUCKETS
  assert list(data.features["C1"]) == [0] * 10 + [1, 1]


def test_wrong_column_count_names_the_file(tmp_path):
  path = tmp_path / "bad.txt"
  path.write_text("1\t2\t3\n")
  with pytest.raises(ValueError, match=r"bad\.txt.*40.*got 3"):
    benchmark.load_transformed(features.CRITEO, str(path), 1)


def test_cases_cover_batch_update_cowclip_and_larger_vocabularies():
  cases = benchmark.benchmark_cases([64, 512], vocab_scale=10)
  assert len(cases) == 2 * 2 * 2 + 4
  assert {(c.batch_size, c.embedding_update, c.cowclip)
          for c in cases if c.vocab_scale == 1} == {
              (b, u, c) for b in (64, 512) for u in ("dense", "sparse")
              for c in (True, False)}
  assert {c.batch_size for c in cases if c.vocab_scale == 10} == {64}
  assert all(c.vocab_scale == 1 for c in benchmark.benchmark_cases([64], 1))


def test_cases_cover_each_precision():
  cases = benchmark.benchmark_cases([64], 1, models.PRECISIONS)
  assert {c.precision for c in cases} == set(models.PRECISIONS)
  assert len(cases) == 2 * 2 * len(models.PRECISIONS)
  assert benchmark.parse_name_list("float32, mixed_bfloat16") == [
      "float32", "mixed_bfloat16"]
  with pytest.raises(argparse.ArgumentTypeError, match="float16"):
    benchmark.parse_name_list("float16")


def test_mlp_flops_count_the_three_matrix_products_per_weight():
  model = models.build_model(
      "deepfm", {"a": 5, "b": 3}, ("x",),
      models.ModelOptions(embedding_dim=2, hidden_units=(4, 3)))
  # DNN input 2 * 2 + 1 = 5: kernels 5x4, 4x3 and the 3x1 output layer.
  assert benchmark.mlp_flops_per_example(model) == 6 * (20 + 12 + 3)


def test_parse_int_list_rejects_bad_lists():
  assert benchmark.parse_int_list("1024, 8192") == [1024, 8192]
  for text in ("", "a,2", "0,4"):
    with pytest.raises(argparse.ArgumentTypeError):
      benchmark.parse_int_list(text)


@pytest.mark.slow
def test_benchmark_command_writes_positive_rates(criteo_file, tmp_path):
  out = tmp_path / "bench.csv"
  code = cli.main(["benchmark", "--data", str(criteo_file),
                   "--batch-sizes", "64,256", "--hidden-units", "16",
                   "--min-frequency", "3", "--vocab-scale", "3",
                   "--warmup-steps", "1", "--steps", "2",
                   "--output", str(out)])
  assert code == 0
  with open(out, newline="") as f:
    reader = csv.DictReader(f)
    assert tuple(reader.fieldnames) == benchmark.COLUMNS
    rows = list(reader)
  assert len(rows) == 12
  for row in rows:
    assert float(row["seconds_per_step"]) > 0
    assert float(row["examples_per_second"]) > 0
    assert int(row["steps"]) == 2
    assert row["precision"] == "float32"
    assert float(row["matmul_peak_gflops"]) > 0
    assert float(row["gflops_per_second"]) > 0
    for name in benchmark.COMPONENTS:
      assert float(row[f"{name}_share"]) >= 0
    assert (float(row["cowclip_share"]) > 0) == (row["cowclip"] == "True")
  small = {int(r["vocab_rows"]) for r in rows if r["vocab_scale"] == "1"}
  large = {int(r["vocab_rows"]) for r in rows if r["vocab_scale"] == "3"}
  assert len(small) == 1 and large == {3 * small.pop()}
