"""make test's scheduling hints (tests/conftest.py) name files that exist:
a renamed file would silently lose its place, or its shared fixture."""

import os

import conftest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_hints_name_test_files_that_exist():
  groups = set(conftest.SHARED_FIXTURE_GROUPS.values())
  named = set(conftest.SHARED_FIXTURE_GROUPS) | (
      set(conftest.LONGEST_FIRST) - groups)
  missing = [path for path in sorted(named)
             if not os.path.isfile(os.path.join(ROOT, path))]
  assert not missing, missing
  assert groups <= set(conftest.LONGEST_FIRST)
