"""Pusher: pushes a blessed model once, re-pushes point at that version."""

import json
import os

from tfx.types import standard_artifacts
from tfx.types import standard_component_specs

from components import pusher


def _push(tmp_path, model_dir, blessed=True, name="push"):
  model = standard_artifacts.Model()
  model.uri = str(model_dir)
  blessing = standard_artifacts.ModelBlessing()
  blessing.uri = str(tmp_path / f"blessing-{name}")
  blessing.set_int_custom_property("blessed", int(blessed))
  pushed = standard_artifacts.PushedModel()
  pushed.uri = str(tmp_path / name)
  destination = {"filesystem": {"base_directory": str(tmp_path / "serving")}}
  pusher.Executor().Do(
      {standard_component_specs.MODEL_KEY: [model],
       standard_component_specs.MODEL_BLESSING_KEY: [blessing]},
      {standard_component_specs.PUSHED_MODEL_KEY: [pushed]},
      {standard_component_specs.PUSH_DESTINATION_KEY: json.dumps(destination)})
  return pushed


def _model(tmp_path, name):
  serving = tmp_path / name / "Format-Serving"
  serving.mkdir(parents=True)
  (serving / "saved_model.pb").write_text(name)
  return tmp_path / name


def test_same_model_is_pushed_once_and_a_new_model_gets_a_new_version(
    tmp_path, monkeypatch):
  first = _push(tmp_path, _model(tmp_path, "m1"), name="p1")
  assert first.get_int_custom_property("pushed") == 1
  destination = first.get_string_custom_property("pushed_destination")
  assert open(os.path.join(destination, "saved_model.pb")).read() == "m1"

  again = _push(tmp_path, tmp_path / "m1", name="p2")
  assert again.get_string_custom_property("pushed_destination") == destination
  assert len(os.listdir(tmp_path / "serving")) == 1

  # A different model: a new version (the clock moved on), the old one kept.
  monkeypatch.setattr(pusher.pusher_executor.time, "time",
                      lambda: 4102444800)
  other = _push(tmp_path, _model(tmp_path, "m2"), name="p3")
  assert other.get_string_custom_property("pushed_destination") != destination
  assert sorted(os.listdir(tmp_path / "serving")) == sorted(
      [os.path.basename(destination), "4102444800"])
  assert open(os.path.join(destination, "saved_model.pb")).read() == "m1"


def test_unblessed_model_is_not_pushed(tmp_path):
  result = _push(tmp_path, _model(tmp_path, "m1"), blessed=False)
  assert result.get_int_custom_property("pushed") == 0
  assert not (tmp_path / "serving").exists()
