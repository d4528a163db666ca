"""The tuning search space and trial results (no pipeline)."""

import json

import keras_tuner
import pytest

from trainer_module import features
from trainer_module import plan as plan_lib
from trainer_module import scaling
from trainer_module import trainer
from trainer_module import tuner
from trainer_module.settings import TrainerSettings
import tiny_search


@pytest.mark.parametrize("dataset", sorted(features.DATASETS))
def test_default_space_is_around_the_published_base_values(dataset):
  published = features.get_spec(dataset).base_hparams
  space = tuner.search_space(dataset)
  assert tuple(space) == scaling.HPARAM_KEYS
  for name, dimension in space.items():
    assert not dimension.fixed and dimension.default == published[name]
    assert dimension.low <= published[name] <= dimension.high
    assert dimension.log == (name in ("dense_lr", "embed_lr", "l2", "zeta"))
  assert (space["dense_lr"].low, space["dense_lr"].high) == pytest.approx(
      (published["dense_lr"] / 10, published["dense_lr"] * 10))
  assert (space["warmup_epochs"].low, space["r"].high) == (0.0, 2.0)


def test_space_centers_on_the_untuned_values_and_overrides_still_win():
  # The tuner centers on the run's auto base: on 20k rows embed_lr is 1e-2,
  # a decade above the published range [1e-5, 1e-3].
  published = features.CRITEO.base_hparams
  centers = scaling.auto_base_hparams(
      published, features.CRITEO.reference_examples, 20_000)
  space = tuner.search_space("criteo", {"l2": [1e-4, 1e-2]}, centers=centers)
  for name in ("dense_lr", "embed_lr"):
    assert space[name].default == centers[name] != published[name]
    assert (space[name].low, space[name].high) == pytest.approx(
        (centers[name] / 10, centers[name] * 10))
  assert space["embed_lr"].low >= published["embed_lr"] * 10
  assert (space["l2"].low, space["l2"].high) == (1e-4, 1e-2)
  assert space["l2"].default == centers["l2"]
  assert space["r"].default == published["r"]
  # A zero center spans no range: the published value's range instead.
  zero = tuner.search_space("criteo", centers={"warmup_epochs": 0.0})
  assert zero["warmup_epochs"] == tuner.search_space("criteo")["warmup_epochs"]
  with pytest.raises(ValueError, match=r"unknown hyperparameters \['lr'\]"):
    tuner.search_space("criteo", centers={"lr": 1.0})


def test_declared_hyperparameters_keep_bounds_and_scale():
  space = tuner.search_space("criteo", {"dense_lr": [1e-4, 1e-2], "r": 1.5,
                                        "embedding_dim": [8, 16]},
                             tune_model_size=True)
  hp = keras_tuner.HyperParameters()
  for dimension in space.values():
    dimension.declare(hp)
  declared = {p.name: p.get_config() for p in hp.space}
  assert declared["dense_lr"]["min_value"] == 1e-4
  assert declared["dense_lr"]["max_value"] == 1e-2
  assert declared["dense_lr"]["sampling"] == "log"
  # The published 8e-4 lies inside the new bounds: still the default.
  assert declared["dense_lr"]["default"] == 8e-4
  assert declared["warmup_epochs"]["sampling"] == "linear"
  kinds = {p.name: type(p).__name__ for p in hp.space}
  assert (kinds["dense_lr"], kinds["r"], kinds["dnn_units"]) == (
      "Float", "Fixed", "Choice")
  assert hp.get("r") == 1.5
  assert declared["embedding_dim"]["values"] == [8, 16]
  assert declared["dnn_layers"]["values"] == [2, 3, 4]
  assert declared["dnn_units"]["values"] == [200, 400, 800]


def test_bounds_outside_the_published_value_default_to_their_middle():
  space = tuner.search_space("criteo", {"l2": [1e-3, 1e-1], "r": [3, 5]})
  assert space["l2"].default == pytest.approx(1e-2)  # Geometric (log).
  assert space["r"].default == 4.0


def test_size_defaults_center_on_the_configured_model():
  space = tuner.search_space("avazu", tune_model_size=True,
                             model_options={"embedding_dim": 16,
                                            "hidden_units": [64, 64]})
  assert space["embedding_dim"].choices == (8, 16, 32)
  assert space["embedding_dim"].default == 16
  assert space["dnn_units"].choices == (32, 64, 128)
  assert space["dnn_layers"].choices == (1, 2, 3)


def test_contains():
  space = tuner.search_space("criteo", {"r": 1.0, "embedding_dim": [8, 16]},
                             tune_model_size=True)
  assert space["dense_lr"].contains(8e-4)
  assert not space["dense_lr"].contains(1.0)
  assert space["r"].contains(1.0) and not space["r"].contains(1.1)
  assert space["embedding_dim"].contains(16)
  assert not space["embedding_dim"].contains(10)


@pytest.mark.parametrize("overrides, message", [
    ({"learning_rate": [1e-4, 1e-2]}, "unknown hyperparameter 'learning_rate'"),
    ({"dense_lr": [1e-2, 1e-4]}, "'dense_lr' must be [low, high]"),
    ({"dense_lr": [0, 1e-2]}, "0 < low < high (log scale)"),
    ({"dense_lr": [1e-4, 1e-3, 1e-2]}, "'dense_lr' must be"),
    ({"r": [-1, 2]}, "0 <= low < high"),
    ({"r": "1.0"}, "'r' must be"),
    ({"r": True}, "'r' must be"),
    ({"zeta": [1e-5, float("inf")]}, "'zeta' must be"),
    ({"embedding_dim": [8, 16]}, "--tune-model-size"),
])
def test_bad_bounds_name_the_source_and_the_key(overrides, message):
  with pytest.raises(ValueError) as error:
    tuner.search_space("criteo", overrides, source="space.json")
  assert "space.json" in str(error.value)
  assert message in str(error.value)


@pytest.mark.parametrize("value", [[8, 8], [8, 0], [8.0, 16.0], [], "16"])
def test_bad_size_choices(value):
  with pytest.raises(ValueError, match="'embedding_dim' must be a list"):
    tuner.search_space("criteo", {"embedding_dim": value},
                       tune_model_size=True)


def test_unfixed_zero_is_allowed_on_a_linear_scale_and_as_a_fixed_value():
  space = tuner.search_space("criteo", {"warmup_epochs": 0, "l2": 0})
  assert space["warmup_epochs"].fixed and space["warmup_epochs"].default == 0
  assert space["l2"].fixed and space["l2"].default == 0


def test_load_search_space_file(tmp_path):
  path = tmp_path / "space.json"
  path.write_text(json.dumps({"dense_lr": [1e-4, 1e-2], "r": 1.0}))
  assert tuner.load_search_space(str(path), "criteo", False) == {
      "dense_lr": [1e-4, 1e-2], "r": 1.0}


def test_load_search_space_errors_name_the_file(tmp_path):
  missing = tmp_path / "missing.json"
  with pytest.raises(ValueError, match="missing.json does not exist"):
    tuner.load_search_space(str(missing), "criteo", False)
  broken = tmp_path / "broken.json"
  broken.write_text('{\n  "dense_lr": [1e-4, 1e-2],\n  "r": \n}')
  with pytest.raises(ValueError, match=r"broken.json, line 4 column 1: not "
                     "valid JSON"):
    tuner.load_search_space(str(broken), "criteo", False)
  listed = tmp_path / "list.json"
  listed.write_text("[1, 2]")
  with pytest.raises(ValueError, match="list.json: expected a JSON object"):
    tuner.load_search_space(str(listed), "criteo", False)
  bad = tmp_path / "bad.json"
  bad.write_text('{"l2": [1e-4, 1e-6]}')
  with pytest.raises(ValueError, match="bad.json: 'l2' must be"):
    tuner.load_search_space(str(bad), "criteo", False)


def test_best_epoch_metrics_are_those_of_the_best_val_auc_epoch():
  history = {"val_auc": [0.70, 0.74, 0.72], "val_loss": [0.50, 0.47, 0.49],
             "loss": [0.6, 0.5, 0.4]}
  assert tuner.best_epoch_metrics(history) == {
      "val_auc": 0.74, "val_loss": 0.47, "loss": 0.5, "epochs_run": 3.0}
  with_nan = {"val_auc": [float("nan"), 0.6], "val_loss": [1.0, 0.9]}
  assert tuner.best_epoch_metrics(with_nan)["val_loss"] == 0.9
  with pytest.raises(ValueError, match="no 'val_auc'"):
    tuner.best_epoch_metrics({"loss": [0.5]})


def test_model_options_take_the_tuned_sizes():
  options = plan_lib.model_options(
      TrainerSettings(dataset="criteo", model_options={"cross_layers": 2}),
      {"embedding_dim": 16, "dnn_units": 64, "dnn_layers": 2,
       "dense_lr": 1e-3, "tuner/epochs": 3})
  assert options.embedding_dim == 16 and options.hidden_units == (64, 64)
  assert options.cross_layers == 2
  assert plan_lib.model_options(TrainerSettings(dataset="criteo"),
                               {"dense_lr": 1e-3}) == (
      trainer.models.ModelOptions())


def test_every_named_tuner_has_a_class():
  assert tuple(tuner.TUNER_CLASSES) == tuner.TUNERS


@pytest.mark.parametrize("name", sorted(tuner.TUNERS))
def test_every_tuner_builds_with_the_budget(tmp_path, name):
  space = tuner.search_space("criteo")
  search = tuner.make_tuner(name, tiny_search.TinyHyperModel(space, set()), 4,
                            2, str(tmp_path))
  assert search.oracle.max_trials == 4
  assert search.oracle.objective.name == "val_auc"
  assert search.oracle.objective.direction == "max"
  with pytest.raises(ValueError, match="unknown tuner 'grid'"):
    tuner.make_tuner("grid", tiny_search.TinyHyperModel(space, set()), 4, 2,
                     str(tmp_path))


def test_a_trial_resolves_its_plan_once(monkeypatch):
  """build and fit of one trial read one plan; the next trial's values get
  their own (the plan is resolved once: trainer_module/plan.py), in the
  pipeline's kept precision."""
  calls = []
  monkeypatch.setattr(plan_lib, "resolve",
                      lambda settings, values, rows, kept_in: calls.append(
                          dict(values, kept_in=kept_in)) or object())

  class Rows:
    train_examples = 1000

  hypermodel = tuner.CtrHyperModel(
      TrainerSettings.from_custom_config({"dataset": "criteo"}),
      tuner.search_space("criteo"), None, Rows(), "ROOT/precision")
  hp = keras_tuner.HyperParameters()
  hypermodel.declare_hyperparameters(hp)
  first = hypermodel._plan(hp)  # pylint: disable=protected-access
  assert hypermodel._plan(hp) is first  # pylint: disable=protected-access
  hp.values["dense_lr"] *= 2
  assert hypermodel._plan(hp) is not first  # pylint: disable=protected-access
  assert len(calls) == 2 and calls[1]["dense_lr"] == 2 * calls[0]["dense_lr"]
  assert {call["kept_in"] for call in calls} == {"ROOT/precision"}
