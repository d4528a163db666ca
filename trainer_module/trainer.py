"""TFX Trainer entry point: `run_fn`, and `train`, the one training path.

`train` is the one training path (run_fn, the tuner's trials, the study and
the benchmark call it): it builds the model (model_building: scaling rule,
models, CowClip training step) and fits it on the train split read with
tf.data (input_pipeline). run_fn reads the typed settings from the
Trainer's custom_config (settings.TrainerSettings), trains the model (and
its replicas) and its logistic-regression baseline, records the
hyperparameters actually used, and exports them in one SavedModel
(serving) whose `serving_default` signature takes serialized RAW
tf.Examples (the Transform graph is attached) and returns the click
probability.
"""

import dataclasses
import io
import itertools
import json
import os
import tempfile
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from absl import logging
import keras
import numpy as np
import psutil
import tensorflow as tf
import tensorflow_transform as tft

from trainer_module import callbacks as callbacks_lib
from trainer_module import contract
from trainer_module import distribution
from trainer_module import linear_fit
from trainer_module import models
from trainer_module import plan as plan_lib
from trainer_module import preprocessing
from trainer_module import served_model
from trainer_module import training
from trainer_module.input_pipeline import hold_split
from trainer_module.input_pipeline import release_memory
from trainer_module.input_pipeline import TrainingData
from trainer_module.input_pipeline import training_data
from trainer_module.input_pipeline import training_part
from trainer_module.kept_split import HELD_SPLIT_DIR
from trainer_module.model_building import BASELINE_C_GRID
from trainer_module.model_building import l2_of_c
from trainer_module.model_building import build_and_compile
from trainer_module.model_building import check_training_fits
from trainer_module import warm_start
from trainer_module.serving import export_serving_model
from trainer_module.settings import TrainerSettings

# The batch the baseline's one-hot rows are gathered in from memory: any
# size gives the same rows; a large one, fewer Python steps.
_ONE_HOT_BATCH = 65536
# The fewest training rows the baseline is fitted on, whatever the memory
# estimate says (linear_fit.rows_that_fit).
_MIN_BASELINE_ROWS = 100_000


def fit(model: models.CTRModel, data: TrainingData, epochs: int,
        callbacks: Sequence[keras.callbacks.Callback] = (),
        verbose: Any = "auto", initial_epoch: int = 0,
        epoch_steps: Optional[int] = None,
        backup_dir: Optional[str] = None) -> Dict[str, Any]:
  """Trains up to `epochs` epochs with early stopping on the validation
  slice; the model ends with its best epoch's weights, its bias recentred
  (training.recalibrate_bias): its mean prediction on that slice set to the
  training part's click rate.

  `initial_epoch` resumes (Hyperband's trials); `epoch_steps` caps the
  steps of an epoch (the benchmark's fixed step count; None: the whole
  training part); `backup_dir`: where the fit keeps its state at each
  epoch's end and resumes from (callbacks_lib.TrainingBackup), a path that
  outlives the Trainer's execution and names what the fit is (run_fn).

  Returns:
    The record of the training: history (every epoch run), epochs_run and
    best_epoch (1-based) with its validation metrics, and the bias_shift;
    with a backup, "resumed_after" (the epochs it held) and
    "resumed_seconds" (the wall seconds earlier attempts spent on them).
  """
  stopping = callbacks_lib.early_stopping()
  fit_callbacks = [*callbacks, stopping]
  resumed_after = 0
  if backup_dir is not None:
    # Only the chief's backup is kept; the other workers write theirs to
    # scratch (TrainingBackup).
    saver = callbacks_lib.TrainingBackup(
        backup_dir, stopping,
        None if distribution.is_chief(model.distribute_strategy)
        else tempfile.mkdtemp(prefix="backup-"))
    fit_callbacks.append(saver)
    resumed_after = saver.epochs_done()
    if resumed_after:
      logging.warning("resuming the fit in %s after its epoch %d",
                      backup_dir, resumed_after)
    # The epochs done drew their data orders: draw them again, so the
    # next epoch reads the order it would have (in_memory's shuffle draws
    # a seed per pass).
    for _ in range(resumed_after):
      iter(data.train)
  history = model.fit(distribution.split_by_examples(data.train),
                      validation_data=distribution.split_by_examples(
                          data.validation),
                      epochs=epochs, initial_epoch=initial_epoch,
                      steps_per_epoch=epoch_steps, verbose=verbose,
                      callbacks=fit_callbacks)
  if backup_dir is not None:
    curves = saver.history  # The epochs before the kill too.
  else:
    curves = {k: [float(v) for v in vs]
              for k, vs in history.history.items()}
  # Index into this fit's epochs (Hyperband resumes at initial_epoch).
  best = max(stopping.best_epoch - initial_epoch, 0)
  return {"history": curves,
          "bias_shift": training.recalibrate_bias(model, data.validation,
                                                  data.click_rate),
          "epochs_run": len(curves.get("loss", [])),
          "best_epoch": best + 1,
          "best": {k: vs[best] for k, vs in curves.items()
                   if k.startswith("val_") and len(vs) > best},
          **({"resumed_after": resumed_after,
              "resumed_seconds": saver.earlier_seconds}
             if resumed_after else {})}



def train(plan: plan_lib.TrainingPlan, data: TrainingData,
          tf_transform_output: tft.TFTransformOutput, *,
          model: Optional[models.CTRModel] = None,
          seed: Optional[int] = None,
          epochs: Optional[int] = None, initial_epoch: int = 0,
          epoch_steps: Optional[int] = None, vocab_scale: int = 1,
          callbacks: Sequence[keras.callbacks.Callback] = (),
          verbose: Any = "auto",
          teachers: Sequence[models.CTRModel] = (),
          backup_dir: Optional[str] = None,
          warm_from: Optional[str] = None, warm_replica: int = 0
         ) -> Tuple[models.CTRModel, Dict[str, Any]]:
  """The one training path: run_fn, the tuner's trials, the study and the
  benchmark all train through it, on the Transform output.

  Builds the plan's model (build_and_compile: its scaled hyperparameters,
  CowClip step), then fits it
  (fit: early stopping on the validation slice, best epoch kept, bias
  refitted).

  Args:
    plan: the resolved training (plan.resolve).
    data: the train split's training part and validation slice
      (training_data, at plan.batch_size).
    tf_transform_output: the Transform output.
    model: a model build_and_compile already made from this plan
      (KerasTuner builds a trial's model before fitting it); None: build it
      here.
    seed: seeds Python, NumPy and TensorFlow before building (the study's
      and the benchmark's repeatable runs); None: leave them.
    epochs: the most epochs (None: the settings'; Hyperband's rounds).
    initial_epoch, epoch_steps: see fit.
    vocab_scale: see build_and_compile.
    callbacks: extra Keras callbacks (the step timer, TensorBoard, the
      tuner's own).
    verbose: Keras' fit verbosity.
    teachers: distil these models into the new one (training.distill_from,
      with the settings' distill_label_weight); () for plain training.
    backup_dir: see fit (None: no backup).
    warm_from: a served model's directory with a warm-start state: the
      built model starts from its replica `warm_replica`'s weights, rows
      carried over by id (warm_start.warm_start; a backup to resume from
      still wins). A model it cannot start from trains from scratch and
      the record says why.

  Returns:
    The trained model and its record: build_and_compile's (when it built
    the model) updated with fit's.
  """
  settings = plan.settings
  if seed is not None:
    keras.utils.set_random_seed(seed)
  record = {}
  if model is None:
    model, record = build_and_compile(plan, tf_transform_output,
                                      data.click_rate, vocab_scale)
  if warm_from is not None:
    record["warm_start"] = _warm_start(model, warm_from, tf_transform_output,
                                       warm_replica)
  if teachers:
    training.distill_from(model, teachers, settings.distill_label_weight)
  record.update(fit(model, data, settings.epochs if epochs is None else
                    epochs, callbacks, verbose, initial_epoch, epoch_steps,
                    backup_dir))
  if data.negative_sampling:
    record["negative_sampling"] = dict(data.negative_sampling)
  return model, record


def train_baseline(plan: plan_lib.TrainingPlan, data: TrainingData,
                   tf_transform_output: tft.TFTransformOutput
                  ) -> Tuple[models.CTRModel, Dict[str, Any]]:
  """The logistic-regression baseline, fitted as such (issues #32, #42).

  The model's ids one-hot (linear_fit.one_hot_rows), fitted by scikit-
  learn's Newton-CG along BASELINE_C_GRID, strongest first, warm-started,
  stopping at the first C worse than the one before it on the validation
  slice's log loss, on the training part's first linear_fit.PATH_ROWS rows;
  the kept C is then refitted on the whole training part and the validation
  slice together (linear_fit.fit_path). The fit is
  deterministic: no seed.

  No bias recentring afterwards: the intercept is not penalised, so at the
  optimum the mean prediction on the rows fitted already equals their click
  rate; recentring on the validation slice would move the whole model by
  that slice's noise (docs/lr_baseline.md, "The baseline's calibration").

  Returns:
    The fitted Keras "lr" model and its record: build_and_compile's, with
    "best" (the kept C's validation metrics before the refit, as Keras
    measures the model's), BASELINE_VALIDATION (the path fit's validation
    labels and probabilities: served_model.choose_served compares them
    with the model's), "grid" [{"c",
    "l2", "iterations", "val_logloss", "seconds"}], "c" and "l2" (the kept
    one's), "train_rows" (the training rows fitted: the first ones that fit
    in memory, linear_fit.rows_that_fit, and at most baseline_rows; all of
    them up to millions), "path_rows" (those the L2 path fitted),
    "refit" ({"iterations", "seconds"}) and "seconds" (the whole
    fit's wall time, the one-hot rows included: the baseline's cost next to
    the model's).
  """
  start = time.perf_counter()
  model, record = build_and_compile(
      plan.for_baseline(l2_of_c(BASELINE_C_GRID[0], data.train_examples)),
      tf_transform_output, data.click_rate)
  train_part = (data.in_memory.batches(_ONE_HOT_BATCH, shuffle=False)
                if data.in_memory is not None else data.train)
  in_memory = max(linear_fit.rows_that_fit(
      len(model.vocab_sizes), psutil.virtual_memory().available) -
                  data.validation_examples, _MIN_BASELINE_ROWS)
  train_rows = min(data.train_examples, in_memory,
                   plan.settings.baseline_rows or data.train_examples)
  if train_rows < data.train_examples:
    logging.warning(
        "the logistic-regression baseline is fitted on the first %d of the "
        "%d training rows: %s", train_rows, data.train_examples,
        "--baseline-rows" if train_rows < in_memory else
        "the one-hot rows of all of them would not fit in memory")
  rows = linear_fit.one_hot_rows(itertools.chain(
      linear_fit.first_rows(train_part, train_rows), data.validation),
                                 model.vocab_sizes)
  if rows.labels.size != train_rows + data.validation_examples:
    raise ValueError(
        f"the baseline read {rows.labels.size} rows, the split holds "
        f"{train_rows} + {data.validation_examples}")
  fitted = linear_fit.fit_path(rows, train_rows, BASELINE_C_GRID)
  del rows  # 12 bytes per id: GiBs at millions of rows.
  linear_fit.set_linear_weights(model, fitted["path_coef"],
                                fitted["path_intercept"])
  best = model.evaluate(data.validation, return_dict=True, verbose=0)
  labels, _, (path_probabilities,) = served_model.validation_scores(
      [model], data.validation)
  linear_fit.set_linear_weights(model, fitted["coef"], fitted["intercept"])
  record.update(
      best={f"val_{k}": float(v) for k, v in best.items()},
      **{BASELINE_VALIDATION: {"labels": labels,
                               "predictions": path_probabilities}},
      grid=[dict(g, l2=l2_of_c(g["c"], fitted["path_rows"]))
            for g in fitted["grid"]],
      c=fitted["c"], l2=l2_of_c(fitted["c"], train_rows),
      train_rows=train_rows, path_rows=fitted["path_rows"],
      refit=fitted["refit"], seconds=time.perf_counter() - start)
  return model, record


# A fitted baseline kept in a directory: its weights, its record (the
# keys below, and any the caller adds: the study's data fingerprint) and
# its path fit's validation labels and probabilities (served_model.
# choose_served), one float64 each per validation row: too many for the
# JSON record.
BASELINE_WEIGHTS = "baseline.weights.h5"
BASELINE_RECORD = "baseline.json"
BASELINE_VALIDATION = "validation"
BASELINE_VALIDATION_FILE = "baseline.validation.npz"
BASELINE_RECORD_KEYS = ("best", "grid", "c", "l2", "train_rows", "path_rows",
                        "refit", "seconds")


def keep_baseline(model: models.CTRModel, record: Mapping[str, Any],
                  directory: str, **extra: Any) -> None:
  """Writes the fitted baseline, its validation probabilities and its
  record (BASELINE_RECORD_KEYS, and `extra`) to `directory`, the record
  last: a kill leaves no record, and the next run fits again."""
  tf.io.gfile.makedirs(directory)
  weights = os.path.join(directory, BASELINE_WEIGHTS)
  partial = weights.replace(".weights.h5", ".partial.weights.h5")
  model.save_weights(partial)
  tf.io.gfile.rename(partial, weights, overwrite=True)
  arrays = io.BytesIO()  # np.savez seeks, which a GFile cannot.
  np.savez(arrays, **record[BASELINE_VALIDATION])
  with tf.io.gfile.GFile(os.path.join(directory, BASELINE_VALIDATION_FILE),
                         "wb") as f:
    f.write(arrays.getvalue())
  with tf.io.gfile.GFile(os.path.join(directory, BASELINE_RECORD), "w") as f:
    json.dump({**{k: record[k] for k in BASELINE_RECORD_KEYS if k in record},
               **extra}, f, indent=2)


def kept_baseline(plan: plan_lib.TrainingPlan, data: TrainingData,
                  tf_transform_output: tft.TFTransformOutput, directory: str
                 ) -> Optional[Tuple[models.CTRModel, Dict[str, Any]]]:
  """The baseline keep_baseline wrote to `directory`, and its record; None
  when it holds none."""
  weights = os.path.join(directory, BASELINE_WEIGHTS)
  path = os.path.join(directory, BASELINE_RECORD)
  if not (tf.io.gfile.exists(weights) and tf.io.gfile.exists(path)):
    return None
  with tf.io.gfile.GFile(path) as f:
    record = json.load(f)
  validation = os.path.join(directory, BASELINE_VALIDATION_FILE)
  if tf.io.gfile.exists(validation):
    with tf.io.gfile.GFile(validation, "rb") as f:
      with np.load(io.BytesIO(f.read())) as arrays:
        record[BASELINE_VALIDATION] = {k: arrays[k] for k in arrays.files}
  model, _ = build_and_compile(plan.for_baseline(record["l2"]),
                               tf_transform_output, data.click_rate)
  model.evaluate(data.validation.take(1), verbose=0)  # Builds it.
  model.load_weights(weights)
  return model, record


def _warm_start(model: models.CTRModel, served: str,
                tf_transform_output: tft.TFTransformOutput,
                replica: int) -> Dict[str, Any]:
  """warm_start.warm_start from `served` into today's vocabularies; its
  record, with where from, or why not."""
  try:
    carried = warm_start.warm_start(
        model, served, warm_start.transform_tokens(tf_transform_output,
                                                   model.fields), replica)
  except ValueError as error:
    logging.warning("training from scratch: %s", error)
    return {"from": served, "skipped": str(error)}
  logging.info("warm-started from %s: %d ids carried over, %d new, %d "
               "dropped", carried["from"], carried["carried_ids"],
               carried["new_ids"], carried["dropped_ids"])
  return carried


def train_replicas(plan: plan_lib.TrainingPlan, data: TrainingData,
                   train_files: List[str],
                   tf_transform_output: tft.TFTransformOutput,
                   log_dir: Optional[str],
                   seed: Optional[int] = None, verbose: Any = "auto",
                   callbacks: Sequence[keras.callbacks.Callback] = (),
                   backup_root: Optional[str] = None,
                   warm_from: Optional[str] = None
                  ) -> Tuple[List[models.CTRModel], Dict[str, Any]]:
  """settings.replicas models trained through train(), identically but for
  the seed: replica i is seeded with seed + i (initialisation) and reads the
  training part shuffled with that seed (data order), as two retrains
  differ.

  `seed` None (run_fn without settings.seed): replicas are seeded 0..N-1,
  and one replica (the default) trains unseeded; the study gives its
  run's seed, run_fn settings.seed. One
  replica trains on `data` as given (its shuffle seeded by training_data).
  `log_dir`: TensorBoard logs (None: none); `callbacks`: more Keras
  callbacks, given to every replica's fit; `backup_root`: each fit's
  backup in its own folder of it (fit; None: none); `warm_from`: replica i
  starts from the served model's replica i (train). The record is replica
  0's; with
  replicas, "replicas" lists each one's seed, epochs and best validation
  metrics (the report's per-replica AUC); "earlier_seconds" sums every
  fit's "resumed_seconds" (the replicas', the student's), the wall
  seconds earlier attempts spent on this training.
  """
  settings = plan.settings
  count = settings.replicas
  replicas, records = [], []
  for index in range(count):
    replica_seed = None if seed is None and count == 1 else (
        (seed or 0) + index)
    replica_data = data if count == 1 else dataclasses.replace(
        data, train=training_part(
            train_files, tf_transform_output, settings.spec.label,
            plan.batch_size, data.validation_buckets,
            settings.negative_sampling_rate, replica_seed, data.in_memory))
    replica_callbacks = [callbacks_lib.ThroughputLogger(plan.batch_size),
                         *callbacks]
    if log_dir is not None:
      replica_callbacks.append(keras.callbacks.TensorBoard(log_dir=(
          log_dir if count == 1 else
          os.path.join(log_dir, contract.replica_output(index)))))
    model, record = train(
        plan, replica_data, tf_transform_output, seed=replica_seed,
        callbacks=replica_callbacks, verbose=verbose,
        backup_dir=_backup_dir(backup_root, contract.replica_output(index)),
        warm_from=warm_from, warm_replica=index)
    replicas.append(model)
    records.append(record)
  record = records[0]
  if count > 1:
    record.update(push=settings.push, replicas=[
        {"seed": (seed or 0) + index, **{k: r[k] for k in (
            "epochs_run", "best_epoch", "best", "bias_shift")}}
        for index, r in enumerate(records)])
  if settings.distill:
    student, student_record = train(
        plan, data, tf_transform_output,
        seed=None if seed is None else seed + count, verbose=verbose,
        callbacks=[callbacks_lib.ThroughputLogger(plan.batch_size),
                   *callbacks], teachers=replicas,
        backup_dir=_backup_dir(backup_root, "student"), warm_from=warm_from)
    record["distillation"] = {
        **{k: student_record[k] for k in ("epochs_run", "best_epoch",
                                          "best", "bias_shift")},
        **compare_with_ensemble(student, replicas, data.validation)}
    records.append(student_record)
    replicas = [student]
  earlier_seconds = sum(r.get("resumed_seconds", 0.0) for r in records)
  if earlier_seconds:
    record["earlier_seconds"] = earlier_seconds
  return replicas, record


def _backup_dir(root: Optional[str], name: str) -> Optional[str]:
  return None if root is None else os.path.join(root, name)


def compare_with_ensemble(student: models.CTRModel,
                          replicas: Sequence[models.CTRModel],
                          validation) -> Dict[str, float]:
  """AUC on the validation slice of the distilled model, of the replicas'
  ensemble (their mean probability) and of replica 0, and the student's
  Prediction Difference against the ensemble (contract.
  prediction_difference)."""
  labels, weights, (student_p, *replica_p) = served_model.validation_scores(
      [student, *replicas], validation)
  ensemble_p = np.mean(replica_p, axis=0)

  def auc(probabilities):
    metric = keras.metrics.AUC(num_thresholds=10_000)
    metric.update_state(labels, probabilities, sample_weight=weights)
    return float(metric.result())

  return {"student_auc": auc(student_p), "ensemble_auc": auc(ensemble_p),
          "replica_auc": auc(replica_p[0]),
          "student_pd_vs_ensemble": contract.prediction_difference(
              [student_p, ensemble_p], weights),
          "replica_pd": contract.prediction_difference(replica_p, weights)}


def run_fn(fn_args) -> None:
  """Trains the configured CTR model with CowClip and its logistic-
  regression baseline, and exports both in one SavedModel, serving the
  model or, unless the model is better beyond noise, the baseline
  (served_model.choose_served)."""
  settings = TrainerSettings.from_custom_config(fn_args.custom_config)
  # First: a multi-worker strategy (and a CPU split) must exist before
  # anything initialises TensorFlow's runtime.
  strategy = distribution.strategy(settings.distribution,
                                   settings.cpu_devices)
  tf_transform_output = tft.TFTransformOutput(fn_args.transform_output)
  tuned = (fn_args.hyperparameters or {}).get("values", {})
  backups = backup_root(fn_args, tuned)
  # Kept with the backups, so that a Trainer resumed after a kill does not
  # read the split again; by the chief alone (one writer), and gone with
  # the backups when the Trainer is done.
  held = hold_split(fn_args.train_files, tf_transform_output,
                    settings.spec.label, settings.negative_sampling_rate,
                    keep_in=os.path.join(backups, HELD_SPLIT_DIR)
                    if distribution.is_chief(strategy) else None)
  plan = plan_lib.resolve(
      settings, tuned, held.train_examples, precision_kept_in=
      contract.pipeline_directory(fn_args.model_run_dir,
                                  contract.PRECISION_DIR))
  logging.info("training at batch %d (%s), %d steps an epoch, in %s",
               plan.batch_size, plan.batch_size_reason, plan.steps_per_epoch,
               plan.model_options.precision)
  logging.info("%s", check_training_fits(
      preprocessing.vocabulary_sizes(tf_transform_output, settings.spec),
      plan.model_options.embedding_dim, psutil.virtual_memory().available,
      settings.replicas + int(settings.distill)))
  data = training_data(fn_args.train_files, tf_transform_output,
                       settings.spec.label, plan.batch_size, seed=settings.seed,
                       negative_sampling_rate=settings.negative_sampling_rate,
                       held=held)
  # The served model TFX hands over (base_model: pipeline.WARM_START_ID),
  # if it is one and a warm start is asked for.
  served = getattr(fn_args, "base_model", None)
  warm_from = served if (settings.warm_start and served and
                         warm_start.has_state(served)) else None
  replicas, record = train_replicas(
      plan, data, fn_args.train_files, tf_transform_output,
      fn_args.model_run_dir, seed=settings.seed, backup_root=backups,
      warm_from=warm_from)
  kept = kept_baseline(plan, data, tf_transform_output, backups)
  if kept is None:
    baseline, baseline_record = train_baseline(plan, data,
                                               tf_transform_output)
    if distribution.is_chief(replicas[0].distribute_strategy):
      keep_baseline(baseline, baseline_record, backups)
  else:
    baseline, baseline_record = kept
    logging.warning("the logistic-regression baseline fitted before the "
                    "Trainer was stopped, from %s", backups)
  record.update(
      train_examples=data.train_examples,
      validation_examples=data.validation_examples,
      logistic_regression={k: baseline_record[k]
                           for k in BASELINE_RECORD_KEYS},
      served=served_model.choose_served(
          settings, *served_model.served_probabilities(
              settings, replicas, data.validation),
          baseline_record.get(BASELINE_VALIDATION)))
  serve_baseline = record["served"]["served"] == contract.LR_OUTPUT
  logging.info("serving the %s: %s", "logistic-regression baseline"
               if serve_baseline else "model", record["served"]["reason"])
  # Training is over: its record cache is freed for the export to reuse,
  # then given back before the Evaluator, which may run in this process.
  del data
  if not distribution.is_chief(replicas[0].distribute_strategy):
    # Every worker saves (saving may read variables collectively), only the
    # chief's model is the Trainer's output.
    with tempfile.TemporaryDirectory() as scratch:
      export_serving_model(replicas, baseline, tf_transform_output, settings,
                           scratch, serve_baseline)
    release_memory()
    return
  export_serving_model(replicas, baseline, tf_transform_output, settings,
                       fn_args.serving_model_dir, serve_baseline)
  # Tomorrow's warm start, pushed with the model.
  warm_start.save_state(replicas, warm_start.transform_vocabularies(
      tf_transform_output, replicas[0].fields), fn_args.serving_model_dir)
  for directory in (fn_args.model_run_dir, fn_args.serving_model_dir):
    with tf.io.gfile.GFile(os.path.join(directory, contract.TRAINING_RECORD),
                           "w") as f:
      json.dump(record, f, indent=2, sort_keys=True)
  # Done: this Trainer's backups, and any an earlier one left, go.
  if tf.io.gfile.exists(os.path.dirname(backups)):
    tf.io.gfile.rmtree(os.path.dirname(backups))
  release_memory()


# The Trainer's fits keep their backups under the pipeline root, beside
# its executions' outputs: <root>/Trainer/backup/<key>/.
BACKUP_DIR = "backup"


def backup_root(fn_args, tuned: Mapping[str, Any]) -> str:
  """Where this Trainer's fits keep their backups (fit), one folder each:
  a path every execution of the Trainer on the same inputs and settings
  finds (the next execution after a kill resumes from it), and no other.

  The key hashes what the fits depend on: the settings, the tuned values,
  the train files and the Transform output (new data: new artifacts)."""
  return contract.resume_directory(
      fn_args.model_run_dir, BACKUP_DIR,
      [fn_args.custom_config, dict(tuned), sorted(fn_args.train_files),
       fn_args.transform_output])
