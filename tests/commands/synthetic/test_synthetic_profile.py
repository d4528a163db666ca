"""The generator's id-frequency profiles, rare-id signal and top-K data."""

import collections
import hashlib

import numpy as np
import pytest

from commands.synthetic import generate
from commands.synthetic import profile as synthetic_profile
from commands.synthetic import world as synthetic_world
from trainer_module import features

_LARGE_CRITEO = ("C3", "C4", "C10", "C12", "C16", "C21", "C24", "C26")


def _columns(path: str, spec: features.DatasetSpec):
  """{column: list of values} of a generated file."""
  with open(path) as f:
    lines = f.read().splitlines()
  if spec.has_header:
    lines = lines[1:]
  rows = [line.split(spec.delimiter) for line in lines]
  return {name: [r[j] for r in rows] for j, name in enumerate(spec.columns)}


@pytest.mark.parametrize("fmt,digest", [
    ("criteo",
     "e41200047f0a92c4ec086add658e7a0958f46ae1dbc430b0907a7dec910fe783"),
    ("avazu",
     "18cfa86d8be0f6722540ee79cff895ba2ba1e7a18607a51d95880dd941f5aedb")])
def test_default_profile_writes_the_benchmarked_bytes(tmp_path, fmt, digest):
  """The defaults write exactly what the generator wrote when the recorded
  benchmarks and studies were measured (commit 57f4dde)."""
  path = str(tmp_path / "train")
  generate.write_synthetic(fmt, 2000, 3, path)
  with open(path, "rb") as f:
    assert hashlib.sha256(f.read()).hexdigest() == digest


def test_top_ids_keep_k_ids_per_field_and_the_same_labels(tmp_path):
  spec = features.CRITEO
  full, top = str(tmp_path / "full"), str(tmp_path / "top")
  generate.write_synthetic("criteo", 5000, 2, full)
  generate.write_synthetic("criteo", 5000, 2, top, top_ids=3)
  full_columns, top_columns = _columns(full, spec), _columns(top, spec)
  for name in spec.dense + (spec.label,):
    assert top_columns[name] == full_columns[name], name
  for name in spec.str_categorical:
    kept, original = top_columns[name], full_columns[name]
    assert [v == "" for v in kept] == [v == "" for v in original], name
    values = collections.Counter(v for v in kept if v)
    assert len(values) <= 4, (name, len(values))
    # Where an id was kept it is written as it was.
    unchanged = sum(a == b for a, b in zip(kept, original) if a)
    assert unchanged >= sum(values.values()) - max(values.values()), name
  with pytest.raises(ValueError, match="top_ids must be >= 1"):
    generate.write_synthetic("criteo", 10, 0, str(tmp_path / "x"), top_ids=0)


@pytest.mark.parametrize("profile", synthetic_profile.PROFILES)
def test_expected_counts_match_a_generated_file(tmp_path, profile):
  """The closed-form counts are those of the files the generator writes:
  distinct ids and ids seen 10 times, per large Criteo field."""
  rows = 100_000
  path = str(tmp_path / "train.txt")
  generate.write_synthetic("criteo", rows, 5, path, id_profile=profile)
  columns = _columns(path, features.CRITEO)
  world = synthetic_profile.world_for("criteo", profile)
  for name in _LARGE_CRITEO:
    counts = np.array(list(collections.Counter(
        v for v in columns[name] if v).values()))
    distinct, kept = synthetic_profile.expected_ids(world.ids[name], rows, 10,
                                                    rows)
    assert len(counts) == pytest.approx(distinct, rel=0.02), name
    assert np.sum(counts >= 10) == pytest.approx(kept, rel=0.05, abs=30), name


def test_kaggle_profile_has_the_published_counts():
  """At full size: each field's expected distinct values are the real
  train.txt's, and about a million ids are seen 10 times in its 90%
  training split; the default profile keeps the 1.59M measured at full
  size (docs/benchmark_data.md: 1,585,445)."""
  rows = synthetic_profile.KAGGLE_CRITEO_ROWS
  train_rows = round(rows * 0.9)
  kept = {}
  for profile in synthetic_profile.PROFILES:
    world = synthetic_profile.world_for("criteo", profile)
    kept[profile] = 0.0
    for name, field in world.ids.items():
      distinct, field_kept = synthetic_profile.expected_ids(field, rows, 10,
                                                            train_rows)
      kept[profile] += field_kept
      if profile == "kaggle":
        published = synthetic_profile.KAGGLE_CRITEO_DISTINCT[name]
        assert distinct == pytest.approx(published, rel=0.005), name
  assert kept["kaggle"] == pytest.approx(
      synthetic_profile.KAGGLE_CRITEO_KEPT_AT_10, rel=0.05)
  assert kept["default"] == pytest.approx(1_585_445, rel=0.01)


def test_rare_signal_moves_the_click_signal_to_rare_ids():
  shares = [synthetic_profile.signal_shares(
      synthetic_profile.world_for("criteo", "default", beta), 900_000)
            for beta in (0.0, 0.3)]
  for part in shares:
    assert sum(part.values()) == pytest.approx(1.0)
  assert shares[1]["ids_rare"] > shares[0]["ids_rare"] + 0.02
  assert shares[1]["ids_frequent"] < shares[0]["ids_frequent"]
  assert shares[1]["pairs"] == pytest.approx(shares[0]["pairs"], abs=0.05)


def test_rare_signal_weights_keep_unit_mean_square():
  """Normalised over the field's full-size draws, so the id part of the
  logit keeps its scale whatever beta."""
  world = synthetic_profile.world_for("criteo", "default", 0.1)
  rows = synthetic_profile.FULL_ROWS["criteo"]
  sampled = synthetic_world.sample_rows(
      world, np.random.default_rng(0), np.arange(200_000), rows)
  for name in ("C4", "C10", "C15"):
    keys = sampled.keys[name]
    scale = synthetic_world.rare_weight_scale(world, name, keys[keys > 0])
    assert np.mean(scale**2) == pytest.approx(1.0, rel=0.1), name


def test_unknown_or_unfitted_profile_is_refused(tmp_path):
  with pytest.raises(ValueError, match="unknown id profile 'zipf'"):
    synthetic_profile.world_for("criteo", "zipf")
  with pytest.raises(ValueError, match="fitted to Criteo"):
    generate.write_synthetic("avazu", 10, 0, str(tmp_path / "x"),
                             id_profile="kaggle")
