"""CtrTuner's executor and its trial table, on a real KerasTuner search."""

import csv
import json
import math
import pathlib

import pytest
from tfx.dsl.components.base import base_executor
from tfx.types import standard_artifacts
from tfx.types import standard_component_specs

from components import tuner as tuner_component
import tiny_search


def test_trial_table_of_a_real_search(tmp_path):
  search, space = tiny_search.search(tmp_path, trials=3, fail_trials={2})
  rows = tuner_component.trial_rows(search.oracle)
  assert [r["trial_id"] for r in rows] == ["0", "1", "2"]
  assert [r["status"] for r in rows] == ["COMPLETED", "FAILED", "COMPLETED"]
  failed = rows[1]
  assert failed["val_auc"] is None and failed["epochs_run"] is None
  assert failed["error"] == ("FloatingPointError: loss became nan at epoch 1 "
                             "step 3")
  for row in (rows[0], rows[2]):
    assert list(row)[:2 + len(space)] == ["trial_id", "status", *space]
    assert row["embed_lr"] == 1e-4  # Fixed.
    assert space["dense_lr"].contains(row["dense_lr"])
    assert 0 <= row["val_auc"] <= 1 and math.isfinite(row["val_loss"])
    assert 1 <= row["epochs_run"] <= 3 and row["error"] is None
  best = search.get_best_hyperparameters()[0].values
  assert best["dense_lr"] == max(
      (rows[0], rows[2]), key=lambda r: r["val_auc"])["dense_lr"]

  tuner_component.write_trials(rows, str(tmp_path / "results"))
  assert tuner_component.read_trials(str(tmp_path / "results")) == rows
  with open(tmp_path / "results" / tuner_component.TRIALS_CSV, newline="") as f:
    table = list(csv.DictReader(f))
  assert [r["status"] for r in table] == ["COMPLETED", "FAILED", "COMPLETED"]
  assert float(table[0]["val_auc"]) == rows[0]["val_auc"]
  assert table[1]["val_auc"] == ""


def test_read_trials_of_a_directory_without_table(tmp_path):
  with pytest.raises(FileNotFoundError, match="not the tuner_results of a"):
    tuner_component.read_trials(str(tmp_path))


def _outputs(tmp_path):
  outputs = {}
  for key, artifact_type in (
      (standard_component_specs.BEST_HYPERPARAMETERS_KEY,
       standard_artifacts.HyperParameters),
      (standard_component_specs.TUNER_RESULTS_KEY,
       standard_artifacts.TunerResults)):
    artifact = artifact_type()
    artifact.uri = str(tmp_path / key)
    (tmp_path / key).mkdir(parents=True)
    outputs[key] = [artifact]
  return outputs


def _executor(tmp_path):
  return tuner_component.TrialTableExecutor(base_executor.BaseExecutor.Context(
      tmp_dir=str(tmp_path / "tmp"), unique_id="1"))


def test_executor_writes_the_table_and_the_best_values(tmp_path, monkeypatch):
  search, _ = tiny_search.search(tmp_path, trials=2, fail_trials=set(),
                                 epochs=1)
  monkeypatch.setattr(tuner_component.tuner_executor, "search",
                      lambda *args, **kwargs: search)
  outputs = _outputs(tmp_path)
  _executor(tmp_path).Do({}, outputs, {})
  rows = tuner_component.read_trials(str(tmp_path / "tuner_results"))
  assert [r["status"] for r in rows] == ["COMPLETED", "COMPLETED"]
  best = json.loads((tmp_path / "best_hyperparameters" /
                     "best_hyperparameters.txt").read_text())
  assert best["values"] == search.get_best_hyperparameters()[0].values


def test_executor_fails_with_the_trial_errors_when_none_completed(
    tmp_path, monkeypatch):
  search, _ = tiny_search.search(tmp_path, trials=2, fail_trials={1, 2},
                                 epochs=1)
  monkeypatch.setattr(tuner_component.tuner_executor, "search",
                      lambda *args, **kwargs: search)
  outputs = _outputs(tmp_path)
  with pytest.raises(RuntimeError, match="no tuning trial completed "
                     r"\(trial 0: FloatingPointError: loss became nan"):
    _executor(tmp_path).Do({}, outputs, {})
  # The table is written all the same, for the post-mortem.
  assert len(tuner_component.read_trials(str(tmp_path / "tuner_results"))) == 2


def test_an_interrupted_search_resumes_with_its_finished_trials(
    tmp_path, monkeypatch):
  """A search stopped after its first trial (Ctrl-C, a preempted pod) and
  run again as the next execution of the same Tuner reloads that trial
  from the same directory and trains only the missing one; once ended,
  the directory goes (issue #45)."""
  directories, searches = [], []

  def search(input_dict, exec_properties, working_dir, trials):
    directories.append(working_dir)
    searches.append(tiny_search.search(pathlib.Path(working_dir), trials,
                                       fail_trials=set(), epochs=1)[0])
    return searches[-1]

  def interrupted(*args):
    search(*args, trials=1)
    raise KeyboardInterrupt

  monkeypatch.setattr(tuner_component.tuner_executor, "search", interrupted)
  with pytest.raises(KeyboardInterrupt):
    _executor(tmp_path).Do({}, _outputs(tmp_path / "first"), {})
  monkeypatch.setattr(tuner_component.tuner_executor, "search",
                      lambda *args: search(*args, trials=2))
  outputs = _outputs(tmp_path / "again")
  _executor(tmp_path).Do({}, outputs, {})
  assert directories[0] == directories[1]
  assert searches[1].hypermodel.fits == 1  # Trial 0 was reloaded.
  rows = tuner_component.read_trials(str(tmp_path / "again" /
                                         "tuner_results"))
  assert [r["status"] for r in rows] == ["COMPLETED", "COMPLETED"]
  assert not pathlib.Path(directories[0]).exists()
