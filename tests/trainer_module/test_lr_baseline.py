"""The logistic-regression baseline against scikit-learn's (issue #32).

trainer.train_baseline and scikit-learn's LogisticRegressionCV (docs/scripts/
lr_baseline_ab.py's settings) fit the same one-hot features, the Transform's
ids of spec.linear_features, on the train split of the same generated rows;
their AUCs on the eval split must be within MAX_GAP. Two fits of one convex
model rank the same rows alike, so their difference is the fit's, not the
sample's: it does not shrink with a larger eval split the way either AUC's
standard error (~0.015 here) does.
"""

import glob
import os

import numpy as np
import pytest
from scipy import sparse
from sklearn import linear_model
from sklearn import metrics
import tensorflow as tf
import tensorflow_transform as tft

from components import transform
from conftest import generated_examples
from conftest import run_transform
from conftest import split_records
from trainer_module import features
from trainer_module import input_pipeline
from trainer_module import model_building
from trainer_module import plan as plan_lib
from trainer_module import preprocessing
from trainer_module import trainer
from trainer_module.settings import TrainerSettings

pytestmark = pytest.mark.slow

ROWS = 20_000
MAX_GAP = 0.003
SPEC = features.CRITEO


@pytest.fixture(name="run", scope="module")
def _run(tmp_path_factory):
  """(train files, eval records, train records, Transform output) of ROWS
  generated Criteo rows."""
  root = tmp_path_factory.mktemp("lr_baseline")
  examples = generated_examples(root, ROWS, 1)
  output = run_transform(transform.Executor, examples, root / "transform")
  train_files = sorted(glob.glob(os.path.join(examples.uri, "Split-train",
                                              "*.gz")))
  return (train_files, split_records(examples, "eval"),
          split_records(examples, "train"), output)


def _transformed(output: tft.TFTransformOutput, records):
  """(labels, {field: ids}) of serialized raw records."""
  raw = tf.io.parse_example(tf.constant(records),
                            output.raw_feature_spec())
  transformed = output.transform_features_layer()(raw)
  return (transformed[SPEC.label].numpy(),
          {k: v.numpy() for k, v in transformed.items()})


def _one_hot(ids, sizes):
  """Every field of `sizes` one-hot, side by side (CSR)."""
  offsets = np.cumsum([0] + [sizes[f] for f in sizes])
  columns = np.stack([ids[f] + offsets[i] for i, f in enumerate(sizes)],
                     axis=1)
  rows = len(columns)
  return sparse.csr_matrix(
      (np.ones(columns.size), columns.ravel(),
       np.arange(0, columns.size + 1, len(sizes))), shape=(rows, offsets[-1]))


def test_baseline_matches_sklearn_logistic_regression_cv(run):
  train_files, eval_records, train_records, output = run
  settings = TrainerSettings(dataset="criteo", seed=0)
  data = input_pipeline.training_data(train_files, output, SPEC.label, 1024,
                                      seed=0)
  model, record = trainer.train_baseline(
      plan_lib.resolve(settings, {}, data.train_examples), data, output)
  eval_labels, eval_ids = _transformed(output, eval_records)
  ours = metrics.roc_auc_score(
      eval_labels, model(eval_ids, training=False).numpy().ravel())

  sizes = preprocessing.vocabulary_sizes(output, SPEC, linear=True)
  train_labels, train_ids = _transformed(output, train_records)
  reference = linear_model.LogisticRegressionCV(
      Cs=np.logspace(-3, 0, 7), cv=5, scoring="roc_auc", solver="liblinear",
      max_iter=1000).fit(_one_hot(train_ids, sizes), train_labels)
  theirs = metrics.roc_auc_score(
      eval_labels, reference.decision_function(_one_hot(eval_ids, sizes)))
  print(f"eval rows {len(eval_labels)}: scikit-learn AUC {theirs:.4f} "
        f"(C {reference.C_[0]:g}), ours {ours:.4f} (C {record['c']:g}, "
        f"{record['seconds']:.1f} s; grid {record['grid']})")
  assert theirs > 0.6  # Both learn something: the gap means a fit.
  assert theirs - ours < MAX_GAP
  assert record["c"] in model_building.BASELINE_C_GRID
  assert [g["c"] for g in record["grid"]] == list(
      model_building.BASELINE_C_GRID[:len(record["grid"])])
  # Calibrated without a recentring on the validation slice's few rows:
  # the intercept is free, so at the optimum the mean prediction on the
  # rows fitted (both parts) is their click rate.
  predictions, labels = [], []
  for part in (data.train, data.validation):
    for features, label in part:
      predictions.append(tf.sigmoid(model(features, training=False))
                         .numpy().ravel())
      labels.append(label.numpy().ravel())
  assert np.mean(np.concatenate(predictions)) == pytest.approx(
      np.mean(np.concatenate(labels)), abs=2e-4)


def test_baseline_rows_caps_the_rows_fitted(run, caplog):
  """--baseline-rows: the first N training rows, said in the log and the
  record; the validation slice still chooses C."""
  train_files, _, _, output = run
  settings = TrainerSettings(dataset="criteo", seed=0, baseline_rows=5_000)
  data = input_pipeline.training_data(train_files, output, SPEC.label, 1024,
                                      seed=0)
  _, record = trainer.train_baseline(
      plan_lib.resolve(settings, {}, data.train_examples), data, output)
  assert record["train_rows"] == 5_000 < data.train_examples
  assert record["best"]["val_auc"] > 0.6
  assert f"on the first 5000 of the {data.train_examples} training rows: " \
         "--baseline-rows" in caplog.text
