"""The gate's statistics against independent NumPy references: DeLong's
covariance against Sun & Xu's fast DeLong (midranks), the calibration
ratio's delta method against its long form and against simulation."""

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from trainer_module import paired_statistics


def _midranks(x):
  """Sun & Xu (2014), compute_midrank: 1-based ranks, ties averaged."""
  order = np.argsort(x)
  z = x[order]
  n = len(x)
  t = np.zeros(n)
  i = 0
  while i < n:
    j = i
    while j < n and z[j] == z[i]:
      j += 1
    t[i:j] = 0.5 * (i + j - 1) + 1
    i = j
  ranks = np.empty(n)
  ranks[order] = t
  return ranks


def _fast_delong(labels, scores):
  """Sun & Xu (2014), fastDeLong: AUCs and covariance from midranks of the
  positives, the negatives and all rows."""
  positive = labels == 1
  m, n = positive.sum(), (~positive).sum()
  k = len(scores)
  tx = np.stack([_midranks(s[positive]) for s in scores])
  ty = np.stack([_midranks(s[~positive]) for s in scores])
  tz = np.stack([_midranks(np.concatenate([s[positive], s[~positive]]))
                 for s in scores])
  aucs = tz[:, :m].sum(axis=1) / m / n - (m + 1.0) / 2.0 / n
  v01 = (tz[:, :m] - tx) / n
  v10 = 1.0 - (tz[:, m:] - ty) / m
  cov = np.cov(v01).reshape(k, k) / m + np.cov(v10).reshape(k, k) / n
  return aucs, cov


def _data(rows, seed, ties=False):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=rows)
  labels = (rng.random(rows) < 1 / (1 + np.exp(1.5 - x))).astype(float)
  a = x + rng.normal(size=rows)
  b = 0.7 * x + rng.normal(size=rows)
  if ties:  # Scores on a coarse grid: many tied pairs.
    a, b = np.round(a, 1), np.round(b, 1)
  return labels, a, b


@pytest.mark.parametrize("ties", [False, True])
def test_delong_matches_the_fast_delong_reference(ties):
  labels, a, b = _data(3000, seed=1, ties=ties)
  aucs, cov = paired_statistics.delong(labels, a, b)
  expected_aucs, expected_cov = _fast_delong(labels, [a, b])
  np.testing.assert_allclose(aucs, expected_aucs, rtol=0, atol=1e-12)
  np.testing.assert_allclose(cov, expected_cov, rtol=1e-9, atol=0)
  assert aucs[0] == pytest.approx(roc_auc_score(labels, a), abs=1e-12)


def test_paired_difference_is_far_tighter_than_either_auc():
  labels, a, b = _data(3000, seed=2)
  aucs, cov = paired_statistics.delong(labels, a, b)
  diff = paired_statistics.auc_difference(labels, a, b)
  assert diff.value == pytest.approx(aucs[0] - aucs[1])
  assert diff.standard_error == pytest.approx(
      np.sqrt(cov[0, 0] + cov[1, 1] - 2 * cov[0, 1]))
  single = paired_statistics.auc(labels, a)
  assert single.standard_error == pytest.approx(np.sqrt(cov[0, 0]))
  # The same rows' noise cancels: correlated scores, a tighter difference.
  assert diff.standard_error < np.sqrt(cov[0, 0] + cov[1, 1])


def test_auc_interval_covers_as_stated():
  """DeLong's 95% interval of AUC(a) - AUC(b) covers the true difference
  (here 0: the same scorer) in ~95% of repeated samples."""
  rng = np.random.default_rng(3)
  covered = 0
  trials = 400
  for _ in range(trials):
    x = rng.normal(size=500)
    labels = (rng.random(500) < 1 / (1 + np.exp(1.0 - x))).astype(float)
    a = x + rng.normal(size=500)
    b = x + rng.normal(size=500)
    low, high = paired_statistics.auc_difference(labels, a, b).interval()
    covered += low <= 0 <= high
  assert 0.92 <= covered / trials <= 0.98


def test_the_one_sided_bound_is_at_the_same_confidence():
  estimate = paired_statistics.Estimate(0.01, 0.004)
  # NormalDist().inv_cdf(0.95): 5% of the mass above 1.6449 SE.
  assert estimate.lower_bound() == pytest.approx(0.01 - 1.6448536 * 0.004)
  assert estimate.interval()[0] < estimate.lower_bound() < estimate.value


def test_no_auc_without_both_classes():
  aucs, cov = paired_statistics.delong(np.zeros(5), np.arange(5.0))
  assert np.isnan(aucs).all() and np.isnan(cov).all()
  with pytest.raises(ValueError, match="labels 0 or 1"):
    paired_statistics.delong(np.array([0, 0.5, 1]), np.arange(3.0))


def test_log_loss_difference_is_the_mean_of_paired_differences():
  labels, a, b = _data(2000, seed=4)
  pa, pb = 1 / (1 + np.exp(1.5 - a)), 1 / (1 + np.exp(1.5 - b))
  d = (-(labels * np.log(pa) + (1 - labels) * np.log(1 - pa)) +
       (labels * np.log(pb) + (1 - labels) * np.log(1 - pb)))
  got = paired_statistics.log_loss_difference(labels, pa, pb)
  assert got.value == pytest.approx(d.mean(), rel=1e-9)
  assert got.standard_error == pytest.approx(
      d.std(ddof=1) / np.sqrt(len(d)), rel=1e-9)


def test_calibration_delta_method_matches_its_long_form():
  rng = np.random.default_rng(5)
  p = rng.beta(2, 10, size=1787)
  labels = (rng.random(1787) < p * 1.1).astype(float)
  got = paired_statistics.calibration(labels, p)
  n, mean_p, mean_y = len(p), p.mean(), labels.mean()
  cov = np.cov(p, labels) / n  # Of the two means.
  ratio = mean_p / mean_y
  variance = ratio ** 2 * (cov[0, 0] / mean_p ** 2 + cov[1, 1] / mean_y ** 2
                           - 2 * cov[0, 1] / (mean_p * mean_y))
  assert got.value == pytest.approx(ratio, rel=1e-12)
  assert got.standard_error == pytest.approx(np.sqrt(variance), rel=1e-9)


def test_calibration_standard_error_matches_simulation():
  """The delta method's SE against the spread of the ratio over 2,000
  independent samples of 1,787 rows at a 17% click rate (Avazu's)."""
  rng = np.random.default_rng(6)
  rows, trials = 1787, 2000
  p = np.clip(rng.beta(1.7, 8.3, size=(trials, rows)), 1e-4, 1)
  labels = (rng.random((trials, rows)) < p).astype(float)
  ratios = p.sum(axis=1) / labels.sum(axis=1)
  predicted = np.median([paired_statistics.calibration(labels[i], p[i])
                         .standard_error for i in range(50)])
  assert predicted == pytest.approx(ratios.std(), rel=0.08)
  assert 0.04 < predicted < 0.07  # The issue's ~+-5% at this size.
