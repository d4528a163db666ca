"""make test's worker groups and early starts (tests/conftest.py) name
files that exist: a renamed file would silently lose its shared fixture or
its place in the order."""

import os

import conftest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_groups_name_test_files_that_exist():
  missing = [path for path in sorted(conftest.SHARED_FIXTURE_GROUPS) +
             list(conftest.START_FIRST)
             if not os.path.isfile(os.path.join(ROOT, path))]
  assert not missing, missing
