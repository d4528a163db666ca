"""What differs between two runs of the pipeline on the same rows: one on
an engine (Flink, a portable runner), one in process.

Exact where the engine cannot change the answer: per-split row counts,
vocabularies byte for byte, the statistics' exact counts. Within 1e-6 where
float sums may merge in another order: the Evaluator's overall metrics and
the served model's predictions. TFDV's quantile and top-k sketches depend on
merge order and are not compared.
"""

import glob
import os
import types
from typing import List

import numpy as np

import conftest

TOLERANCE = 1e-6


def _one(run: str, pattern: str) -> str:
  """The first execution's artifact (a re-run may have added later ones)."""
  paths = glob.glob(os.path.join(run, "pipeline", pattern))
  if not paths:
    raise FileNotFoundError(f"{run}: no {pattern}")
  def artifact_id(path):
    parts = os.path.relpath(path, os.path.join(run, "pipeline")).split(os.sep)
    return int(parts[2])
  return min(paths, key=artifact_id)


def _statistics(run: str):
  from tensorflow_data_validation import load_stats_binary  # pylint: disable=g-import-not-at-top
  folder = _one(run, "StatisticsGen/statistics/*")
  return {split: load_stats_binary(os.path.join(
      folder, f"Split-{split}", "FeatureStats.pb")).datasets[0]
          for split in ("train", "eval")}


def _exact_counts(dataset):
  counts = {"num_examples": dataset.num_examples}
  for feature in dataset.features:
    name = feature.path.step[0] if feature.path.step else feature.name
    stats = (feature.num_stats.common_stats
             if feature.HasField("num_stats") else
             feature.string_stats.common_stats)
    counts[name] = (stats.num_non_missing, stats.num_missing,
                    stats.min_num_values, stats.max_num_values,
                    stats.tot_num_values)
  return counts


def _overall_metrics(run: str):
  import tensorflow_model_analysis as tfma  # pylint: disable=g-import-not-at-top
  for record in tfma.load_metrics(_one(run, "Evaluator/evaluation/*")):
    if not record.slice_key.single_slice_keys:
      return {key.name: value.double_value.value
              for key, value in ((k.key, k.value)
                                 for k in record.metric_keys_and_values)
              if value.HasField("double_value")}
  raise ValueError(f"{run}: no overall slice in the evaluation")


def _predictions(run: str, examples: List[bytes]) -> np.ndarray:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  model = tf.saved_model.load(_one(run, "Trainer/model/*/Format-Serving"))
  serve = model.signatures["serving_default"]
  output = serve(examples=tf.constant(examples))
  return np.asarray(next(iter(output.values()))).reshape(-1)


def _eval_examples(run: str, count: int) -> List[bytes]:
  examples = types.SimpleNamespace(uri=_one(run, "RawCtrExampleGen/examples/*"))
  return conftest.split_records(examples, "eval")[:count]


def _bytes(path: str) -> bytes:
  with open(path, "rb") as f:
    return f.read()


def differences(engine_run: str, local_run: str,
                predictions: bool = True) -> List[str]:
  """Every difference beyond the module's tolerances, one line each."""
  found = []
  engine_stats, local_stats = _statistics(engine_run), _statistics(local_run)
  for split in local_stats:
    a = _exact_counts(engine_stats[split])
    b = _exact_counts(local_stats[split])
    found += [f"statistics {split} {k}: {a.get(k)} != {b[k]}"
              for k in b if a.get(k) != b[k]]
  assets = "Transform/transform_graph/*/transform_fn/assets"
  engine_vocab, local_vocab = _one(engine_run, assets), _one(local_run, assets)
  names = sorted(os.listdir(local_vocab))
  if sorted(os.listdir(engine_vocab)) != names:
    found.append(f"vocabulary files differ: {sorted(os.listdir(engine_vocab))}"
                 f" != {names}")
  for name in names:
    path = os.path.join(engine_vocab, name)
    if (not os.path.exists(path) or
        _bytes(path) != _bytes(os.path.join(local_vocab, name))):
      found.append(f"vocabulary {name} differs")
  a, b = _overall_metrics(engine_run), _overall_metrics(local_run)
  found += [f"metric {k}: {a.get(k)} vs {b[k]}" for k in sorted(b)
            if k not in a or abs(a[k] - b[k]) > TOLERANCE]
  if predictions:
    examples = _eval_examples(local_run, 500)
    gap = np.max(np.abs(_predictions(engine_run, examples) -
                        _predictions(local_run, examples)))
    if gap > TOLERANCE:
      found.append(f"predictions differ by up to {gap:.3g}")
  return found
