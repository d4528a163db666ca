"""`python -m pipeline ...`: see commands.cli.main."""

import sys

from commands.cli import main

if __name__ == "__main__":
  sys.exit(main.main())
