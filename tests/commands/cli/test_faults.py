"""Faults of the machine (a full disk, a read-only DIR, memory) in one line."""

import errno
import os
import shutil
import subprocess
import sys

import pytest

from commands.cli import faults
from commands.synthetic import generate

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


def _wrapped(error: BaseException, component: str) -> RuntimeError:
  """`error` as the CLI gets it: raised in a component, re-raised by Beam
  naming it, with another error met while TFX recorded the failure."""
  try:
    try:
      raise error
    except BaseException as inner:
      raise RuntimeError(
          f"{type(inner).__name__}: {inner} [while running "
          f"'Run[{component}]']") from inner
  except RuntimeError as outer:
    return outer


def test_a_full_disk_names_the_dir_and_the_component():
  # TensorFlow's file writer says it in its message, not in an errno.
  line = faults.describe(_wrapped(
      RuntimeError("/out/pipeline/Transform/x.gz; No space left on device"),
      "Transform"), "/out")
  assert line == (
      "no space left on the device of /out in Transform: free space there "
      "(or give another --output); the components that finished are kept: "
      "re-run the same command to resume")
  assert faults.describe(OSError(errno.ENOSPC, "No space left on device"),
                         "/out").startswith("no space left on the device of "
                                            "/out: ")
  # ML Metadata's SQLite store on the full disk.
  assert faults.describe(RuntimeError("database or disk is full"),
                         None).startswith(
                             "no space left on the device of the output "
                             "directory")


def test_a_read_only_dir_and_exhausted_memory():
  assert faults.describe(
      _wrapped(OSError(errno.EROFS, "Read-only file system"), "Trainer"),
      "/ro") == ("/ro is on a read-only file system in Trainer: give a "
                 "writable --output")
  assert faults.describe(_wrapped(MemoryError(), "Trainer"), "/out"
                        ).startswith("out of memory in Trainer: ")
  assert faults.describe(RuntimeError(
      "OOM when allocating tensor with shape[4096,1000000]"), "/out"
                        ).startswith("out of memory: ")


def test_a_job_the_cluster_failed_names_the_component_and_the_reason():
  # Beam's portable runner, on a Flink job that ran out of network buffers.
  line = faults.describe(_wrapped(RuntimeError(
      "Pipeline BeamApp-root-1129085315-d21d1d20_af4167f9-5b8c-4990-a6e6-"
      "6c554a9c69e5 failed in state FAILED: java.io.IOException: "
      "Insufficient number of network buffers: required 512, but only 491 "
      "available."), "Transform"), "/out")
  assert line == (
      "the Beam cluster's job BeamApp-root-1129085315-d21d1d20 in Transform "
      "ended FAILED: java.io.IOException: Insufficient number of network "
      "buffers: required 512, but only 491 available (the cluster's logs "
      "say more); the components that finished are kept: re-run the same "
      "command to resume")


def test_other_errors_are_not_faults_of_the_machine():
  assert faults.describe(ValueError("bad row"), "/out") is None
  assert faults.describe(_wrapped(KeyError("x"), "Trainer"), "/out") is None
  assert faults.describe(FileNotFoundError(errno.ENOENT, "no such file"),
                         "/out") is None


def _small_file_system_available() -> bool:
  """Whether a user and mount namespace can mount a tmpfs here (no root
  needed where unprivileged user namespaces are allowed)."""
  if not shutil.which("unshare"):
    return False
  return subprocess.run(
      ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
       "mount -t tmpfs -o size=1m tmpfs /mnt"], capture_output=True,
      check=False).returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not _small_file_system_available(),
                    reason="needs unshare and unprivileged mounts (tmpfs)")
def test_a_run_that_fills_its_disk_ends_in_one_line(tmp_path):
  """The run's DIR on a 512 KiB file system, which ExampleGen fills: one
  `error:` line about space, naming the DIR, no traceback on the console,
  status 1."""
  data = tmp_path / "data" / "train.txt"
  generate.write_synthetic("criteo", 5000, 1, str(data))
  small = tmp_path / "small"
  small.mkdir()
  run = (f"mount -t tmpfs -o size=512k tmpfs {small} && exec "
         f"{sys.executable} -m pipeline run --dataset criteo --data {data} "
         f"--output {small}/out --epochs 1")
  result = subprocess.run(
      ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", run],
      cwd=ROOT, capture_output=True, text=True, check=False, timeout=600)
  console = result.stdout + result.stderr
  assert result.returncode == 1, console
  assert "Traceback" not in console, console
  errors = [line for line in console.splitlines()
            if line.startswith("error:")]
  assert errors == [errors[0]] and errors[0].startswith(
      f"error: no space left on the device of {small}/out in "), console
