"""Prints docs/generator.md's tables: the generator's expected id counts at
the full Kaggle size against the published ones, and the shares of the click
signal by id frequency (commands/synthetic/profile.py; closed form).

  PYTHONPATH=. .venv/bin/python docs/scripts/generator_profile.py
"""

from commands.synthetic import profile

ROWS = profile.KAGGLE_CRITEO_ROWS
TRAIN_ROWS = round(ROWS * 0.9)


def main() -> None:
  worlds = {name: profile.world_for("criteo", name)
            for name in profile.PROFILES}
  print(f"| field | published distinct | " + " | ".join(
      f"{p}: distinct | {p}: seen >= 10" for p in worlds) + " |")
  print("|---" * (2 + 2 * len(worlds)) + "|")
  totals = {p: [0.0, 0.0] for p in worlds}
  for name, published in profile.KAGGLE_CRITEO_DISTINCT.items():
    cells = []
    for p, world in worlds.items():
      distinct, kept = profile.expected_ids(world.ids[name], ROWS, 10,
                                            TRAIN_ROWS)
      totals[p][0] += distinct
      totals[p][1] += kept
      cells += [f"{distinct:,.0f}", f"{kept:,.0f}"]
    print(f"| {name} | {published:,} | " + " | ".join(cells) + " |")
  published = sum(profile.KAGGLE_CRITEO_DISTINCT.values())
  print(f"| **all** | **{published:,}** | " + " | ".join(
      f"**{d:,.0f}** | **{k:,.0f}**" for d, k in totals.values()) + " |")
  print()
  print("| profile | rare signal | train rows | ids seen < 10 | 10-1000 | "
        "> 1000 | pairs | dense |")
  print("|---" * 8 + "|")
  for p in profile.PROFILES:
    for beta in (0.0, 0.3):
      world = profile.world_for("criteo", p, beta)
      for rows in (900_000, 9_000_000, TRAIN_ROWS):
        s = profile.signal_shares(world, rows)
        print(f"| {p} | {beta} | {rows:,} | {s['ids_unseen']:.3f} | "
              f"{s['ids_rare']:.3f} | {s['ids_frequent']:.3f} | "
              f"{s['pairs']:.3f} | {s['dense']:.3f} |")


if __name__ == "__main__":
  main()
