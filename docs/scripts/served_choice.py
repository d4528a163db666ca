"""docs/gate.md, "The served model": which model run_fn serves, measured.

run: per dataset and training-row count, generates the data (seeded, the
training rows plus the dataset's eval share) and runs `study` with the
default trainer at its seeds: every run's study.csv row holds the DeepFM's
and the logistic regression's eval AUC, what served_model.choose_served serves
(the `served` column) and the paired validation difference it chose by.
Each study's results are committed under docs/served_choice/ as they
finish, so a stopped queue resumes where it was (`study` skips the rows
it has).

table: the markdown table of docs/gate.md from those study.csv files: per
study, the served model's mean eval AUC under choose_served's rule and
under the two it was chosen against, each recomputed from every row's
recorded validation difference.

  python docs/scripts/served_choice.py [--results DIR] run ROOT criteo \
      5000,20000,100000 --seeds 1,2,3,4,5 -- --batch-sizes 1024 --epochs 10
  python docs/scripts/served_choice.py table
ROOT holds the generated data and the pipelines (scratch).
"""

import argparse
import csv
import math
import os
import statistics
import subprocess
import sys
import time

from trainer_module import features
from trainer_module import paired_statistics

RESULTS = os.path.join("docs", "served_choice")
# What is committed of each study: not the kept baseline (tens of MB at
# millions of rows; refitted, deterministically, where it is missing).
COMMITTED = ("study.csv", "study.md", "study_settings.json")
# The criterion of issue #60: the served model's mean eval AUC at least
# the better model's mean minus this.
TOLERANCE = 0.001


def _results(results: str, dataset: str, train_rows: int) -> str:
  return os.path.join(results, f"{dataset}-{train_rows}")


def run(root: str, results_root: str, dataset: str, sizes, seeds: str,
        study_flags) -> None:
  eval_fraction = features.DATASETS[dataset].eval_fraction
  for train_rows in sizes:
    rows = round(train_rows / (1 - eval_fraction))
    data = os.path.join(root, "data", f"{dataset}-{train_rows}", "train.txt")
    if not os.path.exists(data):
      subprocess.run([sys.executable, "-m", "pipeline", "generate",
                      "--format", dataset, "--rows", str(rows), "--seed", "1",
                      "--out", data], check=True)
    results = _results(results_root, dataset, train_rows)
    subprocess.run([sys.executable, "-m", "pipeline", "study", "--dataset",
                    dataset, "--data", data, "--output",
                    os.path.join(root, "pipelines", f"{dataset}-{train_rows}"),
                    "--results", results, "--rules", "cowclip",
                    "--seeds", seeds, *study_flags], check=True)
    _commit(results, [name for name in COMMITTED
                      if os.path.exists(os.path.join(results, name))],
            f"docs/served_choice: {dataset} at {train_rows:,} training "
            f"rows, seeds {seeds}")


def _commit(results: str, names, message: str) -> None:
  """Commits `names` in `results` alone, retried while another git command
  (a second queue, a developer) holds the index."""
  git = ["git", "-C", results]
  for _ in range(20):
    subprocess.run([*git, "add", "--", *names])
    subprocess.run([*git, "commit", "--quiet", "-m", message, "--", *names])
    # Done when nothing of `names` is left staged or changed.
    if subprocess.run([*git, "diff", "HEAD", "--quiet", "--", *names]
                     ).returncode == 0:
      return
    time.sleep(5)
  print(f"could not commit {results}", file=sys.stderr)


def _mean(values):
  values = [v for v in values if isinstance(v, float) and math.isfinite(v)]
  return statistics.mean(values) if values else math.nan


def _rows(path: str):
  with open(path, newline="") as f:
    for row in csv.DictReader(f):
      if row.get("validation_auc_difference"):
        yield {k: float(row[k]) for k in (
            "auc", "lr_auc", "validation_auc_difference", "validation_auc_low",
            "validation_auc_high", "validation_rows", "batch_size")}


def _difference(row) -> paired_statistics.Estimate:
  """The paired validation difference a row was chosen by (its recorded
  two-sided 95% interval gives the standard error)."""
  return paired_statistics.Estimate(row["validation_auc_difference"], (
      row["validation_auc_high"] - row["validation_auc_low"]) / (
          2 * paired_statistics.Z))


# Which model each rule serves, from the paired difference alone: the
# choose_served rule (one-sided 95%), the two-sided 95% interval's lower
# end, and the scalar comparison before issue #60.
RULES = {
    "one-sided 95% (the rule)": lambda d: d.lower_bound() > 0,
    "two-sided 95%": lambda d: d.interval()[0] > 0,
    "scalar": lambda d: d.value > 0,
}


def table(results_root: str) -> str:
  """One line per study: the models' mean eval AUCs, and under each rule
  the mean eval AUC of the model it serves and how often it served the
  DeepFM. The choice is recomputed from each row's recorded difference,
  so rows trained under another rule count under every one."""
  lines = [
      "| data | training rows | seeds | validation rows | mean eval AUC: "
      "DeepFM | logistic regression | " + " | ".join(
          f"served, {rule}" for rule in RULES) + " | the rule's within "
      "0.001 of the better |",
      "| --- | ---: | ---: | ---: | ---: | ---: | " +
      " | ".join("---:" for _ in RULES) + " | --- |"]
  studies = [n for n in os.listdir(results_root)
             if os.path.isdir(os.path.join(results_root, n))]
  for name in sorted(studies, key=lambda n: (n.split("-")[0],
                                             int(n.split("-")[1]))):
    path = os.path.join(results_root, name, "study.csv")
    rows = list(_rows(path)) if os.path.exists(path) else []
    if not rows:
      continue
    model, lr = _mean([r["auc"] for r in rows]), _mean(
        [r["lr_auc"] for r in rows])
    cells, met = [], None
    for serves_model in RULES.values():
      picks = [serves_model(_difference(r)) for r in rows]
      served = _mean([r["auc"] if p else r["lr_auc"]
                      for r, p in zip(rows, picks)])
      cells.append(f"{served:.4f} ({sum(picks)}/{len(rows)} DeepFM)")
      met = served >= max(model, lr) - TOLERANCE if met is None else met
    dataset, train_rows = name.split("-")
    lines.append(
        f"| {dataset} | {int(train_rows):,} | {len(rows)} | "
        f"{int(rows[0]['validation_rows']):,} | {model:.4f} | {lr:.4f} | "
        + " | ".join(cells) + f" | {'yes' if met else 'no'} |")
  return "\n".join(lines)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--results", default=RESULTS,
                      help="one folder per study under it (in git)")
  commands = parser.add_subparsers(dest="command", required=True)
  run_parser = commands.add_parser("run")
  run_parser.add_argument("root")
  run_parser.add_argument("dataset", choices=sorted(features.DATASETS))
  run_parser.add_argument("sizes", type=lambda s: [int(v) for v in
                                                   s.split(",")])
  run_parser.add_argument("--seeds", default="1,2,3,4,5")
  commands.add_parser("table")
  # Flags after "--" go to every study.
  args, study_flags = parser.parse_known_args()
  if args.command == "run":
    run(args.root, args.results, args.dataset, args.sizes, args.seeds,
        [f for f in study_flags if f != "--"])
  else:
    print(table(args.results))


if __name__ == "__main__":
  main()
