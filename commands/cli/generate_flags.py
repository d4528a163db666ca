"""The flags of `generate` and their defaults, declared apart from the
generator (commands.synthetic, numpy and scipy) so that parsing them is
instant.
"""

import argparse

# Daily data's defaults (docs/daily.md): the share of a large field's ids
# replaced each day, and the daily step of the click log-odds.
DEFAULT_CHURN = 0.05
DEFAULT_CTR_DRIFT = 0.03
# The id-frequency profiles (commands.synthetic.profile).
PROFILES = ("default", "kaggle")


def add_arguments(parser: argparse.ArgumentParser) -> None:
  """The `generate` subcommand's flags."""
  parser.add_argument("--format", required=True, choices=("criteo", "avazu"))
  parser.add_argument("--rows", type=int, required=True)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--out", required=True,
                      help="output file path; with --days, the directory of "
                      "the day folders")
  parser.add_argument("--days", type=int, default=None, metavar="N",
                      help="write N days of --rows rows each, day d to "
                      "OUT/day-d/, the world drifting from day to day; train "
                      "on them with run --data 'OUT/day-{SPAN}/' "
                      "(docs/daily.md)")
  parser.add_argument("--churn", type=float, default=DEFAULT_CHURN,
                      metavar="P",
                      help="with --days: the share of each large field's ids "
                      "that new ids replace each day (default "
                      f"{DEFAULT_CHURN})")
  parser.add_argument("--ctr-drift", type=float, default=DEFAULT_CTR_DRIFT,
                      metavar="S",
                      help="with --days: the standard deviation of the click "
                      "log-odds' daily change (default "
                      f"{DEFAULT_CTR_DRIFT})")
  parser.add_argument("--top-ids", type=int, default=None, metavar="K",
                      help="keep each field's K most frequent ids, one shared "
                      "id for the rest (the CowClip paper's Table 1 data)")
  parser.add_argument("--id-profile", default="default", choices=PROFILES,
                      help="id-frequency profile: default, or kaggle (fitted "
                      "to the real Criteo train.txt's distinct counts; "
                      "docs/generator.md)")
  parser.add_argument("--rare-signal", type=float, default=0.0,
                      metavar="BETA",
                      help="an id of frequency rank k gets a hidden weight of "
                      "scale (k+1)^BETA: > 0 puts more of the click signal on "
                      "rare ids (default 0)")
  parser.set_defaults(handler="commands.synthetic.generate.main",
                      uses_devices=False)
