"""TrainerSettings and TuningSettings: validated, and round-tripped through
the components' custom_config (JSON), as IngestOptions is for ExampleGen."""

import json

import pytest

from trainer_module import features
from trainer_module import settings


def test_defaults_come_from_the_dataset_spec():
  trainer = settings.TrainerSettings(dataset="avazu")
  assert trainer.base_hparams == features.AVAZU.base_hparams
  assert trainer.base_batch_size == features.AVAZU.base_batch_size
  assert trainer.reference_examples == features.AVAZU.reference_examples
  assert trainer.model_options == settings.ModelOptions()


def test_round_trip_through_json_custom_config():
  trainer = settings.TrainerSettings(
      dataset="criteo", model="dcnv2", batch_size=4096, epochs=3,
      scaling_rule="sqrt", hparams={"r": 2.0}, auto_hparams=False,
      step={"cowclip": False, "embedding_update": "sparse",
            "cowclip_variant": "reference"},
      model_options={"hidden_units": [64, 32], "dcnv2_low_rank": 8},
      frequency_field="C6", frequency_thresholds=[10, 1000], seed=7)
  config = json.loads(json.dumps(trainer.to_custom_config()))
  # Only the model options that differ from the defaults are written.
  assert config["model_options"] == {"hidden_units": [64, 32],
                                     "dcnv2_low_rank": 8}
  assert config["hparams"] == {"r": 2.0}
  assert trainer.base_hparams == {**features.CRITEO.base_hparams, "r": 2.0}
  assert settings.TrainerSettings.from_custom_config(config) == trainer
  tuning = settings.TuningSettings(tune=True, tuner="bayesian", trials=3,
                                   search_space={"r": 1.0})
  tuner_config = json.loads(json.dumps(tuning.to_custom_config(trainer)))
  assert settings.TuningSettings.from_custom_config(tuner_config) == tuning
  assert settings.TrainerSettings.from_custom_config(tuner_config) == trainer


@pytest.mark.parametrize("fields, message", [
    ({"dataset": "kdd"}, "unknown dataset 'kdd'"),
    ({"model": "xgboost"}, "unknown model 'xgboost'"),
    ({"scaling_rule": "cube"}, "unknown scaling_rule 'cube'"),
    ({"step": {"embedding_update": "lazy"}}, "unknown embedding_update 'lazy'"),
    ({"step": {"cowclip_variant": "new"}}, "unknown cowclip_variant 'new'"),
    ({"batch_size": 0}, "batch_size must be 'auto' or a positive integer"),
    ({"epochs": 1.5}, "epochs must be a positive integer"),
    ({"hparams": {"dense_lr": -1e-3}}, "dense_lr must be a finite number"),
    ({"hparams": {"lr": 1e-3}}, "unknown hyperparameters ['lr']"),
    ({"frequency_field": "I1"}, "frequency field 'I1' is not 'all'"),
    ({"frequency_thresholds": (100, 10)}, "0 < rare < frequent"),
    ({"model_options": {"embedding_dim": 0}}, "embedding_dim must be"),
    ({"seed": -1}, "seed must be a non-negative integer or None"),
    ({"seed": 1.5}, "seed must be a non-negative integer or None"),
])
def test_bad_settings_name_the_field(fields, message):
  with pytest.raises(ValueError) as error:
    settings.TrainerSettings(**{"dataset": "criteo", **fields})
  assert message in str(error.value)


def test_unknown_custom_config_keys_are_refused():
  config = settings.TrainerSettings(dataset="criteo").to_custom_config()
  with pytest.raises(ValueError, match=r"unknown keys \['batchsize'\]"):
    settings.TrainerSettings.from_custom_config({**config, "batchsize": 8})


@pytest.mark.parametrize("fields, message", [
    ({"tuner": "grid"}, "unknown tuner 'grid'"),
    ({"trials": 0}, "trials must be a positive integer"),
    ({"search_space": {"r": 1.0}}, "only used with tune"),
    ({"tune": True, "hparams_from": "d"}, "cannot be combined with tune"),
])
def test_bad_tuning_settings(fields, message):
  with pytest.raises(ValueError, match=message):
    settings.TuningSettings(**fields)


def test_auto_hparams_are_those_not_overridden():
  trainer = settings.TrainerSettings(dataset="criteo",
                                     hparams={"embed_lr": 1e-3})
  assert trainer.auto_hparam_keys == ("dense_lr", "l2")
  off = settings.TrainerSettings(dataset="criteo", auto_hparams=False)
  assert off.auto_hparam_keys == ()
