"""The study's results: study.csv rows, study.md tables and the figures.

Every finished run is appended to study.csv at once (so a restart skips it);
study.md and the PNG figures are rewritten from the whole CSV.
"""

import csv
import math
import os
import statistics
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from matplotlib.figure import Figure
import numpy as np
from scipy import stats as scipy_stats

from commands.experiments.study_evaluation import BUCKETS

# With --replicas: how many, what was served (push), the PD between them
# overall and per id-frequency bucket, and each one's AUC (space-separated).
_REPLICA_COLUMNS = ("replicas", "push", "replica_pd") + tuple(
    f"replica_pd_{b}" for b in BUCKETS) + ("replica_aucs",)
# The last epoch's model (the study keeps the best one; with early
# stopping they differ when training ran past its best epoch).
_LAST_EPOCH_COLUMNS = ("last_auc", "last_logloss", "last_calibration")
# The logistic-regression baseline served beside every run.
_BASELINE_COLUMNS = ("lr_auc", "lr_logloss")
# What run_fn would serve (served_model.choose_served: "model" or "lr"), the
# paired validation AUC difference (model minus baseline) and 95% interval
# it chose by, and the served one's eval AUC.
_SERVED_COLUMNS = ("served", "served_auc", "validation_auc_difference",
                   "validation_auc_low", "validation_auc_high",
                   "validation_rows")
# With --distill: the served student, the replicas' ensemble and replica 0
# on the validation slice, and the student's PD against the ensemble
# (trainer.compare_with_ensemble).
DISTILLATION_COLUMNS = ("student_auc", "ensemble_auc", "replica_auc",
                        "student_pd_vs_ensemble")
# The validation slice's log loss and AUC after each epoch run (replica 0's
# with --replicas; space-separated): what steps_to_logloss reads.
_EPOCH_COLUMNS = ("validation_logloss_by_epoch", "validation_auc_by_epoch")
# The training speed of each epoch (callbacks.ThroughputLogger), and its
# mean over the process's CPU seconds: a machine shared with other work
# stretches wall time more than the step's CPU time, so the CPU rate is
# what compares with the benchmark's cpu_seconds_per_step on a busy machine
# (docs/benchmark.md).
_SPEED_COLUMNS = ("examples_per_second_by_epoch", "examples_per_cpu_second")
# Where a row comes from, so rows kept in git from several machines can be
# told apart: the data (study_provenance.data_fingerprint: a resumed study refuses a
# row of other data), the CPU (model and the flags that set its speed) and
# the code (git commit).
PROVENANCE_COLUMNS = ("data_fingerprint", "machine", "commit")
COLUMNS = (
    ("run", "model", "rule", "cowclip", "batch_size", "seed", "epochs",
     "epochs_run", "best_epoch",
     "embedding_update", "dense_lr", "embed_lr", "l2", "train_examples",
     "eval_examples", "steps", "train_seconds", "epoch_seconds",
     "examples_per_second", "diverged", "final_train_loss", "clipped_fraction",
     "auc", "logloss",
     "mean_prediction", "mean_label", "calibration") +
    tuple(f"{kind}_{b}" for b in BUCKETS for kind in ("auc", "examples")) +
    ("bias_constraints",) + _REPLICA_COLUMNS + _LAST_EPOCH_COLUMNS +
    _BASELINE_COLUMNS + _SERVED_COLUMNS + DISTILLATION_COLUMNS +
    _EPOCH_COLUMNS + _SPEED_COLUMNS + PROVENANCE_COLUMNS)
# bias_constraints: the constrained slices of a run trained with the bias
# constraints, since removed (docs/production_calibration.md). New rows
# leave it empty; it stays so that studies written before stay appendable
# and a constrained row never stands in for a new run (same_training).
# Columns a study.csv written before they existed may lack (read as "").
_OPTIONAL_COLUMNS = (("bias_constraints",) + _REPLICA_COLUMNS +
                     _LAST_EPOCH_COLUMNS + _BASELINE_COLUMNS +
                     _SERVED_COLUMNS + DISTILLATION_COLUMNS + _EPOCH_COLUMNS +
                     _SPEED_COLUMNS + PROVENANCE_COLUMNS)
_TEXT_COLUMNS = ("run", "model", "rule", "embedding_update",
                 "bias_constraints", "push", "replica_aucs", "served") + (
                     _EPOCH_COLUMNS + ("examples_per_second_by_epoch",) +
                     PROVENANCE_COLUMNS)
_BOOL_COLUMNS = ("cowclip", "diverged")


def run_label(rule: str, cowclip: bool) -> str:
  """How a (rule, CowClip) variant is named in tables and figures."""
  if cowclip == (rule == "cowclip"):
    return rule
  return f"{rule} ({'with' if cowclip else 'no'} clipping)"


def read_rows(path: str) -> List[Dict[str, object]]:
  """The rows of a study.csv (numbers and booleans parsed); [] if absent."""
  if not os.path.exists(path):
    return []
  rows = []
  with open(path, newline="") as f:
    reader = csv.DictReader(f)
    missing = set(COLUMNS) - set(reader.fieldnames or ()) - set(
        _OPTIONAL_COLUMNS)
    if missing:
      raise ValueError(f"{path}: not a study.csv of this version, missing "
                       f"columns {sorted(missing)}")
    for line_number, raw in enumerate(reader, start=2):
      row = {}
      for name in COLUMNS:
        value = raw.get(name, "")
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


def epoch_values(row: Mapping[str, object], column: str) -> List[float]:
  """A per-epoch column (_EPOCH_COLUMNS) as numbers, epoch 1 first."""
  return [float(v) for v in str(row.get(column) or "").split()]


def steps_to_logloss(row: Mapping[str, object], target: float
                     ) -> Optional[int]:
  """The training steps after which the run's validation log loss was first
  at or below `target` (a whole number of epochs: validation runs after
  each one); None if it never was."""
  losses = epoch_values(row, "validation_logloss_by_epoch")
  steps_per_epoch = row["steps"] / row["epochs_run"]
  for epoch, loss in enumerate(losses, start=1):
    if loss <= target:
      return round(epoch * steps_per_epoch)
  return None


def append_row(path: str, row: Mapping[str, object]) -> None:
  """Appends one run (header first if the file is new; NaN as empty, as
  read_rows reads it) and flushes it. A study.csv written before an
  optional column existed is first rewritten with it (empty), so the new
  row's value is not written under another column's name."""
  if os.path.exists(path):
    _add_missing_columns(path)
  new = not os.path.exists(path)
  with open(path, "a", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=COLUMNS, restval="")
    if new:
      writer.writeheader()
    writer.writerow({k: "" if isinstance(v, float) and math.isnan(v) else v
                     for k, v in row.items()})


def _add_missing_columns(path: str) -> None:
  """Rewrites `path` with the COLUMNS header when it lacks optional ones
  (atomically: a crash leaves the old file)."""
  with open(path, newline="") as f:
    reader = csv.DictReader(f)
    if tuple(reader.fieldnames or ()) == COLUMNS:
      return
    if not set(reader.fieldnames or ()) <= set(COLUMNS):
      return  # Not ours to rewrite; read_rows names what is wrong.
    rows = list(reader)
  partial = path + ".partial"
  with open(partial, "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=COLUMNS, restval="")
    writer.writeheader()
    writer.writerows(rows)
  os.replace(partial, path)


def _group(rows: Iterable[Mapping[str, object]]
          ) -> Dict[Tuple[str, str, int], List[Mapping[str, object]]]:
  """Rows by (model, variant label, batch size), in first-seen order."""
  groups = {}
  for row in rows:
    key = (row["model"], run_label(row["rule"], row["cowclip"]),
           int(row["batch_size"]))
    groups.setdefault(key, []).append(row)
  return groups


def _finished(rows: Iterable[Mapping[str, object]], column: str
             ) -> List[float]:
  """`column` of the rows that finished (not diverged, not NaN)."""
  return [r[column] for r in rows
          if not r["diverged"] and not math.isnan(r[column])]


def _mean_spread(values: Sequence[float]) -> Tuple[float, float]:
  """Mean and sample standard deviation (0 for a single value)."""
  mean = statistics.mean(values)
  return mean, statistics.stdev(values) if len(values) > 1 else 0.0


def _cell(rows: Sequence[Mapping[str, object]], column: str,
          digits: int = 4) -> str:
  """'mean ± std' over the finished seeds; diverged seeds are named."""
  values = _finished(rows, column)
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


# The confidence of the seed-to-seed intervals against the base run.
SEED_CONFIDENCE = 0.95


def seed_difference(values: Sequence[float], base: Sequence[float]
                   ) -> Tuple[float, float, float]:
  """mean(values) - mean(base) and its two-sided SEED_CONFIDENCE interval
  over the seeds (Welch's t: each side's own seed-to-seed variance); the
  interval is NaN where a side has one seed (no spread to test against).
  Different seeds reorder and reinitialise the training, so this is the
  spread a rule's result would show on a rerun, which the paired test on
  one seed's eval rows (docs/scripts/paired_runs.py) does not hold."""
  difference = statistics.mean(values) - statistics.mean(base)
  if len(values) < 2 or len(base) < 2:
    return difference, math.nan, math.nan
  shares = [statistics.variance(v) / len(v) for v in (values, base)]
  error = math.sqrt(sum(shares))
  if error == 0:
    return difference, difference, difference
  freedom = error**4 / sum(share**2 / (len(v) - 1)
                           for share, v in zip(shares, (values, base)))
  half = scipy_stats.t.ppf(0.5 + SEED_CONFIDENCE / 2, freedom) * error
  return difference, difference - half, difference + half


def _against_base(groups, model: str, column: str) -> List[str]:
  """The table of each run's mean minus the base run's (`none` at the
  smallest batch), with seed_difference's interval and the seed counts;
  [] without a base run."""
  batches = sorted({b for m, _, b in groups if m == model})
  base_key = (model, run_label("none", False), batches[0])
  base = _finished(groups.get(base_key, []), column)
  if not base:
    return []
  labels = list(dict.fromkeys(l for m, l, _ in groups if m == model))
  lines = ["| rule | " + " | ".join(str(b) for b in batches) + " |",
           "|---" * (len(batches) + 1) + "|"]
  for label in labels:
    cells = []
    for batch in batches:
      values = _finished(groups.get((model, label, batch), []), column)
      if not values or (model, label, batch) == base_key:
        cells.append("")
        continue
      difference, low, high = seed_difference(values, base)
      interval = ("" if math.isnan(low) else
                  f" [{low:+.4f}, {high:+.4f}]")
      cells.append(f"{difference:+.4f}{interval} ({len(values)} vs "
                   f"{len(base)})")
    lines.append(f"| {label} | " + " | ".join(cells) + " |")
  return lines


def _has_replica_pd(rows: Iterable[Mapping[str, object]]) -> bool:
  """Whether any finished run measured PD between replicas."""
  return any(not math.isnan(r["replica_pd"]) for r in rows)


def _replica_auc_mean(row: Mapping[str, object]) -> float:
  """The mean of a row's replica AUCs (NaN without replicas)."""
  aucs = [float(v) for v in str(row.get("replica_aucs") or "").split()]
  return statistics.mean(aucs) if aucs else math.nan


def markdown_report(rows: Sequence[Mapping[str, object]],
                    header: Sequence[str]) -> str:
  """study.md: the runs it holds, then AUC, log loss, calibration, speed
  and bucket AUC tables; with replicas, their PD (overall and by bucket)
  and mean AUC. `header`: the study's settings."""
  held = ("Runs in study.csv: models "
          + ", ".join(dict.fromkeys(str(r["model"]) for r in rows))
          + "; rules " + ", ".join(dict.fromkeys(
              run_label(r["rule"], r["cowclip"]) for r in rows))
          + "; batch sizes " + ", ".join(
              str(b) for b in sorted({int(r["batch_size"]) for r in rows}))
          + "; seeds " + ", ".join(
              str(s) for s in sorted({int(r["seed"]) for r in rows})) + ".")
  rows = [{**r, "replica_auc_mean": _replica_auc_mean(r)} for r in rows]
  groups = _group(rows)
  lines = ["# Batch-size scaling study", "", *header, held, ""]
  for model in dict.fromkeys(m for m, _, _ in groups):
    batches = sorted({b for m, _, b in groups if m == model})
    replica_tables = (
        ("Prediction Difference between the replicas (PD, Anil et al. "
         "2022, section 5)", "replica_pd", 4),
        ("Mean AUC of the replicas (the served model's: Eval AUC)",
         "replica_auc_mean", 4)) if _has_replica_pd(
             r for (m, _, _), members in groups.items() if m == model
             for r in members) else ()
    for title, column, digits in (
        ("Eval AUC (best epoch: the kept model)", "auc", 4),
        ("Eval AUC, last epoch", "last_auc", 4),
        ("Eval log loss (best epoch)", "logloss", 4),
        ("Eval log loss, last epoch", "last_logloss", 4),
        ("Epochs run", "epochs_run", 0), ("Best epoch", "best_epoch", 0),
        ("Calibration (mean prediction / mean label)", "calibration", 3),
        ("Share of embedding-row updates CowClip clipped (mean over "
         "epochs)", "clipped_fraction", 4),
        ("Training examples/second", "examples_per_second", 0),
        ("Seconds per epoch (compile excluded)", "epoch_seconds", 1),
        ("Training wall seconds (compile included)", "train_seconds", 1),
        *replica_tables):
      lines += [f"## {model}: {title}", "",
                *_table(groups, model, column, digits), ""]
      against = _against_base(groups, model, column) if column in (
          "auc", "logloss") else []
      if against:
        lines += [f"## {model}: {title}, minus the base run's (`none` at "
                  f"batch {batches[0]}; "
                  f"{SEED_CONFIDENCE:.0%} interval over seeds, Welch's t; "
                  "seeds of each side)", "", *against, ""]
    for batch in sorted({batches[0], batches[-1]}):
      for title, column in (("eval AUC", "auc"), ("PD between replicas",
                                                   "replica_pd")):
        if column == "replica_pd" and not replica_tables:
          continue
        lines += [f"## {model}: {title} by id frequency, batch {batch}", "",
                  "| rule | " + " | ".join(BUCKETS) + " |",
                  "|---" * (len(BUCKETS) + 1) + "|"]
        for (m, label, b), members in groups.items():
          if m == model and b == batch:
            cells = [_cell(members, f"{column}_{name}") for name in BUCKETS]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        lines.append("")
      finished = [r for (m, _, b), members in groups.items()
                  if m == model and b == batch for r in members
                  if not r["diverged"]]
      if finished:
        counts = [finished[0][f"examples_{name}"] for name in BUCKETS]
        lines += ["Eval examples per bucket: " + ", ".join(
            f"{name} {'< min slice size' if math.isnan(n) else int(n)}"
            for name, n in zip(BUCKETS, counts)), ""]
  return "\n".join(lines)


def _series(groups, model: str, column: str):
  """{label: (batch sizes, means, stds)} of the finished runs."""
  series = {}
  for (m, label, batch), members in groups.items():
    values = _finished(members, column)
    if m == model and values:
      mean, spread = _mean_spread(values)
      series.setdefault(label, []).append((batch, mean, spread))
  return {label: tuple(zip(*sorted(points)))
          for label, points in series.items()}


def write_figures(rows: Sequence[Mapping[str, object]], output: str
                 ) -> List[str]:
  """AUC and epoch time vs batch size (PD between replicas too when
  measured), and bucket AUC at both batch ends."""
  groups = _group(rows)
  model_names = list(dict.fromkeys(m for m, _, _ in groups))
  paths = []
  pd_figure = (("pd_vs_batch.png", "replica_pd", "PD between replicas"),
               ) if _has_replica_pd(rows) else ()
  for name, column, ylabel in (
      ("auc_vs_batch.png", "auc", "eval AUC"),
      ("epoch_time_vs_batch.png", "epoch_seconds", "seconds per epoch"),
      *pd_figure):
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
