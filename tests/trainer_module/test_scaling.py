"""Batch-size scaling rules against hand-computed values."""

import math

import pytest

from trainer_module import features
from trainer_module import scaling

BASE = {"dense_lr": 8e-4, "embed_lr": 1e-4, "l2": 1e-5, "r": 1.0,
        "zeta": 1e-5, "warmup_epochs": 1.0}
UNCHANGED = ("r", "zeta", "warmup_epochs")


def test_rule_names():
  assert scaling.RULES == ("none", "linear", "sqrt", "n2-lambda", "cowclip")
  assert scaling.DEFAULT_RULE == "cowclip"
  assert set(scaling.HPARAM_KEYS) == set(BASE)


def test_criteo_base_at_128k_with_cowclip():
  got = scaling.scale_hparams("cowclip", BASE, 1024, 131072)
  assert got["dense_lr"] == pytest.approx(8e-4 * math.sqrt(128), rel=1e-12)
  assert got["embed_lr"] == 1e-4
  assert got["l2"] == pytest.approx(1.28e-3, rel=1e-12)
  assert {k: got[k] for k in UNCHANGED} == {k: BASE[k] for k in UNCHANGED}


def test_dataset_specs_are_valid_bases():
  for spec in features.DATASETS.values():
    got = scaling.scale_hparams(scaling.DEFAULT_RULE, spec.base_hparams,
                                spec.base_batch_size, spec.base_batch_size * 4)
    assert got["dense_lr"] == pytest.approx(2 * spec.base_hparams["dense_lr"])


# s = 8192 / 1024 = 8, sqrt(8) = 2.8284271247461903.
@pytest.mark.parametrize("rule, dense_lr, embed_lr, l2", [
    ("none", 8e-4, 1e-4, 1e-5),
    ("linear", 6.4e-3, 8e-4, 1e-5),
    ("sqrt", 8e-4 * 2.8284271247461903, 1e-4 * 2.8284271247461903,
     1e-5 * 2.8284271247461903),
    ("n2-lambda", 8e-4 * 2.8284271247461903, 1e-4, 6.4e-4),
    ("cowclip", 8e-4 * 2.8284271247461903, 1e-4, 8e-5),
])
def test_every_rule_at_8x(rule, dense_lr, embed_lr, l2):
  got = scaling.scale_hparams(rule, BASE, 1024, 8192)
  assert got == pytest.approx({"dense_lr": dense_lr, "embed_lr": embed_lr,
                               "l2": l2, "r": 1.0, "zeta": 1e-5,
                               "warmup_epochs": 1.0}, rel=1e-12)


def test_smaller_batch_scales_down():
  got = scaling.scale_hparams("linear", BASE, 1024, 256)
  assert got["dense_lr"] == pytest.approx(2e-4, rel=1e-12)
  assert got["embed_lr"] == pytest.approx(2.5e-5, rel=1e-12)


@pytest.mark.parametrize("rule", scaling.RULES)
def test_same_batch_size_is_identity(rule):
  assert scaling.scale_hparams(rule, BASE, 1024, 1024) == BASE


@pytest.mark.parametrize("rule", scaling.RULES)
def test_base_is_not_mutated_and_result_is_new(rule):
  base = dict(BASE)
  got = scaling.scale_hparams(rule, base, 1024, 4096)
  assert base == BASE
  assert got is not base


@pytest.mark.parametrize("args, message", [
    (("Cowclip", BASE, 1024, 2048),
     "unknown scaling rule 'Cowclip'.*n2-lambda"),
    (("cowclip", {k: v for k, v in BASE.items() if k != "l2"}, 1024, 2048),
     r"missing \['l2'\]"),
    (("cowclip", {**BASE, "l2_reg": 1e-5}, 1024, 2048),
     r"unknown \['l2_reg'\]"),
    (("cowclip", BASE, 0, 2048), "base_batch_size must be a positive"),
    (("cowclip", BASE, 1024, -8), "batch_size must be a positive"),
    (("cowclip", BASE, 1024, 2048.0), "batch_size must be a positive integer"),
])
def test_bad_input_is_rejected(args, message):
  with pytest.raises(ValueError, match=message):
    scaling.scale_hparams(*args)


def test_auto_base_follows_the_number_of_updates():
  published = features.CRITEO.base_hparams
  reference = features.CRITEO.reference_examples
  # The full dataset (or more) keeps the published values.
  assert scaling.auto_base_hparams(published, reference, reference) == (
      dict(published))
  assert scaling.auto_base_hparams(published, reference, 10 * reference) == (
      dict(published))
  # 100x fewer rows.
  auto = scaling.auto_base_hparams(published, reference, reference // 100)
  ratio = reference / (reference // 100)
  assert auto["embed_lr"] == pytest.approx(
      published["embed_lr"] * ratio ** scaling.AUTO_EMBED_EXPONENT)
  assert auto["l2"] == pytest.approx(
      published["l2"] * ratio ** scaling.AUTO_L2_EXPONENT)
  assert auto["dense_lr"] == scaling.AUTO_MAX_DENSE_LR
  for name in ("r", "zeta", "warmup_epochs"):
    assert auto[name] == published[name]
  # Tiny data: capped.
  tiny = scaling.auto_base_hparams(published, reference, 1000)
  assert tiny["embed_lr"] == pytest.approx(
      published["embed_lr"] * scaling.AUTO_MAX_FACTOR)
  assert tiny["l2"] == pytest.approx(
      published["l2"] * scaling.AUTO_MAX_L2_FACTOR)
  # Only the asked keys.
  only = scaling.auto_base_hparams(published, reference, 1000, ["l2"])
  assert only["embed_lr"] == published["embed_lr"]
  with pytest.raises(ValueError, match="cannot derive"):
    scaling.auto_base_hparams(published, reference, 1000, ["r"])
