"""The tables of docs/factory_floor.md, from the studies' study.csv files.

Usage (from the repository root):
  PYTHONPATH=. python docs/scripts/factory_floor_tables.py REFERENCE_DIR NAME=DIR ...

REFERENCE_DIR is the Adam study; each NAME=DIR another study of the same
data, epochs and seeds (Shampoo, a rank-loss weight, distillation). Prints,
per batch size and seed, each run's eval metrics and best epoch, the gap to
the reference run of the same batch and seed, and the training steps each
run took to reach the reference's best validation log loss (whole epochs:
validation runs after each; in brackets, the straight line between two
epochs' losses; for a distillation run, its replica 0's), then the
distillation columns.
"""

import os
import statistics
import sys

from commands.experiments import study_results


def _rows(directory):
  return {(int(r["batch_size"]), int(r["seed"])): r for r in
          study_results.read_rows(os.path.join(directory, "study.csv"))}


def _steps(row, target):
  """Whole epochs' steps to reach `target`, and between the epoch before
  and that one, where the straight line between their losses crosses it."""
  if target is None:
    return "not recorded"
  steps = study_results.steps_to_logloss(row, target)
  if steps is None:
    return "not reached"
  losses = study_results.epoch_values(row, "validation_logloss_by_epoch")
  per_epoch = row["steps"] / row["epochs_run"]
  epoch = next(e for e, loss in enumerate(losses, 1) if loss <= target)
  if epoch == 1:
    return str(steps)
  before, after = losses[epoch - 2], losses[epoch - 1]
  crossing = (epoch - 1 + (before - target) / (before - after)) * per_epoch
  return f"{steps} (~{crossing:.0f})"


def main(reference_dir, others):
  reference = _rows(reference_dir)
  studies = {"adam": reference, **{name: _rows(d) for name, d in others}}
  print("| run | batch | seed | AUC | vs adam | log loss | calibration | "
        "best / run epochs | validation log loss by epoch | steps to adam's "
        "best validation log loss (adam's own) | train examples/s |")
  print("|---|---|---|---|---|---|---|---|---|---|---|")
  gaps = {}
  for (batch, seed), ref in sorted(reference.items()):
    losses = study_results.epoch_values(ref, "validation_logloss_by_epoch")
    target = min(losses) if losses else None
    for name, rows in studies.items():
      row = rows.get((batch, seed))
      if row is None:
        continue
      gap = row["auc"] - ref["auc"]
      gaps.setdefault((name, batch), []).append(gap)
      by_epoch = " ".join(
          f"{v:.4f}" for v in study_results.epoch_values(
              row, "validation_logloss_by_epoch"))
      print(f"| {name} | {batch} | {seed} | {row['auc']:.4f} | "
            f"{gap:+.4f} | {row['logloss']:.4f} | {row['calibration']:.4f} |"
            f" {row['best_epoch']:.0f} / {row['epochs_run']:.0f} | {by_epoch}"
            f" | {_steps(row, target)} | {row['examples_per_second']:,.0f} |")
  distilled = [(name, key, row) for name, rows in studies.items()
               for key, row in sorted(rows.items())
               if row["student_auc"] == row["student_auc"]]  # not NaN
  if distilled:
    print()
    print("Distillation, validation slice (the served student's eval AUC is "
          "above):")
    print()
    print("| run | batch | seed | replica 0 AUC | ensemble AUC | student AUC |"
          " student PD vs ensemble |")
    print("|---|---|---|---|---|---|---|")
    for name, (batch, seed), row in distilled:
      print(f"| {name} | {batch} | {seed} | {row['replica_auc']:.4f} | "
            f"{row['ensemble_auc']:.4f} | {row['student_auc']:.4f} | "
            f"{row['student_pd_vs_ensemble']:.4f} |")
  print()
  print("| run | batch | AUC gap to adam, mean over seeds | per seed |")
  print("|---|---|---|---|")
  for (name, batch), values in sorted(gaps.items()):
    if name != "adam":
      print(f"| {name} | {batch} | {statistics.mean(values):+.4f} | "
            + " ".join(f"{v:+.4f}" for v in values) + " |")


if __name__ == "__main__":
  if len(sys.argv) < 3:
    raise SystemExit(__doc__)
  main(sys.argv[1], [a.split("=", 1) for a in sys.argv[2:]])
