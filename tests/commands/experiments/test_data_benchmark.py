"""The data-path benchmark: memory sampling, timings from ML Metadata, doc."""

import os
import subprocess
import sys

import pytest

from commands.cli import main as cli
from commands.experiments import data_benchmark


def test_tree_memory_sampler_sees_a_child_process():
  allocate = ("import time; x = bytearray(300 << 20); x[::4096] = b'1' * "
              "len(x[::4096]); time.sleep(2)")
  parent = subprocess.Popen(
      [sys.executable, "-c",
       f"import subprocess, sys; subprocess.run([sys.executable, '-c', "
       f"{allocate!r}])"])
  with data_benchmark.TreeMemorySampler(parent.pid) as sampler:
    parent.wait()
  assert sampler.peak() > 300 << 20


def test_memory_log_keeps_every_attempts_samples(tmp_path):
  log = tmp_path / data_benchmark.MEMORY_LOG
  # An earlier attempt: started at 100, sampled until 160, then killed.
  log.write_text("attempt,100.0\n100.5,1000\n160.0,5000000000\n")
  child = subprocess.Popen([sys.executable, "-c", "import time; "
                            "time.sleep(1.5)"])
  with data_benchmark.TreeMemorySampler(child.pid, str(log)) as sampler:
    child.wait()
  assert len(sampler.attempt_starts) == 2
  assert sampler.peak() == 5000000000
  assert sampler.peak(start=161) < 5000000000
  assert 60 + 1 < sampler.attempts_seconds() < 60 + 10
  reread = data_benchmark.TreeMemorySampler(os.getpid(), str(log))
  reread._log.close()  # pylint: disable=protected-access
  assert reread.samples == sampler.samples
  assert reread.attempt_starts[:2] == sampler.attempt_starts


def test_memory_log_skips_a_line_torn_by_a_kill(tmp_path):
  """An attempt killed while writing a sample leaves half a line; the next
  attempt reads the rest and starts its own lines on a new one."""
  log = tmp_path / data_benchmark.MEMORY_LOG
  log.write_text("attempt,100.0\n100.5,1000\n101.0,20")
  first = data_benchmark.TreeMemorySampler(os.getpid(), str(log))
  first._log.close()  # pylint: disable=protected-access
  assert first.samples == [(100.5, 1000)]
  second = data_benchmark.TreeMemorySampler(os.getpid(), str(log))
  second._log.close()  # pylint: disable=protected-access
  assert second.samples == [(100.5, 1000)]
  assert second.attempt_starts[:2] == first.attempt_starts
  assert len(second.attempt_starts) == 3


def test_table_and_ingest_to_transform_span():
  timings = [
      data_benchmark.ComponentTiming("RawCtrExampleGen", 100.0, 110.0, 1000,
                                     2 << 30),
      data_benchmark.ComponentTiming("StatisticsGen", 110.0, 115.0, 1000),
      data_benchmark.ComponentTiming("Transform", 115.0, 120.0, 1000),
      data_benchmark.ComponentTiming("Pusher", 130.0, 131.0, None),
  ]
  assert data_benchmark.ingest_to_transform(timings) == (20.0, 50.0)
  table = data_benchmark.format_table(timings).splitlines()
  assert table[2] == "| RawCtrExampleGen | 10.0 | 1,000 | 100 | 2.00 |"
  assert table[5] == "| Pusher | 1.0 |  |  | 0.00 |"


@pytest.mark.slow
def test_benchmark_runs_the_pipeline_and_writes_the_doc(tmp_path):
  doc = tmp_path / "benchmark_data.md"
  code = cli.main(["benchmark", "--stage", "data", "--rows", "3000",
                   "--work-dir", str(tmp_path / "work"), "--doc", str(doc),
                   "--data-batch-size", "256",
                   "--run-arg=--embed-lr", "--run-arg=1e-2"])
  assert code == 0
  text = doc.read_text()
  assert "Command: `" in text and "--stage data --rows 3000" in text
  rows = {line.split("|")[1].strip(): line.split("|")[2:-1]
          for line in text.splitlines() if line.startswith("| ")}
  for component in ("RawCtrExampleGen", "StatisticsGen", "Transform",
                    "Trainer", "Evaluator"):
    assert float(rows[component][0]) > 0, component
  # Recorded too, but a Pusher with nothing blessed to push (3,000 rows
  # rarely beat the gate) finishes within the table's 0.1 s.
  assert float(rows["Pusher"][0]) >= 0
  assert rows["RawCtrExampleGen"][1].strip() == "3,000"
  assert float(rows["Transform"][3]) > 0  # Peak RSS was sampled.
  assert "overall eval AUC: 0." in text

  # Resumed, the finished run's components up to the Trainer are cache
  # hits, and the table still reports their own runs. The Evaluator runs
  # again: its baseline (the served model) is looked up afresh each run.
  assert cli.main(["benchmark", "--stage", "data", "--rows", "3000",
                   "--work-dir", str(tmp_path / "work"), "--doc", str(doc),
                   "--data-batch-size", "256", "--run-arg=--embed-lr",
                   "--run-arg=1e-2", "--resume"]) == 0
  first, resumed = doc.read_text().split("Command: `")[1:]
  assert "--resume" in resumed and "over 2 attempts" in resumed
  table = lambda section: [line for line in section.splitlines()
                           if line.startswith("| ")]
  assert table(resumed)[:8] == table(first)[:8]
  assert table(resumed)[7].startswith("| Trainer |")


def test_an_epochs_run_arg_replaces_the_benchmarks_own():
  own = data_benchmark.pipeline_command("criteo", "d.txt", "out", 1024, 1, [])
  assert own[own.index("--epochs") + 1] == "1"
  for extra in (["--epochs=10"], ["--epochs", "10"]):
    command = data_benchmark.pipeline_command("criteo", "d.txt", "out", 1024,
                                              1, extra)
    assert [a for a in command if a.startswith("--epochs")] == [extra[0]]
    assert command[-len(extra):] == extra
