"""The one definition of the base hyperparameters and who reads it."""

import pytest

from trainer_module import features
from trainer_module import hparams
from trainer_module import scaling


def test_names_are_the_scaling_keys_in_order():
  assert scaling.HPARAM_KEYS == hparams.NAMES == (
      "dense_lr", "embed_lr", "l2", "r", "zeta", "warmup_epochs")
  assert [h.flag for h in hparams.BASE_HPARAMS] == [
      "dense-lr", "embed-lr", "l2", "r", "zeta", "warmup-epochs"]


def test_dataset_defaults_are_the_paper_values_with_their_differences():
  assert features.CRITEO.base_hparams == {
      h.name: h.default for h in hparams.BASE_HPARAMS}
  assert features.AVAZU.base_hparams == {
      **features.CRITEO.base_hparams, "dense_lr": 1e-4, "zeta": 1e-4}


@pytest.mark.parametrize("values, message", [
    ({"dense_lr": 1e-3}, "missing ['embed_lr'"),
    ({**features.CRITEO.base_hparams, "lr": 1.0}, "unknown ['lr']"),
    ({**features.CRITEO.base_hparams, "l2": -1.0}, "l2 must be a finite"),
    ({**features.CRITEO.base_hparams, "r": float("nan")}, "r must be"),
    ({**features.CRITEO.base_hparams, "zeta": True}, "zeta must be"),
])
def test_check_values_names_the_bad_key(values, message):
  with pytest.raises(ValueError) as error:
    hparams.check_values(values)
  assert message in str(error.value)


def test_check_overrides_accepts_a_subset_only():
  assert hparams.check_overrides({"r": 2}) == {"r": 2.0}
  with pytest.raises(ValueError, match=r"unknown hyperparameters \['lr'\]"):
    hparams.check_overrides({"lr": 1.0})
