"""How much of a day's traffic carries ids the day before never showed, in
daily generated data (generate --days), with and without the daily id
churn: what docs/generator.md quotes for the --churn default.

  PYTHONPATH=. .venv/bin/python docs/scripts/daily_new_ids.py [ROWS]

Writes ROWS rows a day (default 200,000) for 3 days at churn 0 and at the
default into a temporary directory, and prints, for each day after the
first and for each churn: the share of the large fields' id occurrences
unseen the day before, the share of rows with at least one such id, and
the click rate.
"""

import os
import sys
import tempfile

import numpy as np

from commands.synthetic import generate
from commands.synthetic import profile as synthetic_profile
from commands.synthetic import world as synthetic_world
from trainer_module import features


def _columns(path, spec, names):
  """{name: array of the column's strings} of a Criteo-layout file."""
  index = [spec.columns.index(n) for n in names]
  values = {n: [] for n in names}
  labels = []
  with open(path) as f:
    for line in f:
      fields = line.rstrip("\n").split(spec.delimiter)
      labels.append(fields[0] == "1")
      for n, i in zip(names, index):
        values[n].append(fields[i])
  return {n: np.array(v) for n, v in values.items()}, np.mean(labels)


def main():
  rows = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
  spec = features.CRITEO
  large = synthetic_world.renewed_fields(
      synthetic_profile.world_for(spec.name))
  print(f"{rows:,} rows a day; large fields: {len(large)} of "
        f"{len(spec.categorical_features)}")
  print("| churn | day | id occurrences unseen the day before | rows with "
        "one | click rate |")
  print("| --- | --- | --- | --- | --- |")
  with tempfile.TemporaryDirectory() as out:
    for churn in (0.0, generate.DEFAULT_CHURN):
      directory = os.path.join(out, str(churn))
      generate.write_days(spec.name, rows, 3, 1, directory, churn=churn)
      days = [_columns(os.path.join(directory, f"day-{d}",
                                    generate.DAY_FILE[spec.name]), spec,
                       large) for d in (1, 2, 3)]
      for day in (2, 3):
        (before, _), (today, rate) = days[day - 2], days[day - 1]
        unseen = np.stack([~np.isin(today[n], before[n]) & (today[n] != "")
                           for n in large], axis=1)
        present = np.stack([today[n] != "" for n in large], axis=1)
        print(f"| {churn} | {day} | {unseen.sum() / present.sum():.3f} | "
              f"{unseen.any(axis=1).mean():.3f} | {rate:.4f} |")


if __name__ == "__main__":
  main()
