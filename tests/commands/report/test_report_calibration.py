"""Calibration by bucket: the decile merge against NumPy, the bias and its
variance, and the report section of a hand-built run (no TFMA)."""

import os

import numpy as np
import pytest

from commands.report import calibration as rc
from commands.report import pages as report
from commands.report.reading import Evaluation
from commands.report.reading import ReliabilityPoint
from commands.report.reading import RunSummary
from commands.report.reading import SliceMetrics
from trainer_module import contract


def _plot_buckets(predictions, labels, num_buckets=1000):
  """What TFMA's CalibrationPlot holds: fixed-width buckets of the
  prediction with their counts and label and prediction sums."""
  index = np.minimum((predictions * num_buckets).astype(int),
                     num_buckets - 1)
  points = []
  for b in np.unique(index):
    members = index == b
    points.append(ReliabilityPoint(float(predictions[members].mean()),
                                   float(labels[members].mean()),
                                   float(members.sum())))
  return points


def test_merge_is_exact_when_fine_buckets_hold_one_decile_step():
  # 100 distinct predictions, 7 examples each: every decile is exactly 10
  # fine buckets, so the merge equals NumPy's deciles of the examples.
  rng = np.random.default_rng(0)
  predictions = np.repeat(np.arange(100) / 1000 + 5e-4, 7)
  labels = (rng.random(predictions.size) < predictions * 5).astype(float)
  merged = rc.decile_buckets(_plot_buckets(predictions, labels))
  order = np.argsort(predictions, kind="stable")
  for bucket, chunk in zip(merged, np.array_split(order, 10)):
    assert bucket.examples == len(chunk)
    assert bucket.mean_prediction == pytest.approx(predictions[chunk].mean())
    assert bucket.mean_label == pytest.approx(labels[chunk].mean())
    assert bucket.bias == pytest.approx(
        labels[chunk].mean() - predictions[chunk].mean())
  assert len(merged) == 10


def test_merge_approximates_deciles_and_keeps_the_sums():
  rng = np.random.default_rng(1)
  predictions = rng.beta(1.2, 30.0, 20_000)  # CTR around 4%.
  labels = (rng.random(predictions.size) < predictions).astype(float)
  points = _plot_buckets(predictions, labels)
  merged = rc.merge_by_count(points, 10)
  assert len(merged) == 10
  assert sum(p.examples for p in merged) == predictions.size
  assert sum(p.observed_rate * p.examples for p in merged) == pytest.approx(
      labels.sum())
  assert sum(p.mean_prediction * p.examples for p in merged) == (
      pytest.approx(predictions.sum()))
  # Each decile is within one fine bucket of a tenth of the examples.
  biggest = max(p.examples for p in points)
  exact = np.array_split(np.sort(predictions), 10)
  for group, reference in zip(merged, exact):
    assert abs(group.examples - len(reference)) <= biggest
    assert group.mean_prediction == pytest.approx(reference.mean(), rel=0.05)
  assert [p.mean_prediction for p in merged] == sorted(
      p.mean_prediction for p in merged)


def test_bias_variance_and_calibration():
  buckets = [rc.CalibrationBucket("a", 10, 0.10, 0.12),
             rc.CalibrationBucket("b", 30, 0.20, 0.16),
             rc.CalibrationBucket("c", 5, 0.0, 0.01)]
  biases = np.array([-0.02, 0.04, -0.01])
  assert [b.bias for b in buckets] == pytest.approx(biases)
  assert rc.bias_variance(buckets) == pytest.approx(np.var(biases))
  assert buckets[0].calibration == pytest.approx(1.2)
  assert buckets[2].calibration is None


def _slice(feature, value, examples, label, prediction):
  return SliceMetrics(feature, value, {
      "example_count": examples, "auc": 0.7, "mean_label": label,
      "mean_prediction": prediction, "calibration": prediction / label},
                      None)


def test_report_page_shows_the_calibration_buckets(tmp_path):
  rng = np.random.default_rng(2)
  predictions = rng.beta(1.5, 20.0, 5000)
  labels = (rng.random(predictions.size) < predictions).astype(float)
  evaluation = Evaluation(
      uri="/evaluation/1", overall={"example_count": 5000.0, "auc": 0.7},
      baseline_overall=None,
      slices=(_slice(contract.ID_FREQUENCY, "rare", 1000.0, 0.05, 0.07),
              _slice(contract.ID_FREQUENCY, "frequent", 4000.0, 0.08, 0.075),
              _slice("C6", "abc", 3000.0, 0.07, 0.07),
              _slice("C6", "xyz", 2000.0, 0.06, 0.08)),
      reliability={"candidate": tuple(_plot_buckets(predictions, labels))},
      validation_ok=True)
  run = RunSummary(str(tmp_path), evaluation=evaluation, training={})
  page = open(report.write_run_page(run), encoding="utf-8").read()
  assert "<h2>Calibration by bucket</h2>" in page
  frequency = rc.bias_variance([rc.CalibrationBucket("", 1, 0.05, 0.07),
                                rc.CalibrationBucket("", 1, 0.08, 0.075)])
  assert (f"<h3>{contract.ID_FREQUENCY}: bucket-bias variance "
          f"{frequency:.3e}</h3>") in page
  assert "<h3>C6: bucket-bias variance 1.000e-04</h3>" in page
  deciles = rc.decile_buckets(evaluation.reliability["candidate"])
  assert (f"<h3>{rc.DECILE_AXIS}: bucket-bias variance "
          f"{rc.bias_variance(deciles):.3e}</h3>") in page
  assert f"<td class='num'>{deciles[0].bias:+.4f}</td>" in page
  assert "<td class='num'>-0.0200</td>" in page  # rare: 0.05 - 0.07.
  figure = os.path.join(str(tmp_path), report.REPORT_DIR,
                        report.CALIBRATION_BUCKETS_FIGURE)
  with open(figure, "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"
