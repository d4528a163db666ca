"""Each day of generated daily logs trained both ways, in one DIR:
from scratch (measured only: its gate is set so that it never pushes)
and warm-started from the model served (pushed when the gate passes, the
next day's start). What docs/daily.md's table reports.

  PYTHONPATH=. .venv/bin/python docs/scripts/daily_warm_vs_cold.py ROOT \
      [--days 4] [--rows 300000] [--epochs 4] [--results FILE.csv]

ROOT gets the logs (generate --days, seed 1) and the pipeline DIR; each
finished run appends its row to --results (default
docs/daily_warm_vs_cold.csv), so a stopped script resumes after the rows
it has. Day 1 trains once, from scratch.
"""

import argparse
import csv
import os
import time

from commands import cli
from commands import generate
from commands import report_reading
from pipeline import runner

COLUMNS = ("day", "start", "auc", "logloss", "calibration", "epochs_run",
           "best_epoch", "trainer_seconds", "validation_auc_by_epoch",
           "carried_ids", "new_ids", "dropped_ids", "wall_seconds")


def _row(day, start, output, wall):
  run = report_reading.read_run(output)
  overall = run.evaluation.overall
  training = run.training or {}
  trainer = next(c for c in run.components if c.node == "Trainer")
  warm = training.get("warm_start", {})
  return {"day": day, "start": start, "auc": overall["auc"],
          "logloss": overall["binary_crossentropy"],
          "calibration": overall["calibration"],
          "epochs_run": training["epochs_run"],
          "best_epoch": training["best_epoch"],
          "trainer_seconds": trainer.seconds,
          "validation_auc_by_epoch": " ".join(
              f"{v:.5f}" for v in training["history"].get("val_auc", [])),
          "carried_ids": warm.get("carried_ids", ""),
          "new_ids": warm.get("new_ids", ""),
          "dropped_ids": warm.get("dropped_ids", ""), "wall_seconds": wall}


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("root")
  parser.add_argument("--days", type=int, default=4)
  parser.add_argument("--rows", type=int, default=300_000)
  parser.add_argument("--epochs", type=int, default=4)
  parser.add_argument("--results", default="docs/daily_warm_vs_cold.csv")
  args = parser.parse_args()
  logs = os.path.join(args.root, "logs")
  output = os.path.join(args.root, "pipeline")
  generate.write_days("criteo", args.rows, args.days, 1, logs)
  done = set()
  if os.path.exists(args.results):
    with open(args.results, newline="") as f:
      done = {(int(r["day"]), r["start"]) for r in csv.DictReader(f)}
  common = ["run", "--dataset", "criteo", "--data",
            logs + "/day-{SPAN}/", "--output", output, "--epochs",
            str(args.epochs), "--seed", "1"]
  for day in range(1, args.days + 1):
    # From scratch first: it never pushes, so the warm run of the same day
    # starts from the model the day before pushed.
    starts = [("scratch", ["--no-warm-start"] +
               (["--min-auc", "1.0"] if day > 1 else []))]
    if day > 1:
      starts.append(("warm", []))
    for start, extra in starts:
      if (day, start) in done:
        continue
      began = time.perf_counter()
      code = cli.main(common + ["--span", str(day)] + extra)
      if code not in (0, runner.EXIT_NOT_PUSHED):
        raise SystemExit(f"day {day} ({start}) failed: exit {code}")
      row = _row(day, start, output, time.perf_counter() - began)
      new = not os.path.exists(args.results)
      with open(args.results, "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        if new:
          writer.writeheader()
        writer.writerow(row)
      print(row, flush=True)


if __name__ == "__main__":
  main()
