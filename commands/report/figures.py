"""The report's figures: calibration, AUC by id frequency, training curves.

PNG files drawn with matplotlib's Agg canvas (no display), from the
RunSummary's parts (commands.report.reading).
"""

import os
from typing import List, Mapping, Optional, Sequence

from matplotlib import ticker
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from commands.report.reading import ReliabilityPoint
from commands.report.reading import SliceMetrics
from commands.report.text import format_metric
from commands.report.text import SLICE_METRICS
from trainer_module import contract

# training.json history curves: (panel title, metric); Keras logs the
# validation value as "val_" + metric.
TRAINING_CURVES = (("loss", "loss"), ("AUC", "auc"))

def save(figure: Figure, path: str) -> str:
  FigureCanvasAgg(figure)
  figure.savefig(path, dpi=100)
  return os.path.basename(path)


def plot_reliability(reliability: Mapping[str, Sequence[ReliabilityPoint]],
                     path: str) -> str:
  """Reliability diagram: observed click rate against mean prediction."""
  figure = Figure(figsize=(5.5, 5), layout="constrained")
  axes = figure.subplots()
  top = max(max(p.mean_prediction, p.observed_rate)
            for points in reliability.values() for p in points)
  axes.plot([0, top], [0, top], color="grey", linestyle="--",
            label="perfectly calibrated")
  biggest = max(p.examples for points in reliability.values()
                for p in points)
  for model, points in reliability.items():
    axes.scatter([p.mean_prediction for p in points],
                 [p.observed_rate for p in points],
                 s=[8 + 200 * p.examples / biggest for p in points],
                 alpha=0.6, label=model)
  axes.set_xlabel("mean prediction (bucket)")
  axes.set_ylabel("observed click rate")
  axes.set_title("Reliability (TFMA calibration plot; size: examples)")
  axes.legend()
  return save(figure, path)


def bucket_order(values) -> List[str]:
  known = [b for b in contract.FREQUENCY_BUCKETS if b in values]
  return known + sorted(set(values) - set(known))


def grouped_bars(axes, groups: Sequence[str],
                  series: Mapping[str, Sequence[Optional[float]]]) -> None:
  width = 0.8 / max(len(series), 1)
  for i, (label, values) in enumerate(series.items()):
    positions = [g + (i - (len(series) - 1) / 2) * width
                 for g in range(len(groups))]
    bars = axes.bar(positions, [v or 0.0 for v in values], width,
                    label=label)
    axes.bar_label(bars, labels=[format_metric("", v) for v in values],
                   fontsize=7)
  axes.set_xticks(range(len(groups)), groups)


def plot_id_frequency(slices: Sequence[SliceMetrics], path: str) -> str:
  """AUC and calibration per id-frequency bucket (and the baseline's)."""
  by_value = {s.value: s for s in slices}
  order = bucket_order(by_value)
  groups = [f"{v}\n({format_metric('example_count', count)})" for v, count in
            ((v, by_value[v].candidate.get("example_count")) for v in order)]
  figure = Figure(figsize=(10, 4), layout="constrained")
  for axes, metric in zip(figure.subplots(1, len(SLICE_METRICS)),
                          SLICE_METRICS):
    series = {"model": [by_value[v].candidate.get(metric) for v in order]}
    if any(by_value[v].baseline for v in order):
      series["baseline"] = [(by_value[v].baseline or {}).get(metric)
                            for v in order]
    grouped_bars(axes, groups, series)
    if metric == "calibration":
      axes.axhline(1.0, color="grey", linestyle="--")
    axes.set_title(f"{metric} by {contract.ID_FREQUENCY} (examples)")
    axes.legend()
  return save(figure, path)


def plot_training(histories: Mapping[str, Mapping[str, Sequence[float]]],
                  path: str) -> str:
  """Loss and AUC per epoch, train and validation, of one or more runs."""
  figure = Figure(figsize=(10, 4), layout="constrained")
  for axes, (title, metric) in zip(figure.subplots(1, len(TRAINING_CURVES)),
                                   TRAINING_CURVES):
    for run, (label, history) in enumerate(histories.items()):
      prefix = f"{label}: " if len(histories) > 1 else ""
      for key, style in ((metric, "-"), (f"val_{metric}", "--")):
        if key in history:
          values = history[key]
          axes.plot(range(1, len(values) + 1), values, style, marker="o",
                    color=f"C{run}" if len(histories) > 1 else None,
                    label=prefix + key)
    axes.set_xlabel("epoch")
    axes.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
    axes.set_title(title)
    axes.legend()
  return save(figure, path)
