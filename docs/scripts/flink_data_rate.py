"""Rows/s from ExampleGen to the end of Transform, on Flink and in process,
with the peak memory of every process (docs/flink.md, docs/benchmark_data.md).

    python docs/scripts/flink_data_rate.py --rows 1000000 --engine flink
    python docs/scripts/flink_data_rate.py --rows 1000000 --engine local

Generates N Criteo-layout rows (seed 0, once per N), runs `pipeline run` on
them in a fresh output directory, and stops it (SIGTERM) once Transform is
done: the data path is what is measured. The seconds are the wall time from
the run's start to Transform's end, less the import time before the first
component starts. Memory: the resident set of the run's own process tree,
and with --engine flink of each of the local cluster's processes
(kubeflow/local_flink.sh's pid files: the JobManager, the TaskManagers, the
job server, and the worker pool with its SDK workers), sampled every 0.5 s.
One markdown row per call is appended to --doc.
"""

import argparse
import contextlib
import datetime
import glob
import os
import re
import signal
import subprocess
import sys
import time
from typing import Dict, List

import psutil

from commands.experiments.data_benchmark import TreeMemorySampler

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
CLUSTER = os.path.join(ROOT, "runs", "flink-cluster")
FLINK_ARGS = ("--beam-runner", "flink", "--job-endpoint", "localhost:8099",
              "--environment-type", "EXTERNAL", "--environment-config",
              "localhost:50000")
# The pid files of kubeflow/local_flink.sh, by the role they hold.
ROLES = {"jobmanager": "JobManager", "jobserver": "job server",
         "workers": "worker pool + SDK workers"}


def _cluster_pids() -> Dict[str, int]:
  """The cluster's live processes by role, from the script's pid files."""
  found = {}
  for path in sorted(glob.glob(os.path.join(CLUSTER, "*.pid"))):
    name = os.path.basename(path)[:-4]
    with open(path) as f:
      pids = f.read().split()
    for i, pid in enumerate(pids):
      role = ROLES.get(name) or (f"TaskManager {i + 1}"
                                 if "taskexecutor" in name else None)
      if role and psutil.pid_exists(int(pid)):
        found.setdefault(role, int(pid))
  return found


def measure(rows: int, engine: str, work: str) -> Dict[str, object]:
  data = os.path.join(work, f"criteo_{rows}.txt")
  if not os.path.exists(data):
    subprocess.run([sys.executable, "-m", "pipeline", "generate", "--format",
                    "criteo", "--rows", str(rows), "--seed", "0", "--out",
                    data], check=True, cwd=ROOT)
  output = os.path.join(work, f"{engine}_{rows}_{int(time.time())}")
  command = [sys.executable, "-m", "pipeline", "run", "--dataset", "criteo",
             "--data", data, "--output", output, "--epochs", "1"]
  if engine == "flink":
    command += FLINK_ARGS
  pids = _cluster_pids() if engine == "flink" else {}
  run = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
  pids = {"pipeline run": run.pid, **pids}
  samplers = {role: TreeMemorySampler(pid) for role, pid in pids.items()}
  with contextlib.ExitStack() as sampling:
    for sampler in samplers.values():
      sampling.enter_context(sampler)
    first_component = transform_done = None
    lines: List[str] = []
    for line in run.stdout:
      lines.append(line)
      if first_component is None and line.rstrip().endswith(" ..."):
        first_component = time.time()
      if re.match(r"Transform done in", line):
        transform_done = time.time()
        os.killpg(run.pid, signal.SIGTERM)
        break
  run.wait()
  if transform_done is None:
    raise SystemExit("the run ended before Transform did:\n" +
                     "".join(lines[-20:]))
  peaks = {role: max((rss for _, rss in sampler.samples), default=0)
           for role, sampler in samplers.items()}
  seconds = transform_done - first_component
  return {"rows": rows, "engine": engine, "seconds": seconds,
          "rows_per_second": rows / seconds, "peaks": peaks}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--rows", type=int, required=True)
  parser.add_argument("--engine", choices=("flink", "local"), required=True)
  parser.add_argument("--work", default=os.path.join(ROOT, "runs",
                                                     "flink_data_rate"))
  parser.add_argument("--doc", default=os.path.join(ROOT, "docs",
                                                    "flink_data_rate.md"))
  args = parser.parse_args()
  os.makedirs(args.work, exist_ok=True)
  result = measure(args.rows, args.engine, args.work)
  commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, cwd=ROOT
                          ).stdout.strip()
  memory = ", ".join(f"{role} {peak / 2**30:.2f} GiB"
                     for role, peak in result["peaks"].items())
  row = (f"| {args.rows:,} | {args.engine} | {result['seconds']:.0f} | "
         f"{result['rows_per_second']:,.0f} | {memory} | "
         f"{datetime.date.today()} {commit} |\n")
  with open(args.doc, "a") as doc:
    doc.write(row)
  print(row, end="")


if __name__ == "__main__":
  main()
