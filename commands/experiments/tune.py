"""`python -m pipeline tune`: the tuning job on its own, and its results.

The job runs create_pipeline with stop_after_tuner: the same ingestion,
Transform and Tuner as `run --tune`, without the final training. Then it
writes to the output DIR, next to DIR/pipeline and DIR/metadata.sqlite:

  best_hyperparameters.json   the best base values, their val_auc and the
                              settings they were found with
  best_hyperparameters/best_hyperparameters.txt
                              the Tuner's artifact as is, which
                              `run --hparams-from DIR` imports
  trials.csv, trials.json     one row per trial (components.tuner)
  trials.png                  val_auc per trial, and the best so far

The values are BASE hyperparameters (at the dataset's base batch size): the
scaling rule maps them to any batch size a run trains at.
"""

import argparse
import dataclasses
import json
import os
import shutil
from typing import Any, Dict, List, Mapping, Tuple

from matplotlib.figure import Figure

from commands.experiments.tuned_hparams import BEST_DIR
from commands.experiments.tuned_hparams import BEST_FILE
from commands.experiments.tuned_hparams import BEST_JSON
from commands.experiments.tuned_hparams import check_best_hyperparameters
from commands.runs import run
from components import tuner as tuner_component
from pipeline import metadata
from pipeline.config import PipelineConfig
from trainer_module import contract
from trainer_module import plan as plan_lib
from trainer_module import scaling

PLOT = "trials.png"
TUNER_NODE = tuner_component.CtrTuner.__name__

def latest_outputs(config: PipelineConfig, node_id: str) -> Dict[str, str]:
  """Output key -> URI of the latest finished (or cached) run of a node."""
  return metadata.node_artifacts(config.metadata_path, config.pipeline_name,
                                 node_id)


def plot_trials(rows: List[Mapping[str, Any]], path: str, title: str) -> None:
  """val_auc of every trial, the best so far, and where trials failed."""
  figure = Figure(figsize=(max(6.0, 0.35 * len(rows)), 4.0))
  axes = figure.subplots()
  positions = range(len(rows))
  done = [(i, row[contract.OBJECTIVE]) for i, row in enumerate(rows)
          if row[contract.OBJECTIVE] is not None]
  if done:
    xs, ys = zip(*done)
    axes.plot(xs, ys, "o", label="trial")
    running = [max(ys[:k + 1]) for k in range(len(ys))]
    axes.step(xs, running, where="post", label="best so far")
    best = ys.index(max(ys))
    axes.plot(xs[best], ys[best], "*", markersize=14,
              label=f"best: {ys[best]:.4f}")
  failed = [i for i, row in enumerate(rows)
            if row[contract.OBJECTIVE] is None]
  for i in failed:
    axes.axvline(i, color="tab:red", alpha=0.3,
                 label="failed" if i == failed[0] else None)
  axes.set_xticks(list(positions), [str(row["trial_id"]) for row in rows])
  axes.set_xlabel("trial")
  axes.set_ylabel(f"validation AUC ({contract.OBJECTIVE})")
  axes.set_title(title)
  axes.grid(alpha=0.3)
  axes.margins(x=0.1, y=0.15)
  if done or failed:
    axes.legend(loc="best")
  figure.tight_layout()
  figure.savefig(path, dpi=100)


@dataclasses.dataclass(frozen=True)
class TuningOutcome:
  """What a tuning job found and wrote."""
  output: str
  summary: Dict[str, Any]
  trials: List[Dict[str, Any]]
  files: Tuple[str, ...]

  def describe(self) -> str:
    s = self.summary
    values = ", ".join(f"{k}={v:.4g}" for k, v in s["values"].items())
    return "\n".join([
        f"trials:           {s['trials']} run, {s['completed']} completed "
        f"({s['tuner']} search, objective {s['objective']})",
        f"best trial:       {s['best_trial']}  {s['objective']} "
        f"{s['best_val_auc']:.4f}  val_loss {s['best_val_loss']:.4f}",
        f"best base values: {values}",
        f"                  (at batch {s['base_batch_size']}; the "
        f"{s['scaling_rule']} rule maps them to a run's batch size)",
        f"trials trained at batch {s['tuned_at_batch_size']} "
        f"({s['batch_size_reason']})",
        "written:          " + "\n                  ".join(self.files),
        f"reuse with:       python -m pipeline run ... --hparams-from "
        f"{self.output}"])


def write_results(config: PipelineConfig, best_hparams_dir: str,
                  tuner_results_dir: str) -> TuningOutcome:
  """Writes the job's files (module doc) from a CtrTuner's two outputs."""
  rows = tuner_component.read_trials(tuner_results_dir)
  best_file = os.path.join(best_hparams_dir, BEST_FILE)
  values = check_best_hyperparameters(best_file)
  completed = [r for r in rows if r["status"] == "COMPLETED"]
  best = max(completed, key=lambda r: r[contract.OBJECTIVE])
  # The batch the trials trained at, as the Tuner resolved it (an `auto`
  # one from the training rows).
  trained = tuner_component.read_batch(tuner_results_dir) or {
      "batch_size": config.trainer.batch_size,
      "batch_size_reason": "not recorded by this Tuner run"}
  batch = trained["batch_size"]
  scaled = (None if batch == scaling.AUTO_BATCH_SIZE else
            plan_lib.training_hparams(config.trainer, values, batch)["scaled"])
  summary = {
      "dataset": config.dataset, "model": config.trainer.model,
      "tuner": config.tuning.tuner, "trials": len(rows),
      "completed": len(completed), "objective": contract.OBJECTIVE,
      "best_trial": best["trial_id"],
      "best_val_auc": best[contract.OBJECTIVE],
      "best_val_loss": best["val_loss"], "values": values,
      "base_batch_size": config.trainer.base_batch_size,
      "scaling_rule": config.trainer.scaling_rule,
      "tuned_at_batch_size": batch,
      "batch_size_reason": trained["batch_size_reason"],
      "scaled_at_tuned_batch_size": scaled,
      "tuner_results": tuner_results_dir,
      "best_hyperparameters": best_hparams_dir}
  os.makedirs(os.path.join(config.output, BEST_DIR), exist_ok=True)
  copy = os.path.join(config.output, BEST_DIR, BEST_FILE)
  shutil.copyfile(best_file, copy)
  summary_path = os.path.join(config.output, BEST_JSON)
  with open(summary_path, "w", encoding="utf-8") as f:
    json.dump(summary, f, indent=2)
  tuner_component.write_trials(rows, config.output)
  plot = os.path.join(config.output, PLOT)
  plot_trials(rows, plot, f"{config.dataset} {config.trainer.model}: "
              f"{config.tuning.tuner} search at batch {batch}")
  files = (summary_path, copy,
           os.path.join(config.output, tuner_component.TRIALS_CSV),
           os.path.join(config.output, tuner_component.TRIALS_JSON), plot)
  return TuningOutcome(config.output, summary, rows, files)


def run_tuning(config: PipelineConfig,
               verbose: bool = False) -> TuningOutcome:
  """Runs the pipeline up to the Tuner and writes its results (module doc);
  library output goes to DIR/logs/run.log unless `verbose`."""
  if not config.tuning.stop_after_tuner:
    raise ValueError("the tuning job needs a config with tune and "
                     "stop_after_tuner set")
  run.run_with_report(config, verbose)
  outputs = latest_outputs(config, TUNER_NODE)
  return write_results(config, outputs["best_hyperparameters"],
                       outputs["tuner_results"])


def main(args: argparse.Namespace) -> int:
  """`tune`: tunes on the checked config (args.config), says where the
  results are."""
  print(run_tuning(args.config, args.verbose).describe())
  return 0
