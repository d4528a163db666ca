"""Calibration by bucket ("On the Factory Floor", §7) for the report.

The paper calls label minus prediction the calibration bias and wants it
near 0 in every bucket, not only overall: by predicted CTR, by id frequency
and by the slice features. Nothing is recomputed here; every bucket comes
from what TFMA already wrote for the Evaluator:

* Deciles of predicted CTR: TFMA's CalibrationPlot (fixed-width buckets
  of the prediction, with their example count and label and prediction
  sums), merged in prediction order into DECILES groups of about equal
  example count (merge_by_count). Approximation: a fine bucket is never
  split, so a decile's size is off by up to one fine bucket's examples, and
  examples with equal predictions share a decile. With the Evaluator's
  CALIBRATION_PLOT_BUCKETS (width 1/1000) this is fine at CTRs of a few %.
* Id-frequency buckets and each slice feature's values: TFMA's per-slice
  MeanLabel, MeanPrediction and Calibration (slices below the report's
  min_slice_size are already left out).

The bucket-bias variance of an axis is the population variance, over its
buckets, of (mean label - mean prediction), unweighted: every bucket counts
the same, as the paper's uniformity goal asks.
"""

import dataclasses
import statistics
from typing import Dict, List, Optional, Sequence

from matplotlib.figure import Figure

from commands.report.figures import save
from commands.report.reading import Evaluation
from commands.report.reading import ReliabilityPoint
from trainer_module import contract

DECILES = 10
DECILE_AXIS = "predicted CTR decile"


@dataclasses.dataclass(frozen=True)
class CalibrationBucket:
  """One bucket of one axis: its examples and mean label and prediction."""
  name: str
  examples: float
  mean_label: float
  mean_prediction: float

  @property
  def bias(self) -> float:
    """Label minus prediction (the paper's sign)."""
    return self.mean_label - self.mean_prediction

  @property
  def calibration(self) -> Optional[float]:
    """Mean prediction / mean label (TFMA's Calibration); None: no label."""
    return (self.mean_prediction / self.mean_label if self.mean_label
            else None)


def merge_by_count(points: Sequence[ReliabilityPoint], groups: int
                  ) -> List[ReliabilityPoint]:
  """Fine calibration-plot buckets merged, in prediction order, into at
  most `groups` of about equal example count.

  A fine bucket joins the group its count's midpoint falls in (cumulative
  count), so no bucket is split; empty groups are dropped. Label and
  prediction sums add up exactly.
  """
  ordered = sorted((p for p in points if p.examples > 0),
                   key=lambda p: p.mean_prediction)
  total = sum(p.examples for p in ordered)
  sums = [[0.0, 0.0, 0.0] for _ in range(groups)]  # examples, label, pred.
  seen = 0.0
  for point in ordered:
    group = min(int(groups * (seen + point.examples / 2) / total),
                groups - 1)
    seen += point.examples
    sums[group][0] += point.examples
    sums[group][1] += point.observed_rate * point.examples
    sums[group][2] += point.mean_prediction * point.examples
  return [ReliabilityPoint(prediction / examples, label / examples, examples)
          for examples, label, prediction in sums if examples > 0]


def decile_buckets(points: Sequence[ReliabilityPoint]
                  ) -> List[CalibrationBucket]:
  """The predicted-CTR deciles of a calibration plot's buckets."""
  return [CalibrationBucket(f"D{i}", p.examples, p.observed_rate,
                            p.mean_prediction)
          for i, p in enumerate(merge_by_count(points, DECILES), start=1)]


def slice_buckets(evaluation: Evaluation
                 ) -> Dict[str, List[CalibrationBucket]]:
  """{slice feature: its values' buckets}, id frequency first, values
  largest first."""
  axes = {}
  for s in evaluation.slices:
    metrics = s.candidate
    if "mean_label" not in metrics or "mean_prediction" not in metrics:
      continue
    axes.setdefault(s.feature, []).append(CalibrationBucket(
        s.value, metrics.get("example_count", 0.0), metrics["mean_label"],
        metrics["mean_prediction"]))
  order = sorted(axes, key=lambda f: (f != contract.ID_FREQUENCY, f))
  return {feature: sorted(axes[feature], key=lambda b: -b.examples)
          for feature in order}


def calibration_axes(evaluation: Evaluation
                    ) -> Dict[str, List[CalibrationBucket]]:
  """Every axis of the section: deciles (when TFMA computed the plot),
  then the slices."""
  axes = {}
  points = evaluation.reliability.get("candidate")
  if points:
    axes[DECILE_AXIS] = decile_buckets(points)
  axes.update(slice_buckets(evaluation))
  return axes


def bias_variance(buckets: Sequence[CalibrationBucket]) -> float:
  """Population variance of the buckets' bias (0 for one bucket)."""
  return statistics.pvariance([b.bias for b in buckets])


def rows(buckets: Sequence[CalibrationBucket]) -> List[List[str]]:
  """Table rows: bucket, examples, mean label, mean prediction, bias,
  calibration."""
  return [[b.name, f"{b.examples:,.0f}", f"{b.mean_label:.4f}",
           f"{b.mean_prediction:.4f}", f"{b.bias:+.4f}",
           "-" if b.calibration is None else f"{b.calibration:.4f}"]
          for b in buckets]


HEADER = ("bucket", "examples", "mean label", "mean prediction",
          "bias (label - prediction)", "calibration")


def plot(axes: Dict[str, Sequence[CalibrationBucket]], path: str) -> str:
  """Bias per bucket, one panel per axis (at most the 12 largest buckets
  of a slice feature)."""
  figure = Figure(figsize=(5 * min(len(axes), 3),
                           3.6 * ((len(axes) + 2) // 3)),
                  layout="constrained")
  panels = figure.subplots((len(axes) + 2) // 3, min(len(axes), 3),
                           squeeze=False).ravel()
  for panel, (name, buckets) in zip(panels, axes.items()):
    shown = list(buckets)[:12]
    panel.bar(range(len(shown)), [b.bias for b in shown],
              color=["C3" if b.bias < 0 else "C0" for b in shown])
    panel.axhline(0.0, color="grey", linewidth=0.8)
    panel.set_xticks(range(len(shown)), [b.name[:10] for b in shown],
                     rotation=45, fontsize=7)
    panel.set_title(f"{name}: var {bias_variance(buckets):.2e}",
                    fontsize=9)
    panel.set_ylabel("label - prediction")
  for panel in panels[len(axes):]:
    panel.set_visible(False)
  return save(figure, path)
