"""CtrTuner: TFX's Tuner component whose results also hold the trial table.

The component runs the module's tuner_fn (trainer_module.tuner.tuner_fn);
its executor also writes the table of every trial (TRIALS_JSON and
TRIALS_CSV) into its ``tuner_results`` artifact: TFX's own
tuner_results.json has completed trials only, without the validation loss or
the epochs run. ``read_trials`` reads it back. Its examples may be a
rolling window of days (components/span_window.py).
"""

import csv
import json
import os
from typing import Any, Dict, List, Optional

import keras_tuner
import tensorflow as tf
from tfx import v1 as tfx
from tfx.components.tuner import executor as tuner_executor
from tfx.dsl.components.base import executor_spec
from tfx.types import artifact_utils
from tfx.types import standard_component_specs

from components import span_window
from trainer_module import contract

# Files of the trial table inside the tuner_results artifact.
TRIALS_JSON = "trials.json"
TRIALS_CSV = "trials.csv"
# The batch the trials trained at and why (CtrHyperModel.batch_record),
# inside the tuner_results artifact.
BATCH_JSON = "batch.json"
# Metrics of a trial in the table (at its best epoch), after its hparams.
TABLE_METRICS = (contract.OBJECTIVE, "val_loss", "epochs_run")


def trial_rows(oracle: keras_tuner.Oracle) -> List[Dict[str, Any]]:
  """One row per trial, in trial order: id, status, values, metrics, error.

  The values are the searched ones (and Hyperband's tuner/* bookkeeping);
  metrics are None for trials that did not complete, whose "error" is the
  last line of their traceback.
  """
  names = [hp.name for hp in oracle.get_space().space]
  trials = sorted(oracle.trials.values(), key=lambda t: int(t.trial_id))
  names += sorted({name for t in trials for name in t.hyperparameters.values
                   if name not in names})
  rows = []
  for trial in trials:
    row = {"trial_id": trial.trial_id, "status": trial.status}
    row.update({name: trial.hyperparameters.values.get(name)
                for name in names})
    for metric in TABLE_METRICS:
      row[metric] = (trial.metrics.get_last_value(metric)
                     if trial.metrics.exists(metric) else None)
    if row["epochs_run"] is not None:
      row["epochs_run"] = int(row["epochs_run"])
    message = (trial.message or "").strip()
    row["error"] = message.splitlines()[-1] if message else None
    rows.append(row)
  return rows


def write_trials(rows: List[Dict[str, Any]], directory: str) -> None:
  """Writes the trial table as TRIALS_JSON and TRIALS_CSV in `directory`."""
  tf.io.gfile.makedirs(directory)
  with tf.io.gfile.GFile(os.path.join(directory, TRIALS_JSON), "w") as f:
    json.dump(rows, f, indent=2)
  columns = list(rows[0]) if rows else ["trial_id", "status"]
  with tf.io.gfile.GFile(os.path.join(directory, TRIALS_CSV), "w") as f:
    writer = csv.DictWriter(f, columns)
    writer.writeheader()
    writer.writerows(rows)


def read_trials(tuner_results_dir: str) -> List[Dict[str, Any]]:
  """The trial table of a CtrTuner's tuner_results artifact (or a copy)."""
  path = os.path.join(tuner_results_dir, TRIALS_JSON)
  if not tf.io.gfile.exists(path):
    raise FileNotFoundError(
        f"{path} does not exist: {tuner_results_dir} is not the "
        "tuner_results of a components.tuner.CtrTuner")
  with tf.io.gfile.GFile(path) as f:
    return json.load(f)


def read_batch(tuner_results_dir: str) -> Optional[Dict[str, Any]]:
  """The batch a CtrTuner's trials trained at and why (BATCH_JSON); None
  for tuner_results without it (a module file's own hypermodel, or a
  Tuner run from before the file was written)."""
  path = os.path.join(tuner_results_dir, BATCH_JSON)
  if not tf.io.gfile.exists(path):
    return None
  with tf.io.gfile.GFile(path) as f:
    return json.load(f)


# The searches' KerasTuner directories, beside the Tuner's outputs under
# the pipeline root: <root>/Tuner/search/<key>/.
SEARCH_DIR = "search"


def search_directory(input_dict, output_dict, exec_properties) -> str:
  """A working directory that every execution of the Tuner on the same
  inputs and settings finds, and no other: an interrupted search, run
  again, reloads its finished trials from it (KerasTuner without
  overwrite) instead of starting over (issue #45)."""
  return contract.resume_directory(
      artifact_utils.get_single_uri(
          output_dict[standard_component_specs.BEST_HYPERPARAMETERS_KEY]),
      SEARCH_DIR,
      [{k: [a.uri for a in v] for k, v in input_dict.items()},
       exec_properties])


class TrialTableExecutor(tuner_executor.Executor):
  """TFX's Tuner executor that also writes the trial table, and whose
  search resumes after an interruption (search_directory; the directory
  goes once the search has ended, well or not).

  Fails with the trials' errors when none completed (TFX's own would stop
  on an IndexError).
  """

  def Do(self, input_dict, output_dict, exec_properties) -> None:
    if tuner_executor.get_tune_args(exec_properties):
      raise ValueError("TuneArgs (parallel trials) are not supported: run "
                       "trials in parallel with KerasTuner's distributed "
                       "mode instead")
    input_dict = span_window.expand_input(input_dict)
    working_dir = search_directory(input_dict, output_dict, exec_properties)
    tuner = tuner_executor.search(input_dict, exec_properties, working_dir)
    rows = trial_rows(tuner.oracle)
    results = artifact_utils.get_single_uri(
        output_dict[standard_component_specs.TUNER_RESULTS_KEY])
    write_trials(rows, results)
    # A module file's own hypermodel may not say its batch.
    if hasattr(tuner.hypermodel, "batch_record"):
      with tf.io.gfile.GFile(os.path.join(results, BATCH_JSON), "w") as f:
        json.dump(tuner.hypermodel.batch_record(), f, indent=2)
    # Ended: a re-run must search again, not reload these trials (failed
    # ones included).
    if tf.io.gfile.exists(working_dir):
      tf.io.gfile.rmtree(working_dir)
    if not any(row["status"] == "COMPLETED" for row in rows):
      errors = "; ".join(f"trial {row['trial_id']}: {row['error']}"
                         for row in rows)
      raise RuntimeError(f"no tuning trial completed ({errors or 'none ran'})")
    tuner_executor.write_best_hyperparameters(tuner, output_dict)


class CtrTuner(tfx.components.Tuner):
  """tfx.components.Tuner whose tuner_results also hold the trial table."""
  EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(TrialTableExecutor)
