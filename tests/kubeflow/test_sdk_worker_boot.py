"""The worker boot installs what the job staged, once per set of packages,
in the order Beam's own boot does."""

import os
import subprocess
import sys
import tarfile

from kubeflow import sdk_worker_boot


def _sdist(folder, version: str) -> str:
  """A minimal sdist of a package `staged_probe` that says its version."""
  source = folder / f"staged_probe-{version}"
  (source / "staged_probe").mkdir(parents=True)
  (source / "staged_probe" / "__init__.py").write_text(
      f"VERSION = {version!r}\n")
  (source / "pyproject.toml").write_text(
      '[build-system]\nrequires = ["setuptools>=61"]\n'
      'build-backend = "setuptools.build_meta"\n'
      f'[project]\nname = "staged_probe"\nversion = "{version}"\n')
  (source / "PKG-INFO").write_text(
      f"Metadata-Version: 2.1\nName: staged_probe\nVersion: {version}\n")
  path = folder / f"staged_probe-{version}.tar.gz"
  with tarfile.open(path, "w:gz") as tar:
    tar.add(source, arcname=source.name)
  return str(path)


def test_extra_packages_come_before_the_workflow_sdist(tmp_path):
  (tmp_path / "extra_packages.txt").write_text("a.whl\nb.tar.gz\n")
  staged = {name: str(tmp_path / name) for name in
            ("extra_packages.txt", "a.whl", "b.tar.gz", "workflow.tar.gz",
             "pickled_main_session")}
  assert sdk_worker_boot._packages(staged) == [
      staged["a.whl"], staged["b.tar.gz"], staged["workflow.tar.gz"]]


def test_staged_packages_are_installed_once_and_imported_first(tmp_path):
  cache = tmp_path / "installed"
  package = _sdist(tmp_path, "1.0")
  first = sdk_worker_boot.install_staged([package], str(cache))
  os.remove(os.path.join(first, "staged_probe", "__init__.py"))
  # The same bytes: the installed folder is reused, not rebuilt.
  assert sdk_worker_boot.install_staged([package], str(cache)) == first
  assert not os.path.exists(os.path.join(first, "staged_probe",
                                         "__init__.py"))
  (tmp_path / "v2").mkdir()
  second = sdk_worker_boot.install_staged([_sdist(tmp_path / "v2", "2.0")],
                                          str(cache))
  assert second != first
  version = subprocess.run(
      [sys.executable, "-S", "-c",
       "import staged_probe; print(staged_probe.VERSION)"],
      env={**os.environ, "PYTHONPATH": second}, capture_output=True,
      text=True, check=True).stdout.strip()
  assert version == "2.0"
  assert not [n for n in os.listdir(cache) if n.startswith(".installing")]
