"""`python -m pipeline ...`: see pipeline.cli."""

import sys

from pipeline import cli

if __name__ == "__main__":
  sys.exit(cli.main())
