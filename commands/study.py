"""Batch-size scaling study: AUC, log loss and speed per rule and batch size.

`python -m pipeline study` runs ingestion and Transform ONCE through the real
pipeline (create_pipeline(..., until_transform=True), cached by TFX like any
run), then trains every (model, scaling rule, batch size, seed) on that one
transformed dataset and evaluates it on the one eval split:

* training is the Trainer's: trainer.train with the run's
  PipelineConfig.trainer_settings (base hyperparameters mapped by the run's
  scaling rule) on trainer.training_data, seeded per run. CowClip is on
  exactly for the 'cowclip' rule (``ablation`` adds the cowclip rule without
  clipping). A NaN loss (training.NonFiniteLossError) is recorded as a
  diverged run.
* the model is exported with trainer.export_serving_model and evaluated by
  TFMA with pipeline.create_eval_config on the RAW eval examples, as the
  Evaluator does (AUC, BinaryCrossEntropy, MeanPrediction/MeanLabel), and on
  its id-frequency slice (the serving model's slicing signature buckets each
  example by the training counts of its ids), which shows where a rule loses
  AUC. Only the gate's change thresholds are dropped: there is no baseline.

Every finished run is appended to DIR/study.csv at once; a restart with the
same DIR skips the runs already there. A run that would train exactly like
one already done (at the base batch size most rules leave every
hyperparameter as it is) reuses that run's row instead of training again. A
run is known by model, rule, clipping, batch size and seed only, so other
base hyperparameters, epochs or model options need a new DIR. DIR/study.md (tables) and PNG figures
are rewritten from the whole CSV after every run.
"""

import argparse
import csv
import dataclasses
import math
import os
import statistics
import time
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from apache_beam.options.pipeline_options import PipelineOptions
import keras
from matplotlib.figure import Figure
import numpy as np
import tensorflow_model_analysis as tfma
import tensorflow_transform as tft

from commands import benchmark
from commands import flags
from pipeline import runner
from pipeline.config import PipelineConfig
from pipeline.pipeline import create_eval_config
from trainer_module import contract
from trainer_module import models
from trainer_module import scaling
from trainer_module import settings
from trainer_module import trainer
from trainer_module import training

BUCKETS = contract.FREQUENCY_BUCKETS
DEFAULT_BATCH_SIZES = (1024, 4096, 16384, 65536)
DEFAULT_RULES = ("none", "sqrt", "linear", "n2-lambda", "cowclip")

COLUMNS = (
    ("run", "model", "rule", "cowclip", "batch_size", "seed", "epochs",
     "epochs_run", "best_epoch",
     "embedding_update", "dense_lr", "embed_lr", "l2", "train_examples",
     "eval_examples", "steps", "train_seconds", "epoch_seconds",
     "examples_per_second", "diverged", "final_train_loss", "clipped_fraction",
     "auc", "logloss",
     "mean_prediction", "mean_label", "calibration") +
    tuple(f"{kind}_{b}" for b in BUCKETS for kind in ("auc", "examples")))
_TEXT_COLUMNS = ("run", "model", "rule", "embedding_update")
_BOOL_COLUMNS = ("cowclip", "diverged")


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
               ablation: bool = False) -> List[StudyRun]:
  """Every run, CowClip on exactly for the cowclip rule.

  With ``ablation``, the cowclip rule is also run without clipping (its
  hyperparameters, notably the unscaled embedding rate, without the clip).
  """
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


def run_label(rule: str, cowclip: bool) -> str:
  """How a (rule, CowClip) variant is named in tables and figures."""
  if cowclip == (rule == "cowclip"):
    return rule
  return f"{rule} ({'with' if cowclip else 'no'} clipping)"


# ------------------------------------------------------------- evaluation --


def study_eval_config(config: PipelineConfig) -> tfma.EvalConfig:
  """The Evaluator's config, cut to what the study reports.

  Same candidate model spec (serving and id-frequency signatures), metrics
  and options, but: no baseline and no change thresholds (a study run has no
  baseline model, and TFMA refuses change thresholds without one; the
  Evaluator rubber-stamps a first run instead), no plots, and only the
  overall and id-frequency slices. With the plots and the per-feature
  slices, TFMA took over 2 minutes per model on 60k eval examples here,
  longer than training.
  """
  eval_config = tfma.EvalConfig()
  eval_config.CopyFrom(create_eval_config(config))
  candidates = [m for m in eval_config.model_specs if not m.is_baseline]
  del eval_config.model_specs[:]
  eval_config.model_specs.extend(candidates)
  eval_config.model_specs[0].ClearField("name")  # The one model evaluated.
  kept = [s for s in eval_config.slicing_specs
          if list(s.feature_keys) in ([], [contract.ID_FREQUENCY])]
  del eval_config.slicing_specs[:]
  eval_config.slicing_specs.extend(kept)
  for spec in eval_config.metrics_specs:
    metrics = [m for m in spec.metrics if not m.class_name.endswith("Plot")]
    del spec.metrics[:]
    spec.metrics.extend(metrics)
    for metric in spec.metrics:
      for threshold in metric.per_slice_thresholds:
        threshold.threshold.ClearField("change_threshold")
  return eval_config


def _slice_name(slice_key) -> str:
  """'' for the overall slice, else 'feature=value'."""
  return ",".join(
      f"{feature}={value.decode() if isinstance(value, bytes) else value}"
      for feature, value in slice_key)


def tfma_metrics(serving_dir: str, eval_config: tfma.EvalConfig,
                 eval_pattern: str, output_path: str,
                 beam_args: Sequence[str]) -> Dict[str, Dict[str, float]]:
  """{slice name: {metric: value}} of one exported model, as the Evaluator
  computes them ('' is the overall slice)."""
  result = tfma.run_model_analysis(
      eval_shared_model=tfma.default_eval_shared_model(
          eval_saved_model_path=serving_dir, eval_config=eval_config),
      eval_config=eval_config, data_location=eval_pattern,
      file_format="tfrecords", output_path=output_path,
      pipeline_options=PipelineOptions(list(beam_args)))
  slices = model_metrics_by_slice(result.slicing_metrics)
  if "" not in slices:
    raise LookupError(f"TFMA wrote no overall slice to {output_path}")
  return slices


def model_metrics_by_slice(slicing_metrics) -> Dict[str, Dict[str, float]]:
  """{slice name: {metric: value}} of the model's output from TFMA's
  EvalResult.slicing_metrics (the logistic-regression output left out)."""
  slices = {}
  for slice_key, by_output in slicing_metrics:
    values = slices.setdefault(_slice_name(slice_key), {})
    # {output: {sub key: {metric: value}}}. The model's output is "" (the
    # model spec's prediction_key), the logistic regression's is not read.
    for metrics in by_output.get("", {}).values():
      for name, value in metrics.items():
        # TFMA writes its own metrics as {"doubleValue": x}, a custom
        # metric's float (components.lr_gate) as the number itself.
        if isinstance(value, (int, float)):
          values[name] = float(value)
        elif "doubleValue" in value:
          values[name] = value["doubleValue"]
  return slices


def metrics_row(slices: Mapping[str, Mapping[str, float]]
               ) -> Dict[str, float]:
  """The study.csv metric columns from tfma_metrics' slices.

  A bucket below the eval config's min_slice_size is not reported: NaN.
  """
  overall = slices[""]
  row = {"auc": overall.get("auc", math.nan),
         "logloss": overall.get("binary_crossentropy", math.nan),
         "mean_prediction": overall.get("mean_prediction", math.nan),
         "mean_label": overall.get("mean_label", math.nan),
         "calibration": overall.get("calibration", math.nan),
         "eval_examples": overall.get("example_count", math.nan)}
  for bucket in BUCKETS:
    values = slices.get(f"{contract.ID_FREQUENCY}={bucket}", {})
    row[f"auc_{bucket}"] = values.get("auc", math.nan)
    row[f"examples_{bucket}"] = values.get("example_count", math.nan)
  return row


# ---------------------------------------------------------------- training --


@dataclasses.dataclass(frozen=True)
class StudySetup:
  """What every run of one study shares."""
  config: PipelineConfig
  inputs: runner.TransformedInputs
  tf_transform_output: tft.TFTransformOutput
  train_files: Tuple[str, ...]
  baseline: Optional[keras.Model]  # None when every run is done.


def run_config(config: PipelineConfig, run: StudyRun) -> PipelineConfig:
  """The study's config with the run's model, batch size, rule and CowClip:
  its trainer_settings are what the Trainer would get for this run."""
  return dataclasses.replace(config, model=run.model,
                             batch_size=run.batch_size, scaling_rule=run.rule,
                             cowclip=run.cowclip)


def train_baseline(config: PipelineConfig, train_files: Sequence[str],
                   tf_transform_output: tft.TFTransformOutput) -> keras.Model:
  """The logistic-regression baseline every run's export serves beside the
  model (the Evaluator's config reads it), trained once, as run_fn does."""
  data = trainer.training_data(list(train_files), tf_transform_output,
                               config.spec.label, config.batch_size)
  baseline, _ = trainer.train(config.trainer_settings, data,
                              tf_transform_output,
                              architecture=models.LOGISTIC_REGRESSION,
                              verbose=0)
  return baseline


def train_and_evaluate(run: StudyRun, setup: StudySetup) -> Dict[str, object]:
  """Trains one run as run_fn does, evaluates it, returns its study.csv row."""
  config = run_config(setup.config, run)
  trainer_settings = config.trainer_settings
  data = trainer.training_data(list(setup.train_files),
                               setup.tf_transform_output, config.spec.label,
                               run.batch_size, seed=run.seed)
  hparams = trainer.training_hparams(trainer_settings, {},
                                     data.train_examples)["scaled"]
  row = {"run": run.key, "model": run.model, "rule": run.rule,
         "cowclip": run.cowclip, "batch_size": run.batch_size,
         "seed": run.seed, "epochs": config.epochs,
         "embedding_update": config.embedding_update,
         "dense_lr": hparams["dense_lr"], "embed_lr": hparams["embed_lr"],
         "l2": hparams["l2"], "train_examples": data.train_examples}
  start = time.perf_counter()
  try:
    model, trained = trainer.train(
        trainer_settings, data, setup.tf_transform_output, seed=run.seed,
        verbose=0,
        callbacks=[training.ThroughputLogger(run.batch_size)])
  except training.NonFiniteLossError as error:
    print(f"{run.key}: diverged: {error}", flush=True)
    row.update(train_seconds=time.perf_counter() - start, diverged=True)
    return row
  seconds = time.perf_counter() - start
  history = trained["history"]
  rates = history.get("examples_per_second")
  rate = statistics.mean(rates) if rates else (
      data.train_examples * trained["epochs_run"] / seconds)
  clipped = history.get("clipped_fraction")
  row.update(train_seconds=seconds, examples_per_second=rate,
             epochs_run=trained["epochs_run"],
             best_epoch=trained["best_epoch"],
             steps=trainer.steps_per_epoch(data.train_examples,
                                           run.batch_size) *
             trained["epochs_run"],
             epoch_seconds=data.train_examples / rate, diverged=False,
             final_train_loss=float(history["loss"][-1]),
             clipped_fraction=statistics.mean(clipped) if clipped else "")

  run_dir = os.path.join(config.output, "runs", run.key)
  serving_dir = os.path.join(run_dir, "serving")
  trainer.export_serving_model(model, setup.baseline,
                               setup.tf_transform_output, trainer_settings,
                               serving_dir)
  row.update(metrics_row(tfma_metrics(
      serving_dir, study_eval_config(config),
      runner.split_pattern(setup.inputs.raw_examples, "eval"),
      os.path.join(run_dir, "tfma"), config.beam_args)))
  return row


# --------------------------------------------------------------- study.csv --


def read_rows(path: str) -> List[Dict[str, object]]:
  """The rows of a study.csv (numbers and booleans parsed); [] if absent."""
  if not os.path.exists(path):
    return []
  rows = []
  with open(path, newline="") as f:
    reader = csv.DictReader(f)
    missing = set(COLUMNS) - set(reader.fieldnames or ())
    if missing:
      raise ValueError(f"{path}: not a study.csv of this version, missing "
                       f"columns {sorted(missing)}")
    for line_number, raw in enumerate(reader, start=2):
      row = {}
      for name in COLUMNS:
        value = raw[name]
        if name in _TEXT_COLUMNS:
          row[name] = value
        elif name in _BOOL_COLUMNS:
          if value not in ("True", "False"):
            raise ValueError(f"{path}:{line_number}: column {name!r} must "
                             f"be True or False, got {value!r}")
          row[name] = value == "True"
        else:
          try:
            row[name] = float(value) if value != "" else math.nan
          except ValueError:
            raise ValueError(f"{path}:{line_number}: column {name!r} is "
                             f"not a number: {value!r}") from None
      rows.append(row)
  return rows


def append_row(path: str, row: Mapping[str, object]) -> None:
  """Appends one run (header first if the file is new; NaN as empty, as
  read_rows reads it) and flushes it."""
  new = not os.path.exists(path)
  with open(path, "a", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=COLUMNS, restval="")
    if new:
      writer.writeheader()
    writer.writerow({k: "" if isinstance(v, float) and math.isnan(v) else v
                     for k, v in row.items()})


# ------------------------------------------------------------------ report --


def _group(rows: Iterable[Mapping[str, object]]
          ) -> Dict[Tuple[str, str, int], List[Mapping[str, object]]]:
  """Rows by (model, variant label, batch size), in first-seen order."""
  groups = {}
  for row in rows:
    key = (row["model"], run_label(row["rule"], row["cowclip"]),
           int(row["batch_size"]))
    groups.setdefault(key, []).append(row)
  return groups


def _mean_spread(values: Sequence[float]) -> Tuple[float, float]:
  """Mean and sample standard deviation (0 for a single value)."""
  mean = statistics.mean(values)
  return mean, statistics.stdev(values) if len(values) > 1 else 0.0


def _cell(rows: Sequence[Mapping[str, object]], column: str,
          digits: int = 4) -> str:
  """'mean ± std' over the finished seeds; diverged seeds are named."""
  values = [r[column] for r in rows
            if not r["diverged"] and not math.isnan(r[column])]
  diverged = sum(bool(r["diverged"]) for r in rows)
  if not values:
    return "diverged" if diverged else "n/a"
  mean, spread = _mean_spread(values)
  text = f"{mean:,.{digits}f}" + (
      f" ± {spread:,.{digits}f}" if len(values) > 1 else "")
  return text + (f" ({diverged}/{len(rows)} diverged)" if diverged else "")


def _table(groups, model: str, column: str, digits: int) -> List[str]:
  labels = list(dict.fromkeys(l for m, l, _ in groups if m == model))
  batches = sorted({b for m, _, b in groups if m == model})
  lines = ["| rule | " + " | ".join(str(b) for b in batches) + " |",
           "|---" * (len(batches) + 1) + "|"]
  for label in labels:
    cells = [_cell(groups[(model, label, b)], column, digits)
             if (model, label, b) in groups else "" for b in batches]
    lines.append(f"| {label} | " + " | ".join(cells) + " |")
  return lines


def markdown_report(rows: Sequence[Mapping[str, object]],
                    header: Sequence[str]) -> str:
  """study.md: AUC, log loss, calibration, speed and bucket AUC tables."""
  groups = _group(rows)
  lines = ["# Batch-size scaling study", "", *header, ""]
  for model in dict.fromkeys(m for m, _, _ in groups):
    for title, column, digits in (
        ("Eval AUC", "auc", 4), ("Eval log loss", "logloss", 4),
        ("Calibration (mean prediction / mean label)", "calibration", 3),
        ("Share of embedding-row updates CowClip clipped (mean over "
         "epochs)", "clipped_fraction", 4),
        ("Training examples/second", "examples_per_second", 0),
        ("Seconds per epoch (compile excluded)", "epoch_seconds", 1),
        ("Training wall seconds (compile included)", "train_seconds", 1)):
      lines += [f"## {model}: {title}", "",
                *_table(groups, model, column, digits), ""]
    batches = sorted({b for m, _, b in groups if m == model})
    for batch in sorted({batches[0], batches[-1]}):
      lines += [f"## {model}: eval AUC by id frequency, batch {batch}", "",
                "| rule | " + " | ".join(BUCKETS) + " |",
                "|---" * (len(BUCKETS) + 1) + "|"]
      for (m, label, b), members in groups.items():
        if m == model and b == batch:
          cells = [_cell(members, f"auc_{name}") for name in BUCKETS]
          lines.append(f"| {label} | " + " | ".join(cells) + " |")
      finished = [r for (m, _, b), members in groups.items()
                  if m == model and b == batch for r in members
                  if not r["diverged"]]
      if finished:
        counts = [finished[0][f"examples_{name}"] for name in BUCKETS]
        lines += ["", "Eval examples per bucket: " + ", ".join(
            f"{name} {'< min slice size' if math.isnan(n) else int(n)}"
            for name, n in zip(BUCKETS, counts))]
      lines.append("")
  return "\n".join(lines)


def _series(groups, model: str, column: str):
  """{label: (batch sizes, means, stds)} of the finished runs."""
  series = {}
  for (m, label, batch), members in groups.items():
    values = [r[column] for r in members
              if not r["diverged"] and not math.isnan(r[column])]
    if m == model and values:
      mean, spread = _mean_spread(values)
      series.setdefault(label, []).append((batch, mean, spread))
  return {label: tuple(zip(*sorted(points)))
          for label, points in series.items()}


def write_figures(rows: Sequence[Mapping[str, object]], output: str
                 ) -> List[str]:
  """AUC and epoch time vs batch size, and bucket AUC at both batch ends."""
  groups = _group(rows)
  model_names = list(dict.fromkeys(m for m, _, _ in groups))
  paths = []
  for name, column, ylabel in (
      ("auc_vs_batch.png", "auc", "eval AUC"),
      ("epoch_time_vs_batch.png", "epoch_seconds", "seconds per epoch")):
    figure = Figure(figsize=(6 * len(model_names), 4.5))
    for i, model in enumerate(model_names):
      axes = figure.add_subplot(1, len(model_names), i + 1)
      for label, (batches, means, spreads) in _series(
          groups, model, column).items():
        axes.errorbar(batches, means, yerr=spreads, marker="o", capsize=3,
                      label=label)
      axes.set_xscale("log", base=2)
      axes.set_xlabel("batch size")
      axes.set_ylabel(ylabel)
      axes.set_title(model)
      axes.grid(True, alpha=0.3)
      axes.legend(fontsize="small")
    figure.tight_layout()
    paths.append(os.path.join(output, name))
    figure.savefig(paths[-1], dpi=110)

  figure = Figure(figsize=(12, 4.5 * len(model_names)))
  for i, model in enumerate(model_names):
    batches = sorted({b for m, _, b in groups if m == model})
    for j, batch in enumerate(sorted({batches[0], batches[-1]})):
      axes = figure.add_subplot(len(model_names), 2, 2 * i + j + 1)
      labels = [l for m, l, b in groups if m == model and b == batch]
      width = 0.8 / max(len(labels), 1)
      for k, label in enumerate(labels):
        means = []
        for bucket in BUCKETS:
          values = [r[f"auc_{bucket}"] for r in groups[(model, label, batch)]
                    if not r["diverged"] and not math.isnan(r[f"auc_{bucket}"])]
          means.append(statistics.mean(values) if values else math.nan)
        axes.bar(np.arange(len(BUCKETS)) + k * width, means, width,
                 label=label)
      axes.set_xticks(np.arange(len(BUCKETS)) + 0.4 - width / 2)
      axes.set_xticklabels(BUCKETS)
      finite = [v for bars in axes.containers for v in bars.datavalues
                if not math.isnan(v)]
      if finite:
        axes.set_ylim(max(0.0, min(finite) - 0.02),
                      min(1.0, max(finite) + 0.02))
      axes.set_ylabel("eval AUC")
      axes.set_title(f"{model}, batch {batch}: AUC by id frequency")
      axes.legend(fontsize="small")
  figure.tight_layout()
  paths.append(os.path.join(output, "auc_by_frequency.png"))
  figure.savefig(paths[-1], dpi=110)
  return paths


# -------------------------------------------------------------------- main --


def _training_signature(row: Mapping[str, object]) -> Tuple:
  return tuple(row[k] for k in ("model", "batch_size", "seed", "cowclip",
                                "epochs", "embedding_update", "dense_lr",
                                "embed_lr", "l2"))


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
  hparams = trainer.training_hparams(
      run_config(config, run).trainer_settings, {},
      int(float(rows[0]["train_examples"])))["scaled"]
  wanted = _training_signature({
      "model": run.model, "batch_size": run.batch_size, "seed": run.seed,
      "cowclip": run.cowclip, "epochs": config.epochs,
      "embedding_update": config.embedding_update, **hparams})
  for row in rows:
    if _training_signature(row) == wanted:
      return {**row, "run": run.key, "rule": run.rule}
  return None


def run_study(config: PipelineConfig, runs: Sequence[StudyRun],
              header: Sequence[str] = ()) -> List[Dict[str, object]]:
  """Transform once, train/evaluate the runs not yet in study.csv, report.

  Args:
    config: the pipeline config every run starts from (epochs, base
      hyperparameters, model options, embedding update, frequency slice);
      its output DIR holds the pipeline root, study.csv, study.md, the
      figures and runs/<run>/ (serving model, TFMA output).
    runs: from study_runs.
    header: lines put at the top of study.md (the settings).

  Returns:
    All rows of study.csv.
  """
  csv_path = os.path.join(config.output, "study.csv")
  rows = read_rows(csv_path)
  done = {r["run"] for r in rows}
  todo = [r for r in runs if r.key not in done]
  print(f"study: {len(runs) - len(todo)} of {len(runs)} runs already in "
        f"{csv_path}", flush=True)
  inputs = runner.transform_once(config)
  train_files = runner.split_files(inputs.transformed_examples, "train")
  tf_transform_output = tft.TFTransformOutput(inputs.transform_graph)
  setup = StudySetup(
      config=config, inputs=inputs, tf_transform_output=tf_transform_output,
      train_files=tuple(train_files),
      baseline=train_baseline(config, train_files, tf_transform_output)
      if todo else None)
  for i, run in enumerate(todo, start=1):
    row = same_training(config, run, rows)
    if row is None:
      print(f"study: run {i}/{len(todo)}: {run.key}", flush=True)
      row = train_and_evaluate(run, setup)
    else:
      print(f"study: run {i}/{len(todo)}: {run.key} trains exactly as a "
            "finished run: its results are reused", flush=True)
    append_row(csv_path, row)
    print(f"study: {run.key}: auc {row.get('auc', math.nan):.4f} "
          f"logloss {row.get('logloss', math.nan):.4f} "
          f"{row['train_seconds']:.1f} s", flush=True)
    rows = read_rows(csv_path)  # Parsed as a resumed study would see them.
    write_report(rows, config.output, header)
  if not todo:
    write_report(rows, config.output, header)
  return rows


def write_report(rows: Sequence[Mapping[str, object]], output: str,
                 header: Sequence[str]) -> None:
  """study.md and the figures from the rows (nothing if there are none)."""
  if not rows:
    return
  with open(os.path.join(output, "study.md"), "w") as f:
    f.write(markdown_report(rows, header) + "\n")
  write_figures(rows, output)


def add_arguments(parser: argparse.ArgumentParser) -> None:
  """The `study` subcommand's flags."""
  flags.add_input_arguments(parser, "DIR for the pipeline, study.csv/md and "
                          "figures (re-use it to resume)")
  parser.add_argument("--batch-sizes", type=benchmark.parse_int_list,
                      default=list(DEFAULT_BATCH_SIZES))
  parser.add_argument("--rules", type=_parse_rules,
                      default=list(DEFAULT_RULES),
                      help=f"comma-separated, from {','.join(scaling.RULES)}")
  parser.add_argument("--models", type=_parse_models,
                      default=[settings.DEFAULT_MODEL],
                      help=f"comma-separated, from {','.join(models.MODELS)}")
  parser.add_argument("--epochs", type=int, default=1)
  parser.add_argument("--seeds", type=benchmark.parse_int_list,
                      default=[1234])
  parser.add_argument("--ablation", action="store_true",
                      help="also run the cowclip rule without clipping")
  parser.add_argument("--embedding-update",
                      default=settings.DEFAULT_EMBEDDING_UPDATE,
                      choices=settings.EMBEDDING_UPDATES)
  parser.add_argument("--hidden-units", type=benchmark.parse_int_list,
                      default=None, help="DNN layer sizes (default: the "
                      "model's)")
  parser.add_argument("--frequency-thresholds", type=benchmark.parse_int_list,
                      default=None, help="rare,frequent typical id counts "
                      "of the id-frequency slice (default: the pipeline's)")
  parser.add_argument("--min-frequency", type=int, default=None,
                      help="vocabulary frequency threshold (default: per "
                      "dataset)")
  parser.add_argument("--eval-fraction", type=float, default=None)
  flags.add_hparam_arguments(parser, "each rule maps it")


def _parse_choices(text: str, choices: Sequence[str], what: str) -> List[str]:
  values = [v.strip() for v in text.split(",") if v.strip()]
  unknown = [v for v in values if v not in choices]
  if not values or unknown:
    raise argparse.ArgumentTypeError(
        f"unknown {what} {unknown or text!r}; choose from {','.join(choices)}")
  return values


def _parse_rules(text: str) -> List[str]:
  return _parse_choices(text, scaling.RULES, "scaling rule")


def _parse_models(text: str) -> List[str]:
  return _parse_choices(text, models.MODELS, "model")


def main(args: argparse.Namespace) -> int:
  """Runs the study from parsed flags."""
  overrides = flags.hparam_overrides(args)
  extra = {}
  if args.hidden_units:
    extra["model_options"] = {"hidden_units": tuple(args.hidden_units)}
  if args.frequency_thresholds:
    extra["frequency_thresholds"] = tuple(args.frequency_thresholds)
  config = PipelineConfig(dataset=args.dataset, data=args.data,
                          output=args.output, epochs=args.epochs,
                          hparams=overrides, min_frequency=args.min_frequency,
                          eval_fraction=args.eval_fraction,
                          embedding_update=args.embedding_update, **extra)
  runs = study_runs(args.models, args.rules, args.batch_sizes, args.seeds,
                    args.ablation)
  rare, frequent = config.frequency_thresholds
  header = [f"Dataset {args.dataset} from `{args.data}`; models "
            f"{args.models}; rules {args.rules}; batch sizes "
            f"{args.batch_sizes}; seeds {args.seeds}; {args.epochs} "
            f"epoch(s); ablation {args.ablation}.",
            f"Base hyperparameters at batch {config.spec.base_batch_size}: "
            f"{config.base_hparams}",
            f"Model options: {config.trainer_settings.model_options}; "
            f"embedding update {config.embedding_update}.",
            "Id-frequency buckets: the pipeline's id_frequency slice "
            "(geometric mean over fields of the training count of the "
            f"example's ids, OOV ids 0): < {rare} rare, < {frequent} medium, "
            "else frequent."]
  rows = run_study(config, runs, header)
  print(f"study: {len(rows)} runs in {os.path.join(args.output, 'study.csv')}"
        f"; report {os.path.join(args.output, 'study.md')}")
  return 0
