"""make test's worker groups (tests/conftest.py) name files that exist: a
renamed file would silently lose its shared fixture."""

import os

import conftest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_groups_name_test_files_that_exist():
  missing = [path for path in sorted(conftest.SHARED_FIXTURE_GROUPS)
             if not os.path.isfile(os.path.join(ROOT, path))]
  assert not missing, missing
