"""The training plan: the batch size chosen once, and what follows from it."""

import dataclasses

import pytest

from trainer_module import plan as plan_lib
from trainer_module import scaling
from trainer_module.settings import TrainerSettings


@pytest.mark.parametrize("rows, batch", [
    (162, 128),  # Fewer rows than the base batch: the power of two they hold.
    (90_000, 1024),  # make run's 100k generated rows.
    (522_240, 1024), (522_241, 2048),  # 256 steps of 2048, the last partial.
    (1_780_000, 4096),  # 2M generated rows.
    (8_800_000, 32768),  # The paper-regime study: 269 steps at 32768.
    (16_711_680, 32768), (16_711_681, 65536), (10**9, 65536)])
def test_auto_batch_size_is_the_largest_power_of_two_with_enough_steps(
    rows, batch):
  chosen, reason = scaling.auto_batch_size(rows, 1024)
  assert chosen == batch and reason.startswith("auto: ")
  if 1024 <= chosen < scaling.MAX_AUTO_BATCH_SIZE:
    assert scaling.steps_per_epoch(rows, 2 * chosen) < 256


def test_auto_batch_size_says_why():
  assert scaling.auto_batch_size(8_800_000, 1024)[1] == (
      "auto: 269 steps an epoch on 8,800,000 training rows; 65536 would give "
      "135, under 256")
  assert "65536 is the largest auto batch size" in scaling.auto_batch_size(
      10**9, 1024)[1]
  assert "fewer than the base batch size 1024" in scaling.auto_batch_size(
      162, 1024)[1]


def test_auto_batch_size_splits_over_the_replicas():
  assert scaling.auto_batch_size(1_780_000, 1024, replicas=3)[0] == 4095
  assert scaling.auto_batch_size(1_780_000, 1024, replicas=4)[0] == 4096


def test_an_explicit_batch_size_wins_and_is_checked():
  settings = TrainerSettings(dataset="criteo", batch_size=256)
  assert plan_lib.batch_size(settings, 8_800_000) == (256, "--batch-size")
  with pytest.raises(ValueError, match=r"batch size 256 \(--batch-size\) is "
                     "larger than the 100 training examples"):
    plan_lib.batch_size(settings, 100)
  with pytest.raises(ValueError, match="does not split evenly over 3"):
    plan_lib.batch_size(settings, 1000, replicas=3)
  with pytest.raises(ValueError, match="training split is empty"):
    plan_lib.batch_size(settings, 0)


def test_batch_size_setting_is_auto_or_a_positive_integer():
  assert TrainerSettings(dataset="criteo").batch_size == "auto"
  for bad in (0, -1, "big", 2.5, True):
    with pytest.raises(ValueError, match="'auto' or a positive integer"):
      TrainerSettings(dataset="criteo", batch_size=bad)


def test_resolve_maps_the_base_hyperparameters_to_the_chosen_batch():
  settings = TrainerSettings(dataset="criteo", auto_hparams=False)
  plan = plan_lib.resolve(settings, {"embedding_dim": 8}, 8_800_000)
  assert (plan.batch_size, plan.steps_per_epoch) == (32768, 269)
  assert plan.scaled == scaling.scale_hparams(
      "cowclip", settings.base_hparams, 1024, 32768)
  assert plan.model_options.embedding_dim == 8
  assert plan.model_options.precision in ("float32", "mixed_bfloat16")
  record = plan.record()
  assert record["batch_size"] == 32768 and record["steps_per_epoch"] == 269
  assert record["batch_size_reason"] == plan.batch_size_reason
  baseline = plan.for_baseline(1e-3)
  assert baseline.settings.model == "lr" and not baseline.step.cowclip
  assert baseline.scaled["l2"] == 1e-3
  assert baseline.batch_size == plan.batch_size
  with pytest.raises(dataclasses.FrozenInstanceError):
    plan.batch_size = 1024  # type: ignore[misc]
