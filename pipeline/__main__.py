"""`python -m pipeline ...`: see commands.cli."""

import sys

from commands import cli

if __name__ == "__main__":
  sys.exit(cli.main())
