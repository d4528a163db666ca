"""`python -m pipeline ...`: see commands.cli."""

import sys


def main() -> int:
  """Runs the command line, holding what TensorFlow prints while it is
  imported for the run's log (commands.import_output)."""
  # pylint: disable=g-import-not-at-top
  from commands import import_output
  import_output.hold()
  try:
    from commands import cli
  except BaseException:
    import_output.release(sys.stderr.buffer)
    raise
  return cli.main()


if __name__ == "__main__":
  sys.exit(main())
