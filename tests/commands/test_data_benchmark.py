"""The data-path benchmark: memory sampling, timings from ML Metadata, doc."""

import subprocess
import sys

import pytest

from commands import cli
from commands import data_benchmark


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


def test_an_epochs_run_arg_replaces_the_benchmarks_own():
  own = data_benchmark.pipeline_command("criteo", "d.txt", "out", 1024, 1, [])
  assert own[own.index("--epochs") + 1] == "1"
  for extra in (["--epochs=10"], ["--epochs", "10"]):
    command = data_benchmark.pipeline_command("criteo", "d.txt", "out", 1024,
                                              1, extra)
    assert [a for a in command if a.startswith("--epochs")] == [extra[0]]
    assert command[-len(extra):] == extra
