"""Tests of the synthetic Criteo/Avazu raw-file generator."""

import collections
import dataclasses
import hashlib
import os
import re
from typing import List, Tuple

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.preprocessing import OneHotEncoder

from commands.cli import main as cli
from commands.synthetic import generate
from commands.synthetic import profile as synthetic_profile
from commands.synthetic import world as synthetic_world
from trainer_module import features

# The real Kaggle Avazu header, the format contract the file must meet.
_AVAZU_HEADER = (
    "id,click,hour,C1,banner_pos,site_id,site_domain,site_category,app_id,"
    "app_domain,app_category,device_id,device_ip,device_model,device_type,"
    "device_conn_type,C14,C15,C16,C17,C18,C19,C20,C21")
_HEX = re.compile(r"[0-9a-f]{8}")
_INT = re.compile(r"-?[0-9]+")


def _read(path: str,
          spec: features.DatasetSpec) -> Tuple[str, List[List[str]]]:
  """The header line ('' if none) and the fields of every data line."""
  with open(path, "rb") as f:
    text = f.read().decode("ascii")
  assert "\r" not in text and text.endswith("\n")
  lines = text[:-1].split("\n")
  header = lines.pop(0) if spec.has_header else ""
  return header, [line.split(spec.delimiter) for line in lines]


def _column(rows: List[List[str]], spec: features.DatasetSpec,
            name: str) -> List[str]:
  j = spec.columns.index(name)
  return [r[j] for r in rows]


def _labels(rows, spec) -> np.ndarray:
  return np.array([v == "1" for v in _column(rows, spec, spec.label)])


@pytest.fixture(scope="module")
def criteo_file(tmp_path_factory):
  path = str(tmp_path_factory.mktemp("criteo") / "train.txt")
  return generate.write_synthetic("criteo", 20_000, 11, path), path


@pytest.fixture(scope="module")
def avazu_file(tmp_path_factory):
  path = str(tmp_path_factory.mktemp("avazu") / "train")
  return generate.write_synthetic("avazu", 20_000, 11, path), path


def test_criteo_layout(criteo_file):
  summary, path = criteo_file
  spec = features.CRITEO
  header, rows = _read(path, spec)
  assert header == "" and len(rows) == summary.rows == 20_000
  assert os.path.getsize(path) == summary.bytes_written
  assert {len(r) for r in rows} == {40}
  assert set(_column(rows, spec, spec.label)) == {"0", "1"}
  for name in spec.dense:
    values = [int(v) for v in _column(rows, spec, name) if v]
    assert all(_INT.fullmatch(v) for v in _column(rows, spec, name) if v)
    assert min(values) >= (-3 if name == "I2" else 0), name
  for name in spec.str_categorical:
    assert all(_HEX.fullmatch(v) for v in _column(rows, spec, name) if v)
  # Only dense and id fields may be empty (as in the real data), I2 never;
  # C19/C20/C25/C26 are empty together on ~44% of rows.
  assert "" not in _column(rows, spec, "I2")
  empty = {n: np.array([v == "" for v in _column(rows, spec, n)])
           for n in ("C19", "C20", "C25", "C26", "I1", "C3")}
  assert 0.40 < empty["C19"].mean() < 0.48
  assert all((empty[n] == empty["C19"]).all() for n in ("C20", "C25", "C26"))
  assert 0.42 < empty["I1"].mean() < 0.49
  assert 0.02 < empty["C3"].mean() < 0.05
  negative_i2 = np.mean([v.startswith("-") for v in _column(rows, spec, "I2")])
  assert 0.02 < negative_i2 < 0.1


def test_avazu_layout(avazu_file):
  summary, path = avazu_file
  spec = features.AVAZU
  header, rows = _read(path, spec)
  assert header == _AVAZU_HEADER
  assert len(rows) == summary.rows == 20_000
  assert os.path.getsize(path) == summary.bytes_written
  assert {len(r) for r in rows} == {24}
  assert all(v for r in rows for v in r), "Avazu has no empty fields"
  ids = _column(rows, spec, "id")
  assert all(v.isdigit() and int(v) < 2**64 for v in ids)
  assert len(set(ids)) == len(ids)
  assert set(_column(rows, spec, spec.label)) == {"0", "1"}
  hours = [int(v) for v in _column(rows, spec, spec.time_field)]
  assert hours == sorted(hours), "rows are in time order"
  assert hours[0] == 14102100 and hours[-1] == 14103023
  assert all(21 <= h // 100 % 100 <= 30 and h % 100 <= 23 for h in hours)
  for name in spec.int_categorical:
    assert all(_INT.fullmatch(v) for v in _column(rows, spec, name)), name
  for name in spec.str_categorical:
    assert all(_HEX.fullmatch(v) for v in _column(rows, spec, name)), name
  assert "-1" in _column(rows, spec, "C20")


@pytest.mark.parametrize("fmt", ["criteo", "avazu"])
def test_same_seed_same_bytes_other_seed_other_rows(tmp_path, fmt):
  # Small chunks: the file is assembled from several chunks.
  paths = [str(tmp_path / name) for name in ("a", "b", "c")]
  for path, seed in zip(paths, (3, 3, 4)):
    generate.write_synthetic(fmt, 2_500, seed, path, chunk_rows=700)
  data = [open(p, "rb").read() for p in paths]
  assert data[0] == data[1]
  spec = features.get_spec(fmt)
  lines = [set(d.split(b"\n")[int(spec.has_header):-1]) for d in data]
  assert len(lines[0] & lines[2]) < 10


def test_chunking_keeps_rows_valid(tmp_path):
  path = str(tmp_path / "train")
  summary = generate.write_synthetic("avazu", 1_000, 5, path, chunk_rows=97)
  _, rows = _read(path, features.AVAZU)
  assert len(rows) == summary.rows == 1_000
  assert summary.clicks == _labels(rows, features.AVAZU).sum()
  assert str(summary) == (
      f"wrote 1,000 avazu rows (seed 5, {summary.clicks} clicks: "
      f"{summary.clicks / 1000:.1%}) to {path}, "
      f"{summary.bytes_written / 2**20:.1f} MiB")
  ids = _column(rows, features.AVAZU, "id")
  assert len(set(ids)) == 1_000
  hours = [int(v) for v in _column(rows, features.AVAZU, "hour")]
  assert hours == sorted(hours)


def test_click_rates_near_real(criteo_file, avazu_file):
  for (summary, path), spec, low, high in (
      (criteo_file, features.CRITEO, 0.23, 0.28),
      (avazu_file, features.AVAZU, 0.15, 0.19)):
    _, rows = _read(path, spec)
    assert summary.clicks == _labels(rows, spec).sum()
    assert low < summary.click_rate < high, (spec.name, summary.click_rate)


@pytest.mark.parametrize("fmt,field", [("criteo", "C3"), ("criteo", "C10"),
                                       ("avazu", "device_ip"),
                                       ("avazu", "device_model")])
def test_id_frequencies_are_skewed(criteo_file, avazu_file, fmt, field):
  _, path = criteo_file if fmt == "criteo" else avazu_file
  spec = features.get_spec(fmt)
  _, rows = _read(path, spec)
  counts = np.array(sorted(collections.Counter(
      v for v in _column(rows, spec, field) if v).values(), reverse=True))
  assert len(counts) > 1_000, "a high-cardinality field"
  top = counts[:len(counts) // 100].sum() / counts.sum()
  assert top > 0.3, f"top 1% of ids cover only {top:.2f}"
  assert np.mean(counts <= 2) > 0.5, "most ids are rare"
  assert counts[0] > 100, "the head id repeats even in a small file"


def test_small_fields_keep_their_cardinality(criteo_file, avazu_file):
  for (_, path), spec, caps in (
      (criteo_file, features.CRITEO, {"C9": 3, "C17": 10, "C20": 4}),
      (avazu_file, features.AVAZU, {"banner_pos": 7, "device_type": 5,
                                    "device_conn_type": 4, "C18": 4})):
    _, rows = _read(path, spec)
    for name, cap in caps.items():
      seen = set(_column(rows, spec, name)) - {""}
      assert 2 <= len(seen) <= cap, (name, seen)


def _one_hot_auc(path: str, spec: features.DatasetSpec) -> float:
  """Eval AUC of a logistic regression on one-hot ids, 3/4 train split."""
  _, rows = _read(path, spec)
  names = spec.int_categorical + spec.str_categorical
  x = np.array([[r[spec.columns.index(n)] for n in names] for r in rows])
  y = _labels(rows, spec)
  split = len(rows) * 3 // 4
  encoder = OneHotEncoder(handle_unknown="ignore").fit(x[:split])
  model = LogisticRegression(C=0.05, max_iter=200, solver="liblinear")
  model.fit(encoder.transform(x[:split]), y[:split])
  return roc_auc_score(y[split:], model.predict_proba(
      encoder.transform(x[split:]))[:, 1])


def test_labels_are_learnable(criteo_file, avazu_file):
  assert _one_hot_auc(criteo_file[1], features.CRITEO) > 0.6
  assert _one_hot_auc(avazu_file[1], features.AVAZU) > 0.6


def test_seeds_share_the_hidden_model(tmp_path, avazu_file):
  """Per-id click rates agree across seeds: one world, two samples."""
  spec = features.AVAZU
  other = str(tmp_path / "other")
  generate.write_synthetic("avazu", 20_000, 12, other)
  rates = []
  for path in (avazu_file[1], other):
    _, rows = _read(path, spec)
    clicks = collections.defaultdict(list)
    for value, label in zip(_column(rows, spec, "C14"), _labels(rows, spec)):
      clicks[value].append(label)
    rates.append({v: np.mean(c) for v, c in clicks.items() if len(c) >= 100})
  common = sorted(set(rates[0]) & set(rates[1]))
  assert len(common) >= 10
  corr = np.corrcoef([rates[0][v] for v in common],
                     [rates[1][v] for v in common])[0, 1]
  assert corr > 0.6


def test_failure_leaves_no_partial_file(tmp_path, monkeypatch):
  out = tmp_path / "train.txt"
  out.write_bytes(b"old")
  real_format = generate._format_rows
  calls = []

  def failing_format(*args):
    calls.append(1)
    if len(calls) == 2:
      raise RuntimeError("disk full")
    return real_format(*args)

  monkeypatch.setattr(generate, "_format_rows", failing_format)
  with pytest.raises(RuntimeError, match="disk full"):
    generate.write_synthetic("criteo", 300, 1, str(out), chunk_rows=100)
  assert out.read_bytes() == b"old"
  assert os.listdir(tmp_path) == ["train.txt"]


def test_creates_parent_directories(tmp_path):
  out = tmp_path / "a" / "b" / "train"
  summary = generate.write_synthetic("avazu", 10, 1, str(out))
  assert out.is_file() and summary.path == str(out)
  assert os.listdir(out.parent) == ["train"]


@pytest.mark.parametrize("kwargs,message", [
    (dict(fmt="movielens"), "unknown dataset 'movielens'"),
    (dict(rows=0), "rows must be >= 1"),
    (dict(rows=-5), "rows must be >= 1"),
    (dict(rows=2.5), "rows must be an integer"),
    (dict(seed=-1), "seed must be >= 0"),
    (dict(chunk_rows=0), "chunk_rows must be >= 1"),
    (dict(out=""), "out must be a file path"),
    (dict(out="some/dir/"), "out must be a file path"),
])
def test_bad_arguments(tmp_path, kwargs, message):
  args = dict(fmt="criteo", rows=10, seed=0, out=str(tmp_path / "x"))
  args.update(kwargs)
  with pytest.raises(ValueError, match=re.escape(message)):
    generate.write_synthetic(**args)


def test_directory_as_out_is_rejected(tmp_path):
  with pytest.raises(ValueError, match="out must be a file path"):
    generate.write_synthetic("avazu", 10, 0, str(tmp_path))


def test_tables_must_match_the_feature_specs():
  world = synthetic_world.WORLDS["criteo"]
  ids = dict(world.ids)
  del ids["C26"]
  with pytest.raises(ValueError, match=r"id fields \['C26'\]"):
    synthetic_world.check_world(dataclasses.replace(world, ids=ids))


def test_text_blocks_match_python():
  values = np.array([0, 7, -1, -3, 10, 99, -100, 123456789, -987654321012],
                    dtype=np.int64)
  missing = np.zeros(len(values), dtype=bool)
  missing[4] = True
  block = generate._signed_block(values, missing)
  text = [bytes(row[row != 0]).decode() for row in block]
  expected = [str(v) for v in values]
  expected[4] = ""
  assert text == expected
  big = np.array([2**64 - 1, 0, 10**19], dtype=np.uint64)
  text = [bytes(r[r != 0]).decode() for r in generate._decimal_block(big)]
  assert text == ["18446744073709551615", "0", str(10**19)]
  hashes = np.array([0, 0xDEADBEEF, 0x0102A0FF], dtype=np.uint64)
  block = generate._hex_block(hashes, np.array([False, False, True]))
  text = [bytes(r[r != 0]).decode() for r in block]
  assert text == ["00000000", "deadbeef", ""]


@pytest.mark.parametrize("exponent", [1.0, 1.1])
def test_power_law_ranks_stay_in_support(exponent):
  u = np.array([0.0, 1e-12, 0.5, 1.0 - 1e-16])
  ranks = synthetic_world.power_law_ranks(u, 1000, exponent)
  assert ranks[0] == 0 and ranks.min() >= 0 and ranks.max() <= 999
  assert ranks[-1] >= 900



def test_a_files_bytes_stay_those_the_committed_studies_fingerprinted(
    tmp_path):
  """Regenerating a study's data gives the bytes its committed rows were
  trained on (study_provenance.data_fingerprint): daily data's renewed ids
  leave a single file's bytes as they were (3,000 rows, seed 1: the
  tests' and docs' standard small data)."""
  path = str(tmp_path / "train.txt")
  generate.write_synthetic("criteo", 3_000, 1, path)
  with open(path, "rb") as f:
    assert hashlib.md5(f.read()).hexdigest() == (
        "12f027692254d3c4c4a0269e19c7c74b")


def _day_rows(out, fmt, day):
  spec = features.get_spec(fmt)
  return _read(os.path.join(out, f"day-{day}", generate.DAY_FILE[fmt]),
               spec)[1]


def test_daily_data_renews_the_large_fields_ids_and_keeps_the_rest(tmp_path):
  """generate --days: one folder per day; from day to day new ids take the
  place of a churn share of each large field's ids (the id at a rank is
  the same id on every row of a day), small fields keep theirs, and the
  hidden model scores a renewed id with its own weight."""
  world = synthetic_profile.world_for("criteo")
  large = synthetic_world.renewed_fields(world)
  assert large and set(large) <= set(features.CRITEO.categorical_features)
  small = [n for n in world.ids if n not in large]
  assert small
  rng = np.random.default_rng(0)
  keys = synthetic_world.sample_rows(world, rng, np.arange(50_000),
                                     50_000).keys
  churn = 0.2
  first = synthetic_world.renew_ids(world, keys,
                                    synthetic_world.Drift(1, churn, 0.0))
  for name in world.ids:
    np.testing.assert_array_equal(first[name], keys[name])
  for day in (2, 4):
    renewed = synthetic_world.renew_ids(world, keys,
                                        synthetic_world.Drift(day, churn, 0))
    for name in small:
      np.testing.assert_array_equal(renewed[name], keys[name])
    for name in large:
      rank = renewed[name] & synthetic_world.RANK_MASK
      np.testing.assert_array_equal(rank, keys[name])  # Ranks stay.
      generation = renewed[name] >> synthetic_world.GENERATION_SHIFT
      present = keys[name] > (1 if world.ids[name].head_mass > 0 else 0)
      assert not generation[~present].any()  # Missing, placeholder: kept.
      assert generation.max() <= day - 1
      # Each distinct id's chance of being renewed by then.
      distinct = np.unique(keys[name][present])
      share = np.mean(np.isin(
          distinct, keys[name][present & (generation > 0)]))
      assert share == pytest.approx(1 - (1 - churn)**(day - 1), abs=0.03), (
          name, day)
      # One id per rank on a day: every row with a rank agrees.
      by_rank = collections.defaultdict(set)
      for k, g in zip(keys[name][present][:5000], generation[present][:5000]):
        by_rank[int(k)].add(int(g))
      assert all(len(g) == 1 for g in by_rank.values())
  # A renewed id is another id: its own hex string, weight and latent.
  key = np.array([5], np.uint64)
  again = key + (np.uint64(2) << synthetic_world.GENERATION_SHIFT)
  name = large[0]
  assert generate._hex_ids(name, key) != generate._hex_ids(name, again)  # pylint: disable=protected-access
  assert synthetic_world._hash_normal(7, key) != (  # pylint: disable=protected-access
      synthetic_world._hash_normal(7, again))  # pylint: disable=protected-access


def test_click_shift_is_a_seeded_random_walk():
  shifts = [synthetic_world.click_shift(synthetic_world.Drift(d, 0.0, 0.03))
            for d in range(1, 6)]
  assert shifts[0] == 0.0
  steps = [np.random.default_rng([synthetic_world.WORLD_SEED, t])
           .standard_normal() for t in range(2, 6)]
  np.testing.assert_allclose(shifts[1:], 0.03 * np.cumsum(steps), rtol=1e-12)
  assert synthetic_world.click_shift(synthetic_world.Drift(5, 0.5, 0.0)) == 0


@pytest.mark.parametrize("fmt", ["criteo", "avazu"])
def test_generate_days_writes_one_folder_a_day_and_resumes(tmp_path, fmt,
                                                           capsys):
  out = str(tmp_path / "logs")
  argv = ["generate", "--format", fmt, "--rows", "3000", "--seed", "2",
          "--out", out, "--days", "2", "--churn", "0.3"]
  assert cli.main(argv) == 0
  spec = features.get_spec(fmt)
  days = [_day_rows(out, fmt, day) for day in (1, 2)]
  assert all(len(rows) == 3000 for rows in days)
  # Other rows each day, ids renewed in the large fields.
  assert days[0] != days[1]
  world = synthetic_profile.world_for(fmt)
  for name in synthetic_world.renewed_fields(world):
    seen = set(_column(days[0], spec, name))
    new = np.mean([v not in seen for v in _column(days[1], spec, name)])
    assert new > 0.1, name
  if spec.time_field:  # Each day's hours are its own.
    hours = [{int(h) % 10_000 // 100 for h in _column(rows, spec,
                                                      spec.time_field)}
             for rows in days]
    assert hours[1] == {d + 1 for d in hours[0]} and len(hours[0]) == 1
  capsys.readouterr()
  before = [os.path.getmtime(os.path.join(out, f"day-{d}",
                                          generate.DAY_FILE[fmt]))
            for d in (1, 2)]
  assert cli.main(argv[:-4] + ["--days", "3", "--churn", "0.3"]) == 0
  printed = capsys.readouterr().out
  assert printed.count("kept, already written") == 2
  assert [os.path.getmtime(os.path.join(out, f"day-{d}",
                                        generate.DAY_FILE[fmt]))
          for d in (1, 2)] == before
  assert len(_day_rows(out, fmt, 3)) == 3000
  with pytest.raises(ValueError, match="daily data"):
    generate.write_days(fmt, 10, 1, 0, str(tmp_path / "x"), top_ids=3)
  with pytest.raises(ValueError, match="churn"):
    generate.write_days(fmt, 10, 1, 0, str(tmp_path / "x"), churn=2)
