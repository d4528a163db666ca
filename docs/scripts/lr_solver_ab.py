"""docs/lr_baseline.md, "The fit's solver": the baseline's whole path and
refit (linear_fit.fit_path) with scikit-learn's Newton-CG and L-BFGS at
several tolerances, and with the L2 path on the first N training rows or
all of them, alternating in one process, on a finished run's Transform
output: seconds, iterations, the kept C and the eval AUC.

  PYTHONPATH=. python docs/scripts/lr_solver_ab.py --run DIR [--rounds 2] \
      [--cases newton-cg:1e-4,...] [--path-rows 500000,all]
"""

import argparse
import glob
import itertools
import os
import time

from trainer_module import keras_version

keras_version.pin_keras3()

# pylint: disable=g-import-not-at-top,wrong-import-position
from sklearn import metrics
import tensorflow as tf
import tensorflow_transform as tft

from commands.experiments import study_data
from pipeline.config import PipelineConfig
from trainer_module import input_pipeline
from trainer_module import linear_fit
from trainer_module import model_building
from trainer_module import preprocessing
from trainer_module.settings import TrainerSettings

CASES = (("lbfgs", 1e-4), ("newton-cg", 1e-4), ("lbfgs", 1e-5),
         ("newton-cg", 1e-5), ("newton-cg", 1e-6))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument("--dataset", default="criteo")
  parser.add_argument("--run", required=True, help="a pipeline run's DIR")
  parser.add_argument("--rounds", type=int, default=2)
  parser.add_argument(
      "--cases", type=lambda v: [(c.split(":")[0], float(c.split(":")[1]))
                                 for c in v.split(",")],
      default=list(CASES), help="SOLVER:TOLERANCE,...")
  parser.add_argument(
      "--path-rows", type=lambda v: [None if n == "all" else int(n)
                                     for n in v.split(",")],
      default=[linear_fit.PATH_ROWS], help="N,...: the L2 path's training "
      "rows ('all': the whole training part)")
  args = parser.parse_args()
  config = PipelineConfig.from_fields(dataset=args.dataset, data="-",
                                      output=args.run)
  inputs = study_data.transform_artifacts(config)
  output = tft.TFTransformOutput(inputs.transform_graph)
  spec = TrainerSettings(dataset=args.dataset).spec
  data = input_pipeline.training_data(
      sorted(glob.glob(os.path.join(inputs.raw_examples, "Split-train", "*"))),
      output, spec.label, 1024, seed=0)
  sizes = preprocessing.vocabulary_sizes(output, spec, linear=True)
  start = time.perf_counter()
  rows = linear_fit.one_hot_rows(itertools.chain(
      data.in_memory.batches(65536, shuffle=False), data.validation), sizes)
  print(f"one-hot rows: {rows.labels.size:,} ({data.train_examples:,} "
        f"training) in {time.perf_counter() - start:.1f} s", flush=True)
  records = tf.data.TFRecordDataset(
      sorted(glob.glob(os.path.join(inputs.raw_examples, "Split-eval", "*"))),
      compression_type="GZIP").batch(65536)
  eval_batches = []
  for batch in records:
    transformed = output.transform_features_layer()(
        tf.io.parse_example(batch, output.raw_feature_spec()))
    eval_batches.append(({k: v.numpy() for k, v in transformed.items()},
                         transformed[spec.label].numpy()))
  evaluation = linear_fit.one_hot_rows(eval_batches, sizes)
  print("round | solver | tolerance | path rows | seconds (path; refit) | "
        "kept C | iterations per C; refit | eval AUC")
  for round_index in range(1, args.rounds + 1):
    for (solver, tolerance), path_rows in itertools.product(
        args.cases, args.path_rows):
      linear_fit.SOLVER, linear_fit.GRADIENT_TOLERANCE = solver, tolerance
      start = time.perf_counter()
      fitted = linear_fit.fit_path(rows, data.train_examples,
                                   model_building.BASELINE_C_GRID,
                                   path_rows or data.train_examples)
      seconds = time.perf_counter() - start
      refit = fitted["refit"]["seconds"]
      auc = metrics.roc_auc_score(
          evaluation.labels,
          evaluation.matrix @ fitted["coef"] + fitted["intercept"])
      iterations = ", ".join(str(g["iterations"]) for g in fitted["grid"])
      print(f"{round_index} | {solver} | {tolerance:g} | "
            f"{fitted['path_rows']:,} | {seconds:.1f} ({seconds - refit:.1f}"
            f"; {refit:.1f}) | {fitted['c']:g} | {iterations}; "
            f"{fitted['refit']['iterations']} | {auc:.5f}", flush=True)


if __name__ == "__main__":
  main()
