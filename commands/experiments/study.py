"""Batch-size scaling study: AUC, log loss and speed per rule and batch size.

`python -m pipeline study` runs ingestion and Transform ONCE through the real
pipeline (create_pipeline(..., until_transform=True), cached by TFX like any
run), then trains every (model, scaling rule, batch size, seed) on that one
dataset and Transform graph and evaluates it on the one eval split:

* training is the Trainer's: trainer.train_replicas (trainer.train, once
  per replica) with the run's PipelineConfig.trainer (base
  hyperparameters mapped by the run's scaling rule) on
  input_pipeline.training_data, seeded per run (with --replicas N, replica
  i with the run's seed + i). CowClip is on
  exactly for the 'cowclip' rule (``ablation`` adds the cowclip rule without
  clipping). A NaN loss (callbacks.NonFiniteLossError) is recorded as a
  diverged run.
* the model is exported with serving.export_serving_model and evaluated by
  TFMA with pipeline.create_eval_config on the RAW eval examples, as the
  Evaluator does (AUC, BinaryCrossEntropy, MeanPrediction/MeanLabel), and on
  its id-frequency slice (the serving model's slicing signature buckets each
  example by the training counts of its ids), which shows where a rule loses
  AUC. Only the gate's change thresholds are dropped: there is no baseline.
  With replicas, the served model is their mean (or replica 0, --push
  single), and TFMA also gives each replica's AUC and the Prediction
  Difference between them (components.prediction_difference), overall and
  by id-frequency bucket.

Every finished run is appended to DIR/study.csv at once; a restart with the
same DIR skips the runs already there, and resumes a run it stopped in the
middle after its last finished epoch (its fits' backups, under the run's
directory, go once its row is written; a resumed row's train_seconds add
the earlier attempts' seconds on the epochs it kept, which the backups
record, to the resuming process's; an epoch a stop cut short is lost). A
run that would train exactly like one already done (at the base batch size
most rules leave every hyperparameter as it is) reuses that run's row
instead of training again. A run is known by model, rule, clipping, batch
size and seed only, so other base hyperparameters, epochs or model options
need a new DIR. DIR/study.md (tables) and PNG figures are rewritten from
the whole CSV after every run. The train split, parsed once, is kept in
DIR for the next study command of the same data.
"""

import argparse
import dataclasses
import logging
import math
import os
import shutil
import statistics
import time
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import keras
import numpy as np
import tensorflow_transform as tft

from commands.cli import console
from commands.cli import flags
from commands.experiments import study_data
from commands.experiments import study_evaluation
from commands.experiments import study_provenance
from commands.experiments import study_results
from commands.experiments.study_data import TransformedInputs
from pipeline import progress
from pipeline.config import PipelineConfig
from trainer_module import callbacks as callbacks_lib
from trainer_module import contract
from trainer_module import input_pipeline
from trainer_module import kept_split
from trainer_module import plan as plan_lib
from trainer_module import models
from trainer_module import scaling
from trainer_module import served_model
from trainer_module import serving
from trainer_module import trainer
from trainer_module import training


@dataclasses.dataclass(frozen=True)
class StudyRun:
  """One training run of the study."""
  model: str
  rule: str
  batch_size: int
  seed: int
  cowclip: bool

  @property
  def key(self) -> str:
    clip = "clip" if self.cowclip else "noclip"
    return f"{self.model}-{self.rule}-{clip}-b{self.batch_size}-s{self.seed}"


def study_runs(model_names: Sequence[str], rules: Sequence[str],
               batch_sizes: Sequence[int], seeds: Sequence[int],
               ablation: bool = False, replicas: int = 1) -> List[StudyRun]:
  """Every run, CowClip on exactly for the cowclip rule.

  With ``ablation``, the cowclip rule is also run without clipping (its
  hyperparameters, notably the unscaled embedding rate, without the clip).
  With ``replicas``, a run of seed s trains replicas seeded s..s+replicas-1:
  seeds closer than that would share replicas, and are refused.
  """
  ordered = sorted(seeds)
  for low, high in zip(ordered, ordered[1:]):
    if high - low < replicas:
      raise ValueError(
          f"seeds {low} and {high} with {replicas} replicas would train the "
          f"same replicas (seeds {low}..{low + replicas - 1} and "
          f"{high}..{high + replicas - 1}); space the seeds at least "
          f"{replicas} apart")
  for rule in rules:
    if rule not in scaling.RULES:
      raise ValueError(f"unknown scaling rule {rule!r}; choose from "
                       f"{scaling.RULES}")
  for name in model_names:
    if name not in models.MODELS:
      raise ValueError(f"unknown model {name!r}; choose from {models.MODELS}")
  variants = [(rule, rule == "cowclip") for rule in rules]
  if ablation and "cowclip" in rules:
    variants.append(("cowclip", False))
  return [StudyRun(m, rule, b, seed, clip) for m in model_names
          for rule, clip in variants for b in batch_sizes for seed in seeds]


@dataclasses.dataclass(frozen=True)
class StudySetup:
  """What every run of one study shares."""
  config: PipelineConfig
  inputs: TransformedInputs
  tf_transform_output: tft.TFTransformOutput
  train_files: Tuple[str, ...]
  # The train split as every run reads it, read once (its parts in memory
  # when they fit): each run batches it at its batch size and seed.
  held: input_pipeline.HeldSplit
  baseline: keras.Model
  # Its path fit's validation labels and probabilities (trainer.
  # BASELINE_VALIDATION), for the served choice; None if kept without them.
  baseline_validation: Optional[Mapping[str, np.ndarray]]
  results: str  # The directory of study.csv (results_dir).
  fingerprint: str  # study_provenance.data_fingerprint.
  machine: str  # study_provenance.machine_description()
  commit: str  # study_provenance.code_commit()


def results_dir(config: PipelineConfig, results: Optional[str]) -> str:
  """Where the study keeps what must outlive the machine (study.csv and
  study.md, the figures, study_settings.json, the baseline): `results`
  (e.g. a folder under docs/, committed as runs finish), else the study
  DIR. The DIR keeps the pipeline, the exported runs, the logs and the
  held split (kept_split.HELD_SPLIT_DIR)."""
  return results or config.output


def run_config(config: PipelineConfig, run: StudyRun) -> PipelineConfig:
  """The study's config with the run's model, batch size, rule and CowClip:
  its trainer settings are what the Trainer would get for this run."""
  return dataclasses.replace(config, trainer=dataclasses.replace(
      config.trainer, model=run.model, batch_size=run.batch_size,
      scaling_rule=run.rule,
      step=dataclasses.replace(config.trainer.step, cowclip=run.cowclip)))


def train_baseline(config: PipelineConfig, train_files: Sequence[str],
                   tf_transform_output: tft.TFTransformOutput,
                   held: input_pipeline.HeldSplit, results: str,
                   fingerprint: str
                  ) -> Tuple[keras.Model, Optional[Mapping[str, np.ndarray]]]:
  """The logistic-regression baseline every run's export serves beside the
  model (the Evaluator's config reads it), fitted as run_fn does, once per
  study and kept in its results directory (trainer.keep_baseline): a
  resumed study, on this machine or another, serves the same baseline as
  its finished runs. Returns it with its validation probabilities
  (trainer.BASELINE_VALIDATION; None from a baseline kept without them).

  Raises:
    ValueError: the kept baseline was fitted on other data.
  """
  plan = plan_lib.resolve(config.trainer, {}, held.train_examples)
  data = input_pipeline.training_data(
      list(train_files), tf_transform_output, config.spec.label,
      plan.batch_size,
      negative_sampling_rate=config.trainer.negative_sampling_rate,
      held=held)
  record_path = os.path.join(results, trainer.BASELINE_RECORD)
  stage = _Progress("baseline")
  stage.started()
  kept = trainer.kept_baseline(plan, data, tf_transform_output,
                               results)
  if kept is not None:
    baseline, record = kept
    if record.get("data_fingerprint", fingerprint) != fingerprint:
      raise ValueError(
          f"{record_path}: the kept baseline was fitted on other data (data "
          f"fingerprint {record['data_fingerprint']}, this data's "
          f"{fingerprint}); give another --results")
    stage.finished(f"kept in {record_path} (C {record['c']:g})")
    return baseline, record.get(trainer.BASELINE_VALIDATION)
  baseline, trained = trainer.train_baseline(plan, data,
                                             tf_transform_output)
  trainer.keep_baseline(baseline, trained, results,
                        data_fingerprint=fingerprint)
  stage.finished(f"C {trained['c']:g} on {trained['train_rows']:,} "
                    "training rows, validation AUC "
                    f"{trained['best']['val_auc']:.4f}, "
                    f"{trained['seconds']:.0f} s")
  return baseline, trained[trainer.BASELINE_VALIDATION]


def _note(line: str) -> None:
  """A line on the console of `study` (console.ComponentProgress)."""
  logging.getLogger(progress.PROGRESS_LOGGER).info(line, extra={"note": True})


@dataclasses.dataclass(frozen=True)
class _Progress:
  """A step of the study as the console shows a pipeline component (a line
  at its start and one at its end with its time, console.
  ComponentProgress): through progress.log_progress, so that under `study`
  it reaches the console while the libraries' output goes to the log."""
  name: str

  def started(self) -> None:
    progress.log_progress(self.name, progress.STARTED)

  def finished(self, summary: str) -> None:
    progress.log_progress(self.name, progress.FINISHED, summary)


class LastEpochWeights(keras.callbacks.Callback):
  """The weights of the last epoch trained. Keras ends training with the
  best epoch's (trainer.fit's early stopping restores them when training
  ends); this callback comes before it, so it sees the last ones."""

  def __init__(self):
    super().__init__()
    self.weights = None

  def on_train_end(self, logs=None):
    self.weights = self.model.get_weights()


def evaluate(serving_dir: str, tfma_dir: str, config: PipelineConfig,
             setup: StudySetup) -> Dict[str, object]:
  """The study.csv metric columns of the model exported to serving_dir
  (TFMA writes to tfma_dir)."""
  return study_evaluation.metrics_row(study_evaluation.tfma_metrics(
      serving_dir, study_evaluation.study_eval_config(config),
      study_data.split_pattern(setup.inputs.raw_examples, "eval"),
      setup.tf_transform_output.raw_metadata.schema, tfma_dir,
      config.runner.beam_args), config.trainer.served_replicas)


def run_directory(run: StudyRun, setup: StudySetup) -> str:
  """Where a run exports its models and keeps its backups. Studies of one
  DIR with their own results (--results) may share run keys: each writes
  under its results' name."""
  return os.path.join(setup.config.output, "runs", *(
      [] if setup.results == setup.config.output else
      [os.path.basename(os.path.normpath(setup.results))]), run.key)


def backup_directory(run_dir: str, setup: StudySetup) -> str:
  """Where a run's fits keep their state at each epoch's end (trainer.fit):
  a study stopped mid-run (Ctrl-C, a lost machine with its DIR kept)
  resumes the run after its last finished epoch. Keyed by the data too;
  the study's settings are checked before (study_settings.json)."""
  return os.path.join(run_dir, "backup", setup.fingerprint)


def train_and_evaluate(run: StudyRun, setup: StudySetup) -> Dict[str, object]:
  """Trains one run as run_fn does, evaluates it, returns its study.csv row.

  The kept model is the best epoch's (early stopping). With one replica,
  the last epoch's model is evaluated too (last_* columns), its bias
  refitted the same way: the paper reports the model after its epochs.
  """
  config = run_config(setup.config, run)
  trainer_settings = config.trainer
  plan = plan_lib.resolve(trainer_settings, {}, setup.held.train_examples)
  data = input_pipeline.training_data(
      list(setup.train_files), setup.tf_transform_output, config.spec.label,
      plan.batch_size, seed=run.seed,
      negative_sampling_rate=config.trainer.negative_sampling_rate,
      held=setup.held)
  hparams = plan.scaled
  row = {"run": run.key, "model": run.model, "rule": run.rule,
         "cowclip": run.cowclip, "batch_size": run.batch_size,
         "seed": run.seed, "epochs": config.trainer.epochs,
         "embedding_update": config.trainer.step.embedding_update,
         "bias_constraints": "",  # A removed option (study_results.COLUMNS).
         "replicas": config.trainer.replicas,
         "push": (config.trainer.push if config.trainer.served_replicas > 1
                  else ""),
         "dense_lr": hparams["dense_lr"], "embed_lr": hparams["embed_lr"],
         "l2": hparams["l2"], "train_examples": data.train_examples,
         "data_fingerprint": setup.fingerprint,
         "machine": setup.machine, "commit": setup.commit}
  last_epoch = LastEpochWeights()
  run_dir = run_directory(run, setup)
  start = time.perf_counter()
  try:
    replicas, trained = trainer.train_replicas(
        plan, data, list(setup.train_files),
        setup.tf_transform_output, log_dir=None, seed=run.seed,
        # A line per epoch in the log, which the console's live line reads.
        verbose=2,
        callbacks=[last_epoch] if config.trainer.replicas == 1 else [],
        backup_root=backup_directory(run_dir, setup))
  except callbacks_lib.NonFiniteLossError:
    row.update(train_seconds=time.perf_counter() - start, diverged=True)
    return row
  seconds = time.perf_counter() - start + trained.get("earlier_seconds", 0.0)
  history = trained["history"]
  rates = history.get("examples_per_second")
  rate = statistics.mean(rates) if rates else (
      data.train_examples * trained["epochs_run"] / seconds)
  clipped = history.get("clipped_fraction")
  cpu_rates = [r for r in history.get("examples_per_cpu_second", ())
               if math.isfinite(r)]
  row.update(train_seconds=seconds, examples_per_second=rate,
             examples_per_second_by_epoch=" ".join(
                 f"{r:.0f}" for r in rates or ()),
             examples_per_cpu_second=(statistics.mean(cpu_rates)
                                      if cpu_rates else ""),
             epochs_run=trained["epochs_run"],
             best_epoch=trained["best_epoch"],
             steps=plan.steps_per_epoch * trained["epochs_run"],
             epoch_seconds=data.train_examples / rate, diverged=False,
             final_train_loss=float(history["loss"][-1]),
             validation_logloss_by_epoch=_by_epoch(history, "val_logloss"),
             validation_auc_by_epoch=_by_epoch(history, "val_auc"),
             clipped_fraction=statistics.mean(clipped) if clipped else "",
             **{k: trained["distillation"][k] for k in
                study_results.DISTILLATION_COLUMNS
                if "distillation" in trained})

  row.update(served_columns(served_model.choose_served(
      trainer_settings, *served_model.served_probabilities(
          trainer_settings, replicas, data.validation),
      setup.baseline_validation)))
  serving_dir = os.path.join(run_dir, "serving")
  serving.export_serving_model(replicas, setup.baseline,
                               setup.tf_transform_output, trainer_settings,
                               serving_dir)
  row.update(evaluate(serving_dir, os.path.join(run_dir, "tfma"), config,
                      setup))
  if row.get("served"):
    row["served_auc"] = row["lr_auc" if row["served"] == "lr" else "auc"]
  last = {"last_auc": row["auc"], "last_logloss": row["logloss"],
          "last_calibration": row["calibration"]}
  if (config.trainer.replicas == 1 and
      trained["epochs_run"] > trained["best_epoch"]):
    model = replicas[0]
    model.set_weights(last_epoch.weights)
    training.recalibrate_bias(model, data.validation, data.click_rate)
    last_dir = os.path.join(run_dir, "serving_last")
    serving.export_serving_model([model], setup.baseline,
                                 setup.tf_transform_output, trainer_settings,
                                 last_dir)
    metrics = evaluate(last_dir, os.path.join(run_dir, "tfma_last"), config,
                       setup)
    last = {f"last_{k}": metrics[k] for k in ("auc", "logloss", "calibration")}
  elif config.trainer.served_replicas > 1:
    last = {}
  row.update(last)
  return row


def served_columns(served: Mapping[str, object]) -> Dict[str, object]:
  """The study.csv columns of what run_fn would serve (trainer.
  choose_served): the model ("model") or the logistic regression ("lr"),
  and the paired validation difference it was chosen by. The export
  still serves the model beside the baseline, so the study measures both
  on the eval split; served_auc is the chosen one's."""
  if "difference" not in served:
    return {}
  low, high = served["interval"]
  return {"served": "lr" if served["served"] == contract.LR_OUTPUT
                    else "model",
          "validation_auc_difference": served["difference"],
          "validation_auc_low": low, "validation_auc_high": high,
          "validation_rows": served["rows"]}


def _by_epoch(history: Mapping[str, Sequence[float]], metric: str) -> str:
  """A Keras history curve as a study.csv cell (space-separated)."""
  return " ".join(f"{v:.6f}" for v in history.get(metric, ()))


def _training_signature(row: Mapping[str, object]) -> Tuple:
  return tuple(row[k] for k in ("model", "batch_size", "seed", "cowclip",
                                "epochs", "embedding_update", "dense_lr",
                                "embed_lr", "l2")) + (
                                    row.get("bias_constraints") or "",)


def same_training(config: PipelineConfig, run: StudyRun,
                  rows: Sequence[Mapping[str, object]]
                 ) -> Optional[Dict[str, object]]:
  """A finished row that trained exactly as ``run`` would, relabelled as
  ``run``; None if there is none.

  Same model, batch, seed, clipping, epochs, update and scaled
  hyperparameters (r, zeta and warmup never depend on the rule) give the
  same model: at the base batch size every rule but cowclip is `none`.
  """
  if not rows:
    return None
  # The `auto` base values depend on the training rows, the same for every
  # run of a study (one Transform output, one validation slice).
  hparams = plan_lib.training_hparams(
      run_config(config, run).trainer, {}, run.batch_size,
      int(float(rows[0]["train_examples"])))["scaled"]
  wanted = _training_signature({
      "model": run.model, "batch_size": run.batch_size, "seed": run.seed,
      "cowclip": run.cowclip, "epochs": config.trainer.epochs,
      "embedding_update": config.trainer.step.embedding_update,
      "bias_constraints": "",
      **hparams})
  for row in rows:
    if _training_signature(row) == wanted:
      return {**row, "run": run.key, "rule": run.rule}
  return None


def run_study(config: PipelineConfig, runs: Sequence[StudyRun],
              header: Sequence[str] = (), results: Optional[str] = None
             ) -> List[Dict[str, object]]:
  """Transform once, train/evaluate the runs not yet in study.csv, report
  (with every run there: the report alone, the data unread).

  Args:
    config: the pipeline config every run starts from (epochs, base
      hyperparameters, model options, embedding update, frequency slice);
      its output DIR holds the pipeline root and runs/<run>/ (serving
      model, TFMA output).
    runs: from study_runs.
    header: lines put at the top of study.md (the settings).
    results: the directory of study.csv, study.md, the figures, the
      settings and the baseline (results_dir; None: the output DIR).

  Returns:
    All rows of study.csv.

  Raises:
    ValueError: study.csv or the kept baseline are of other data or other
      settings.
  """
  results = results_dir(config, results)
  study_provenance.check_study_settings(config, results)
  csv_path = os.path.join(results, "study.csv")
  rows = study_results.read_rows(csv_path)
  done = {r["run"] for r in rows}
  todo = [r for r in runs if r.key not in done]
  _note(f"study: {len(runs) - len(todo)} of {len(runs)} runs already in "
        f"{csv_path}")
  if not todo:
    # Nothing to train, nothing to check against: the data are not read
    # (after a code change, ingestion and Transform would run again).
    write_report(rows, results, header)
    return rows
  inputs = study_data.transform_once(config)
  train_files = study_data.split_files(inputs.raw_examples, "train")
  tf_transform_output = tft.TFTransformOutput(inputs.transform_graph)
  fingerprint = study_provenance.data_fingerprint(tf_transform_output)
  study_provenance.check_fingerprints(rows, csv_path, fingerprint)
  held = input_pipeline.hold_split(
      train_files, tf_transform_output, config.spec.label,
      config.trainer.negative_sampling_rate,
      keep_in=os.path.join(config.output, kept_split.HELD_SPLIT_DIR))
  baseline, baseline_validation = train_baseline(
      config, train_files, tf_transform_output, held, results, fingerprint)
  setup = StudySetup(
      config=config, inputs=inputs, tf_transform_output=tf_transform_output,
      train_files=tuple(train_files), held=held, baseline=baseline,
      baseline_validation=baseline_validation, results=results,
      fingerprint=fingerprint,
      machine=study_provenance.machine_description(),
      commit=study_provenance.code_commit())
  for i, run in enumerate(todo, start=1):
    stage = _Progress(f"run {i}/{len(todo)} {run.key}")
    stage.started()
    row = same_training(config, run, rows)
    if row is None:
      row = train_and_evaluate(run, setup)
      # What the run built (its model, batches) goes before the next run;
      # the held split stays for it.
      input_pipeline.release_memory()
      how = ""
    else:
      how = "trains exactly as a finished run: its results are reused; "
    study_results.append_row(csv_path, row)
    # In study.csv now: the run is never trained again, its backup not read.
    shutil.rmtree(os.path.join(run_directory(run, setup), "backup"),
                  ignore_errors=True)
    stage.finished(how + _run_summary(row))
    # Parsed as a resumed study would see them.
    rows = study_results.read_rows(csv_path)
    write_report(rows, results, header)
  return rows


def _run_summary(row: Mapping[str, object]) -> str:
  """A finished run's console line: AUC, log loss, epochs and speed."""
  if row.get("diverged"):
    return f"diverged after {row['train_seconds']:.0f} s"
  return (f"auc {row['auc']:.4f} logloss {row['logloss']:.4f}, "
          f"{int(row['epochs_run'])} epochs (best {int(row['best_epoch'])}),"
          f" {row['train_seconds']:.0f} s training, "
          f"{row['examples_per_second']:,.0f} examples/s")


def write_report(rows: Sequence[Mapping[str, object]], output: str,
                 header: Sequence[str]) -> None:
  """study.md and the figures from the rows (nothing if there are none)."""
  if not rows:
    return
  with open(os.path.join(output, "study.md"), "w") as f:
    f.write(study_results.markdown_report(rows, header) + "\n")
  study_results.write_figures(rows, output)


def main(args: argparse.Namespace) -> int:
  """Runs the study from parsed flags."""
  config = flags.config_from_args(args)
  trainer_settings = config.trainer
  runs = study_runs(args.models, args.rules, args.batch_sizes, args.seeds,
                    args.ablation, trainer_settings.replicas)
  rare, frequent = trainer_settings.frequency_thresholds
  auto = trainer_settings.auto_hparam_keys
  step = trainer_settings.step
  # The study's settings; markdown_report adds the runs study.csv holds
  # (this command's runs may be a few of them).
  header = [f"Dataset {args.dataset} from `{args.data}`; "
            f"{trainer_settings.epochs} epoch(s); "
            f"replicas {trainer_settings.replicas}"
            + (f" (served: {trainer_settings.push}; replica i of seed s is "
               "seeded s + i)" if trainer_settings.replicas > 1 else "") + ".",
            f"Base hyperparameters at batch {config.spec.base_batch_size}: "
            f"{trainer_settings.base_hparams}"
            + (f"; {', '.join(auto)} derived from the training rows "
               "(`auto`): study.csv has each run's scaled values"
               if auto else "") + ".",
            f"Model options: {trainer_settings.model_options}; embedding "
            f"update {step.embedding_update}; negative sampling rate "
            f"{trainer_settings.negative_sampling_rate}.",
            "Logistic-regression baseline (the `lr_` columns): fitted on "
            + (f"the first {trainer_settings.baseline_rows:,} training rows "
               "(`--baseline-rows`)" if trainer_settings.baseline_rows else
               "the training rows that fit in memory")
            + "; `baseline.json` has its C and rows.",
            "Id-frequency buckets: the pipeline's id_frequency slice "
            "(geometric mean over fields of the training count of the "
            f"example's ids, OOV ids 0): < {rare} rare, < {frequent} medium, "
            "else frequent."]
  with console.pipeline_console(config.output, args.verbose):
    rows = run_study(config, runs, header, args.results)
  results = results_dir(config, args.results)
  print(f"study: {len(rows)} runs in {os.path.join(results, 'study.csv')}"
        f"; report {os.path.join(results, 'study.md')}; the libraries' "
        f"output in {os.path.join(config.output, progress.LOG_FILE)}")
  return 0
