"""Statistics of scored rows with their standard errors: the gate's, and
the Trainer's choice of the served model.

A comparison of point estimates decides on noise: at 1,787 eval rows and a
17% click rate the mean label alone is uncertain by about +-5%, and an AUC
from a few thousand rows by about +-0.01, ten times the 0.001 margins. Each
function here gives an estimate and its standard error, so the gate
(components.gate_metrics) and served_model.choose_served check a confidence
bound instead. docs/gate.md has the maths and measurements.

Paired where two scores of the same rows are compared (model against
logistic regression, candidate against the served model): the rows' noise
is shared, so the difference is much more precise than either value.
NumPy only, so that every layer above can use it.
"""

import dataclasses
import statistics
from typing import Tuple

import numpy as np

# The confidence of every interval the gate checks and reports.
CONFIDENCE = 0.95
Z = statistics.NormalDist().inv_cdf(0.5 + CONFIDENCE / 2)
# The same confidence on one side: a test of "higher", not of "different".
Z_ONE_SIDED = statistics.NormalDist().inv_cdf(CONFIDENCE)
# Predictions are clipped to [EPSILON, 1 - EPSILON] in the log loss (Keras').
EPSILON = 1e-7


@dataclasses.dataclass(frozen=True)
class Estimate:
  """A statistic of the eval rows and its standard error."""
  value: float
  standard_error: float

  def interval(self, z: float = Z) -> Tuple[float, float]:
    """The two-sided normal interval, at CONFIDENCE by default."""
    return (self.value - z * self.standard_error,
            self.value + z * self.standard_error)

  def lower_bound(self) -> float:
    """The one-sided lower confidence bound, at CONFIDENCE: the value is
    above zero beyond noise when this is."""
    return self.value - Z_ONE_SIDED * self.standard_error


def _binary(labels: np.ndarray) -> np.ndarray:
  """The labels as booleans; AUC's pairs are of clicks and non-clicks."""
  labels = np.asarray(labels)
  if not np.isin(labels, (0, 1)).all():
    raise ValueError("the gate's AUC intervals need labels 0 or 1; got "
                     f"{np.unique(labels)[:5]}")
  return labels == 1


def _placements(positive: np.ndarray, negative: np.ndarray
               ) -> Tuple[np.ndarray, np.ndarray]:
  """DeLong's structural components: per positive, the share of negatives
  scored below it; per negative, the share of positives scored above it
  (ties count half). Their means are the AUC."""
  below = np.sort(negative)
  above = np.sort(positive)
  v10 = (np.searchsorted(below, positive, "left") +
         np.searchsorted(below, positive, "right")) / (2 * len(negative))
  v01 = 1 - (np.searchsorted(above, negative, "left") +
             np.searchsorted(above, negative, "right")) / (2 * len(positive))
  return v10, v01


def delong(labels: np.ndarray, *scores: np.ndarray
          ) -> Tuple[np.ndarray, np.ndarray]:
  """(AUC of each score, their covariance matrix) by DeLong, DeLong and
  Clarke-Pearson (1988): exact on the rows, O(n log n). NaN without both
  classes (or with a single row of one: no variance)."""
  positive = _binary(labels)
  m, n = int(positive.sum()), int((~positive).sum())
  k = len(scores)
  if m == 0 or n == 0:
    return np.full(k, np.nan), np.full((k, k), np.nan)
  v10, v01 = zip(*(_placements(np.asarray(s, np.float64)[positive],
                               np.asarray(s, np.float64)[~positive])
                   for s in scores))
  aucs = np.array([v.mean() for v in v10])
  if m < 2 or n < 2:
    return aucs, np.full((k, k), np.nan)
  covariance = (np.atleast_2d(np.cov(np.stack(v10))) / m +
                np.atleast_2d(np.cov(np.stack(v01))) / n)
  return aucs, covariance


def auc(labels: np.ndarray, scores: np.ndarray) -> Estimate:
  aucs, covariance = delong(labels, scores)
  return Estimate(float(aucs[0]), float(np.sqrt(covariance[0, 0])))


def auc_difference(labels: np.ndarray, first: np.ndarray,
                   second: np.ndarray) -> Estimate:
  """AUC(first) - AUC(second) on the same rows, paired (DeLong)."""
  return paired_aucs(labels, first, second)[1]


def paired_aucs(labels: np.ndarray, first: np.ndarray, second: np.ndarray
               ) -> Tuple[np.ndarray, Estimate]:
  """(both AUCs, auc_difference) from one DeLong pass over the rows."""
  aucs, c = delong(labels, first, second)
  variance = c[0, 0] + c[1, 1] - 2 * c[0, 1]
  return aucs, Estimate(float(aucs[0] - aucs[1]),
                        float(np.sqrt(max(variance, 0.0))))


def log_loss(labels: np.ndarray, predictions: np.ndarray) -> np.ndarray:
  """Per row, the binary cross entropy of a predicted probability."""
  p = np.clip(np.asarray(predictions, np.float64), EPSILON, 1 - EPSILON)
  y = np.asarray(labels, np.float64)
  return -(y * np.log(p) + (1 - y) * np.log(1 - p))


def _mean(values: np.ndarray) -> Estimate:
  n = len(values)
  return Estimate(float(np.mean(values)) if n else float("nan"),
                  float(np.std(values, ddof=1) / np.sqrt(n)) if n > 1
                  else float("nan"))


def log_loss_difference(labels: np.ndarray, first: np.ndarray,
                        second: np.ndarray) -> Estimate:
  """Mean log loss of first minus second on the same rows: the mean of the
  rows' paired differences."""
  return _mean(log_loss(labels, first) - log_loss(labels, second))


def calibration(labels: np.ndarray, predictions: np.ndarray) -> Estimate:
  """Mean prediction / mean label, with the delta method's standard error
  from the variances of both means and their covariance:
  Var(P/Y) ~ Var(p - r*y) / (n * mean(y)^2) at r = P/Y."""
  y = np.asarray(labels, np.float64)
  p = np.asarray(predictions, np.float64)
  n, total = len(y), float(np.sum(y))
  if n < 2 or total <= 0:
    return Estimate(float("nan"), float("nan"))
  ratio = float(np.sum(p)) / total
  return Estimate(ratio, float(np.std(p - ratio * y, ddof=1) *
                               np.sqrt(n) / total))
