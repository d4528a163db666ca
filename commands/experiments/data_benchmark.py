"""Data-path benchmark: `python -m pipeline benchmark --stage data --rows N`.

Generates N Criteo-layout rows (commands.synthetic.generate), runs the whole pipeline
on them in a child process (`python -m pipeline run`, a fresh output
directory, so nothing is cached) and reports, per component, its wall time
(from ML Metadata: an execution's creation to its last update), the rows it
handled per second and the peak resident memory of the whole process tree
while it ran (psutil, sampled every SAMPLE_SECONDS). The table and the exact
command go to a markdown file (docs/benchmark_data.md by default), one
section per run. Speed is measured here, never in timed tests.

A run longer than a working session resumes: `--resume` keeps the output
directory, so TFX's cache skips each component that finished, and the
memory samples of every attempt are appended to MEMORY_LOG there, so the
table still reports each component's own run and peak.
"""

import argparse
import dataclasses
import datetime
import os
import shutil
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional, Sequence, Tuple

import psutil

from commands.cli.benchmark_flags import DEFAULT_BATCH_SIZE
from commands.cli.benchmark_flags import DEFAULT_DOC
from commands.cli.benchmark_flags import DEFAULT_WORK_DIR
from commands.report import reading as report_reading
from commands.synthetic import generate
from pipeline import metadata

SAMPLE_SECONDS = 0.5
# In the run's output directory: one "time,rss" line per memory sample, and
# an "attempt,time" line where each attempt starts.
MEMORY_LOG = "benchmark_memory.csv"
# Components in pipeline order and the rows each one handles: all input
# rows, the train split or the eval split (from ExampleGen's counts).
COMPONENT_ROWS = (("RawCtrExampleGen", "rows_read"),
                  ("StatisticsGen", "rows_read"),
                  ("ImportSchemaGen", None),
                  ("StrictExampleValidator", None),
                  ("Transform", "rows_read"),
                  ("Trainer", "train_rows"),
                  ("Evaluator", "eval_rows"),
                  ("Pusher", None))


@dataclasses.dataclass(frozen=True)
class ComponentTiming:
  """One component's execution in the benchmarked run."""
  name: str
  start: float
  end: float
  rows: Optional[int]
  peak_rss: int = 0

  @property
  def seconds(self) -> float:
    return self.end - self.start

  @property
  def rows_per_second(self) -> Optional[float]:
    return self.rows / self.seconds if self.rows and self.seconds else None


class TreeMemorySampler:
  """Samples the resident memory of a process and all its descendants;
  with a `log` path, also appends each sample to it, after the samples and
  attempt starts an earlier attempt left there. A line an attempt left half
  written when it was killed is cut off first: it may parse, wrongly."""

  def __init__(self, pid: int, log: Optional[str] = None):
    self._root = psutil.Process(pid)
    self.samples: List[Tuple[float, int]] = []
    self.attempt_starts: List[float] = []
    self._log = None
    if log:
      if os.path.exists(log):
        self._read_log(log)
      self._log = open(log, "a", buffering=1)  # pylint: disable=consider-using-with
      self.attempt_starts.append(time.time())
      self._log.write(f"attempt,{self.attempt_starts[-1]}\n")
    self._stop = threading.Event()
    self._thread = threading.Thread(target=self._run, daemon=True)

  def _tree_rss(self) -> int:
    total = 0
    for process in [self._root] + self._root.children(recursive=True):
      try:
        total += process.memory_info().rss
      except psutil.Error:  # Exited between listing and reading.
        pass
    return total

  def _read_log(self, log: str) -> None:
    with open(log, "rb+") as f:
      whole = f.read()
      whole = whole[:whole.rfind(b"\n") + 1]  # Without a torn last line.
      f.truncate(len(whole))
    for line in whole.decode().splitlines():
      first, second = line.split(",")
      if first == "attempt":
        self.attempt_starts.append(float(second))
      else:
        self.samples.append((float(first), int(second)))

  def _run(self) -> None:
    while not self._stop.is_set():
      try:
        sample = (time.time(), self._tree_rss())
      except psutil.Error:
        return
      self.samples.append(sample)
      if self._log:
        self._log.write(f"{sample[0]},{sample[1]}\n")
      self._stop.wait(SAMPLE_SECONDS)

  def __enter__(self) -> "TreeMemorySampler":
    self._thread.start()
    return self

  def __exit__(self, *exc) -> None:
    self._stop.set()
    self._thread.join()
    if self._log:
      self._log.close()

  def attempts_seconds(self) -> float:
    """Wall seconds of all attempts: each from its start to its last
    sample (the time between attempts left out)."""
    bounds = self.attempt_starts + [float("inf")]
    return sum(
        max((t for t, _ in self.samples if start <= t < end), default=start)
        - start for start, end in zip(bounds, bounds[1:]))

  def peak(self, start: float = 0.0, end: float = float("inf")) -> int:
    return max((rss for t, rss in self.samples if start <= t <= end),
               default=0)


def component_timings(metadata_path: str,
                      samples: TreeMemorySampler) -> List[ComponentTiming]:
  """Wall time, rows and peak memory of each component, in pipeline order."""
  store = metadata.open_store(metadata_path)
  counts = metadata.ingestion_counts(store)
  spans = metadata.execution_spans(store)
  timings = []
  for name, rows_key in COMPONENT_ROWS:
    if name in spans:
      start, end = spans[name]
      timings.append(ComponentTiming(
          name, start, end, counts.get(rows_key) if rows_key else None,
          samples.peak(start, end)))
  return timings


def _gib(n: int) -> str:
  return f"{n / 2**30:.2f}"


def format_table(timings: Sequence[ComponentTiming]) -> str:
  """Markdown table: component, seconds, rows, rows/s, peak RSS (GiB)."""
  lines = ["| component | wall s | rows | rows/s | peak RSS of the tree, GiB |",
           "| --- | ---: | ---: | ---: | ---: |"]
  for t in timings:
    rate = f"{t.rows_per_second:,.0f}" if t.rows_per_second else ""
    rows = f"{t.rows:,}" if t.rows else ""
    lines.append(f"| {t.name} | {t.seconds:.1f} | {rows} | {rate} | "
                 f"{_gib(t.peak_rss)} |")
  return "\n".join(lines)


def ingest_to_transform(timings: Sequence[ComponentTiming]
                       ) -> Optional[Tuple[float, float]]:
  """(seconds, rows/s) of the components from ExampleGen to Transform: the
  sum of their times, which a resumed run's pause does not enter."""
  names = [t.name for t in timings]
  if ("RawCtrExampleGen" not in names or "Transform" not in names or
      not timings[names.index("RawCtrExampleGen")].rows):
    return None
  first, last = names.index("RawCtrExampleGen"), names.index("Transform")
  seconds = sum(t.seconds for t in timings[first:last + 1])
  return seconds, timings[first].rows / seconds


def pipeline_command(dataset: str, data: str, output: str, batch_size: int,
                     epochs: int, extra_run_args: Sequence[str]) -> List[str]:
  """The `pipeline run` command the benchmark times; an --epochs among the
  extra flags replaces the benchmark's own."""
  own_epochs = [] if any(arg == "--epochs" or arg.startswith("--epochs=")
                         for arg in extra_run_args) else [
                             "--epochs", str(epochs)]
  return [sys.executable, "-m", "pipeline", "run", "--dataset", dataset,
          "--data", data, "--output", output, "--batch-size", str(batch_size),
          *own_epochs, *extra_run_args]


def run_data_benchmark(rows: int, work_dir: str, dataset: str = "criteo",
                       batch_size: int = DEFAULT_BATCH_SIZE, epochs: int = 1,
                       extra_run_args: Sequence[str] = (),
                       resume: bool = False) -> Dict:
  """Generates the data (reused if present), runs the pipeline, measures.
  `resume` continues an earlier attempt at the same run (see the module
  docstring) instead of starting afresh."""
  data = os.path.join(work_dir, "data", f"{dataset}_{rows}.txt")
  generate_seconds = None
  if not os.path.exists(data):
    started = time.time()
    generate.write_synthetic(dataset, rows, 1, data)
    generate_seconds = time.time() - started
  output = os.path.join(work_dir, f"run_{dataset}_{rows}")
  if not resume:
    shutil.rmtree(output, ignore_errors=True)
  os.makedirs(output, exist_ok=True)
  command = pipeline_command(dataset, data, output, batch_size, epochs,
                             extra_run_args)
  child = subprocess.Popen(command)
  with TreeMemorySampler(child.pid, os.path.join(output, MEMORY_LOG)
                         ) as samples:
    status = child.wait()
  metadata_path = os.path.join(output, "metadata.sqlite")
  timings = component_timings(metadata_path, samples)
  auc = None
  outcome_evaluation = None
  if any(t.name == "Evaluator" for t in timings):
    outcome_evaluation = metadata.read_outcome_at(metadata_path).evaluation
  if outcome_evaluation:
    auc = report_reading.read_evaluation(
        outcome_evaluation).overall.get("auc")
  return {"rows": rows, "dataset": dataset, "command": command,
          "exit_status": status, "seconds": samples.attempts_seconds(),
          "attempts": len(samples.attempt_starts),
          "generate_seconds": generate_seconds, "timings": timings,
          "peak_rss": samples.peak(), "auc": auc,
          "load_average": os.getloadavg()}


def format_result(result: Dict) -> str:
  """The markdown section of one run."""
  when = datetime.datetime.now(datetime.timezone.utc).strftime(
      "%Y-%m-%d %H:%M UTC")
  lines = [f"## {result['rows']:,} {result['dataset']} rows ({when})", "",
           f"Pipeline: `{' '.join(result['command'][1:])}`", "",
           format_table(result["timings"]), ""]
  span = ingest_to_transform(result["timings"])
  if span:
    lines.append("- ExampleGen through Transform (sum of their times): "
                 f"{span[0]:.1f} s, {span[1]:,.0f} rows/s")
  attempts = (f" over {result['attempts']} attempts (resumed; the time "
              "between them left out)" if result["attempts"] > 1 else "")
  lines += [f"- whole run: {result['seconds']:.1f} s{attempts}, exit status "
            f"{result['exit_status']}, peak RSS of the process tree "
            f"{_gib(result['peak_rss'])} GiB",
            f"- overall eval AUC: {result['auc']:.4f}" if result["auc"]
            else "- overall eval AUC: (no evaluation)",
            "- load average at the end (1, 5, 15 min): " +
            ", ".join(f"{x:.1f}" for x in result["load_average"])]
  if result["generate_seconds"]:
    lines.append(f"- generating the data took {result['generate_seconds']:.1f}"
                 f" s ({result['rows'] / result['generate_seconds']:,.0f} "
                 "rows/s)")
  return "\n".join(lines) + "\n"


def append_to_doc(path: str, section: str, command: str) -> None:
  """Appends a run's section (and the command that made it) to `path`."""
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  new = not os.path.exists(path)
  with open(path, "a") as f:
    if new:
      f.write("# Data-path benchmark\n\nWritten by `python -m pipeline "
              "benchmark --stage data` (commands/experiments/data_benchmark.py): wall "
              "time per component from ML Metadata, rows/s, peak resident "
              "memory of the whole process tree (sampled every "
              f"{SAMPLE_SECONDS} s).\n\n")
    f.write(f"Command: `{command}`\n\n{section}\n")


def command_line(args: argparse.Namespace) -> str:
  """The `python -m pipeline benchmark --stage data` command of these flags."""
  parts = ["python -m pipeline benchmark --stage data", f"--rows {args.rows}"]
  defaults = (("dataset", "criteo"), ("work_dir", None),
              ("doc", DEFAULT_DOC), ("data_batch_size", DEFAULT_BATCH_SIZE))
  for name, default in defaults:
    if getattr(args, name) != default:
      parts.append(f"--{name.replace('_', '-')} {getattr(args, name)}")
  parts += [f"--run-arg={arg}" for arg in args.run_args]
  if args.resume:
    parts.append("--resume")
  return " ".join(parts)


def main(args: argparse.Namespace) -> int:
  """Runs the data benchmark from parsed flags; prints and writes it."""
  result = run_data_benchmark(args.rows, args.work_dir or DEFAULT_WORK_DIR,
                              args.dataset,
                              args.data_batch_size,
                              extra_run_args=args.run_args,
                              resume=args.resume)
  section = format_result(result)
  print(section)
  append_to_doc(args.doc, section, command_line(args))
  print(f"wrote {args.doc}")
  return 0 if result["exit_status"] in (0, 3) else 1
