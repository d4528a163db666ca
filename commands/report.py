"""The human-readable report of a pipeline run: DIR/report/index.html.

Everything comes from what the run left in its output DIR: ML Metadata
(DIR/metadata.sqlite) says which artifacts exist and what each component of
the latest pipeline run did; TFMA's own loaders read the evaluation (metrics
of the candidate, of the baseline and TFMA's diffs, per slice; the
calibration plot; the validation); training.json next to the model says how
it was trained. Nothing is recomputed: the page shows TFMA's numbers.

The page is static HTML with PNG figures (matplotlib, Agg), so it opens from
disk, is archived with the run, and needs no server. A run that stopped early
still gets a page saying what exists. `python -m pipeline report DIR
[--compare OTHER_DIR]` writes it and prints the summary.
"""

import dataclasses
import html
import json
import logging
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence
from typing import Tuple

from matplotlib import ticker
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from ml_metadata.proto import metadata_store_pb2
import tensorflow as tf
import tensorflow_model_analysis as tfma
from tensorflow_model_analysis.writers import eval_config_writer
from tfx.components.evaluator import constants as evaluator_constants
from tfx.utils import io_utils
from tfx.utils import path_utils

from components import tuner as tuner_component
from pipeline import metadata
from pipeline import runner
from pipeline.config import DEFAULT_MIN_SLICE_SIZE
from pipeline.config import PipelineConfig
from trainer_module import contract

REPORT_DIR = "report"
INDEX_PAGE = "index.html"
COMPARE_PAGE = "compare.html"
RELIABILITY_FIGURE = "reliability.png"
ID_FREQUENCY_FIGURE = "id_frequency.png"
TRAINING_FIGURE = "training.png"
COMPARE_ID_FREQUENCY_FIGURE = "compare_id_frequency.png"
COMPARE_TRAINING_FIGURE = "compare_training.png"

# TFMA names of the metrics shown first, in this order; the others follow
# alphabetically.
LEADING_METRICS = ("example_count", "auc", "binary_crossentropy",
                   "calibration", "mean_label", "mean_prediction")
# Shown per slice (with the example count).
SLICE_METRICS = ("auc", "calibration")
# training.json history curves: (panel title, metric); Keras logs the
# validation value as "val_" + metric.
TRAINING_CURVES = (("loss", "loss"), ("AUC", "auc"))
DIFF_SUFFIX = "_diff"  # TFMA's name suffix of candidate-minus-baseline.
# How _flat_metrics names the logistic-regression output's metrics.
LR_PREFIX = contract.LR_OUTPUT + "/"

Metrics = Dict[str, float]


class ReportError(ValueError):
  """The directory is not a pipeline output directory."""


@dataclasses.dataclass(frozen=True)
class SliceMetrics:
  """TFMA's metrics of one slice (one value of one feature)."""
  feature: str
  value: str
  candidate: Metrics
  baseline: Optional[Metrics]


@dataclasses.dataclass(frozen=True)
class ReliabilityPoint:
  """One non-empty bucket of TFMA's calibration plot."""
  mean_prediction: float
  observed_rate: float
  examples: float


@dataclasses.dataclass(frozen=True)
class Evaluation:
  """What TFMA wrote for the Evaluator: candidate, baseline, diffs, plots.

  Attributes:
    uri: the evaluation artifact's directory.
    overall: the candidate's overall metrics, with TFMA's diffs against the
      baseline as '<metric>_diff' when there was a baseline.
    baseline_overall: the baseline's overall metrics (None: no baseline).
    slices: every single-feature slice TFMA reported.
    reliability: calibration plot buckets of the overall slice, by model
      ('candidate', 'baseline'); empty when no CalibrationPlot was computed.
    validation_ok: TFMA's verdict on the thresholds.
  """
  uri: str
  overall: Metrics
  baseline_overall: Optional[Metrics]
  slices: Tuple[SliceMetrics, ...]
  reliability: Mapping[str, Tuple[ReliabilityPoint, ...]]
  validation_ok: bool


@dataclasses.dataclass(frozen=True)
class RunSummary:
  """Everything the report shows about one output DIR.

  Attributes:
    output_dir: the run's output DIR.
    pipeline_run: id of the latest pipeline run in ML Metadata (None: none).
    components: the components of that run, in execution order.
    outcome: the runner's reading of ML Metadata (None: no store).
    blessed: the latest ModelBlessing's verdict (None: no blessing).
    baseline_model: the model the Evaluator compared against, if any.
    earlier: the shown artifacts (by type) that the latest pipeline run did
      not produce: they are from an earlier run in the same DIR.
    evaluation: the evaluation (None: none, or unreadable: see problems).
    training: the model's training.json (None: none).
    tuned_values: the best hyperparameters of a Tuner (or of an imported
      tuning result), None when the run was not tuned.
    trials: the Tuner's trial table, when its tuner_results have one.
    problems: what could not be read, one line each.
  """
  output_dir: str
  pipeline_run: Optional[str] = None
  components: Tuple[metadata.ComponentState, ...] = ()
  outcome: Optional[metadata.RunOutcome] = None
  blessed: Optional[bool] = None
  baseline_model: Optional[str] = None
  earlier: Tuple[str, ...] = ()
  evaluation: Optional[Evaluation] = None
  training: Optional[Dict[str, Any]] = None
  tuned_values: Optional[Dict[str, Any]] = None
  trials: Tuple[Dict[str, Any], ...] = ()
  problems: Tuple[str, ...] = ()


def format_metric(name: str, value: Optional[float]) -> str:
  """How the report writes a metric value (counts as integers)."""
  if value is None:
    return "-"
  diff = name.endswith(DIFF_SUFFIX)
  if name.removesuffix(DIFF_SUFFIX) == "example_count":
    return f"{value:+,.0f}" if diff else f"{value:,.0f}"
  return f"{value:+.4f}" if diff else f"{value:.4f}"


def _metric_order(names) -> List[str]:
  return sorted(set(names), key=lambda n: (
      LEADING_METRICS.index(n) if n in LEADING_METRICS
      else len(LEADING_METRICS), n))


# --- Reading --------------------------------------------------------------


def _scalar(value: Mapping[str, Any]) -> Optional[float]:
  """A metric value of TFMA's dict form, or None if it is not a number."""
  if "doubleValue" in value:
    return float(value["doubleValue"])
  if "value" in value.get("boundedValue", {}):
    return float(value["boundedValue"]["value"])
  return None


def _flat_metrics(by_output: Optional[Mapping[str, Any]]) -> Metrics:
  """{name: value} from TFMA's {output: {sub_key: {name: value}}}."""
  metrics = {}
  for output, by_sub_key in (by_output or {}).items():
    for sub_key, values in by_sub_key.items():
      for name, value in values.items():
        number = _scalar(value)
        if number is not None:
          metrics["/".join(filter(None, (output, sub_key, name)))] = number
  return metrics


def _slice_value(value: Any) -> str:
  return value.decode() if isinstance(value, bytes) else str(value)


def _metrics_by_slice(result: tfma.EvalResult) -> Dict[Tuple, Metrics]:
  return {key: _flat_metrics(metrics)
          for key, metrics in result.slicing_metrics}


def _reliability(result: tfma.EvalResult) -> Tuple[ReliabilityPoint, ...]:
  """The overall slice's calibration buckets that hold examples."""
  points = []
  for key, by_output in result.plots:
    if key != ():
      continue
    for by_sub_key in (by_output or {}).values():
      for plot in by_sub_key.values():
        for bucket in plot.get("calibrationHistogramBuckets",
                               {}).get("buckets", []):
          count = float(bucket.get("numWeightedExamples", 0.0))
          if count > 0:
            points.append(ReliabilityPoint(
                float(bucket.get("totalWeightedRefinedPrediction", 0.0)) /
                count,
                float(bucket.get("totalWeightedLabel", 0.0)) / count, count))
  return tuple(points)


def read_evaluation(uri: str,
                    min_slice_size: int = DEFAULT_MIN_SLICE_SIZE
                   ) -> Evaluation:
  """The evaluation TFMA wrote at `uri`, with or without a baseline.

  Slices with fewer than `min_slice_size` examples are left out: noise.
  """
  eval_config = eval_config_writer.load_eval_run(uri)[0]
  if eval_config is None:
    raise ReportError(f"{uri} holds no TFMA eval_config.json: not an "
                      "Evaluator output")
  specs = list(eval_config.model_specs)
  candidate_spec = next(s for s in specs if not s.is_baseline)
  baseline_spec = next((s for s in specs if s.is_baseline), None)
  candidate = tfma.load_eval_result(uri,
                                    model_name=candidate_spec.name or None)
  baseline = (tfma.load_eval_result(uri, model_name=baseline_spec.name)
              if baseline_spec else None)
  candidate_metrics = _metrics_by_slice(candidate)
  baseline_metrics = _metrics_by_slice(baseline) if baseline else {}
  slices = []
  for key, metrics in candidate_metrics.items():
    if key == () or not all(isinstance(column, str) for column, _ in key):
      continue  # The overall slice, or a cross slice.
    if metrics.get("example_count", 0.0) < min_slice_size:
      continue
    slices.append(SliceMetrics(
        feature=" x ".join(column for column, _ in key),
        value=", ".join(_slice_value(value) for _, value in key),
        candidate=metrics,
        baseline=baseline_metrics.get(key) if baseline else None))
  reliability = {"candidate": _reliability(candidate)}
  if baseline:
    reliability["baseline"] = _reliability(baseline)
  return Evaluation(
      uri=uri,
      overall=candidate_metrics.get((), {}),
      baseline_overall=baseline_metrics.get(()) if baseline else None,
      slices=tuple(slices),
      reliability={k: v for k, v in reliability.items() if v},
      validation_ok=tfma.load_validation_result(uri).validation_ok)


def read_training_record(model_uri: str) -> Optional[Dict[str, Any]]:
  """The model's training.json (trainer.run_fn writes it), or None."""
  path = os.path.join(path_utils.serving_model_path(model_uri),
                      contract.TRAINING_RECORD)
  if not tf.io.gfile.exists(path):
    return None
  with tf.io.gfile.GFile(path) as f:
    try:
      return json.load(f)
    except json.JSONDecodeError as error:
      raise ReportError(f"{path}: not valid JSON: {error}") from error


def _read_tuning(hyperparameters: metadata_store_pb2.Artifact,
                 tuner_results: Optional[metadata_store_pb2.Artifact]
                ) -> Tuple[Dict[str, Any], Tuple[Dict[str, Any], ...]]:
  """(best values, trial table) the way the Trainer reads the values.

  The trial table is empty when the tuner_results have none (a plain TFX
  Tuner's, or an imported tuning result).
  """
  path = io_utils.get_only_uri_in_dir(hyperparameters.uri)
  with tf.io.gfile.GFile(path) as f:
    values = json.load(f).get("values", {})
  try:
    trials = (tuple(tuner_component.read_trials(tuner_results.uri))
              if tuner_results else ())
  except FileNotFoundError:
    trials = ()
  return values, trials


def read_run(output_dir: str,
             min_slice_size: int = DEFAULT_MIN_SLICE_SIZE) -> RunSummary:
  """What the report shows about the pipeline output in `output_dir`.

  Parts that cannot be read are listed in `problems` instead of failing:
  the report of a broken run is when it is needed most.

  Raises:
    ReportError: `output_dir` does not exist.
  """
  if not os.path.isdir(output_dir):
    raise ReportError(f"{output_dir} is not a directory: pass the --output "
                      "DIR of a pipeline run")
  metadata_path = os.path.join(output_dir, "metadata.sqlite")
  if not os.path.exists(metadata_path):  # Opening it would create it.
    return RunSummary(output_dir, problems=(
        f"no ML Metadata store at {metadata_path}: no pipeline ran here",))
  store = metadata.open_store(metadata_path)
  found = {name: metadata.latest_artifact(store, name) for name in (
      "Model", "ModelEvaluation", "ModelBlessing", "PushedModel",
      "HyperParameters", "TunerResults")}
  pipeline_run, components, outputs = metadata.latest_pipeline_run(store)
  summary = {"pipeline_run": pipeline_run, "components": components,
             "earlier": tuple(name for name, artifact in found.items()
                              if artifact and pipeline_run
                              and artifact.id not in outputs)}
  blessing = found["ModelBlessing"]
  if blessing:
    properties = blessing.custom_properties
    summary["blessed"] = bool(properties[
        evaluator_constants.ARTIFACT_PROPERTY_BLESSED_KEY].int_value)
    baseline_key = evaluator_constants.ARTIFACT_PROPERTY_BASELINE_MODEL_URI_KEY
    if baseline_key in properties:
      summary["baseline_model"] = properties[baseline_key].string_value
  problems = []

  def attempt(what, read, *args):
    try:
      return read(*args)
    except Exception as error:  # pylint: disable=broad-except
      # Shown on the page: a report must not fail the run it describes.
      problems.append(f"could not read {what}: {type(error).__name__}: "
                      f"{error}")
      return None

  summary["outcome"] = attempt("the outcome from ML Metadata",
                               metadata.read_outcome_at, metadata_path)
  if found["ModelEvaluation"]:
    summary["evaluation"] = attempt(
        f"the evaluation {found['ModelEvaluation'].uri}", read_evaluation,
        found["ModelEvaluation"].uri, min_slice_size)
  if found["Model"]:
    summary["training"] = attempt(
        f"the training record of {found['Model'].uri}", read_training_record,
        found["Model"].uri)
  if found["HyperParameters"]:
    tuning = attempt("the tuning results", _read_tuning,
                     found["HyperParameters"], found["TunerResults"])
    if tuning:
      summary["tuned_values"], summary["trials"] = tuning
  return RunSummary(output_dir, problems=tuple(problems), **summary)


# --- Words ----------------------------------------------------------------


def push_verdict(run: RunSummary) -> str:
  """Whether the model was pushed, and why (or why not)."""
  outcome = run.outcome
  if outcome is None:
    return "unknown: ML Metadata could not be read"
  if outcome.pushed:
    return (f"yes: the Evaluator blessed the model, pushed to "
            f"{outcome.pushed_model}")
  if outcome.failed_checks:
    return "no: the Evaluator did not bless the model: " + "; ".join(
        outcome.failed_checks)
  if run.blessed is False:
    return "no: the Evaluator did not bless the model"
  if run.blessed:
    return "no: the model was blessed but the Pusher did not push it"
  if outcome.evaluation:
    return "no: the run did not reach the Pusher"
  return "no: the run did not reach the Evaluator"


def baseline_verdict(run: RunSummary) -> str:
  """What the candidate was compared against."""
  if run.evaluation is None:
    return "none: no evaluation"
  if run.evaluation.baseline_overall is None:
    return ("none: there was no earlier blessed model (absolute checks "
            "only)")
  return run.baseline_model or "the latest blessed model"


def _table_text(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
  widths = [max(len(str(r[i])) for r in [header, *rows])
            for i in range(len(header))]
  return "\n".join("  ".join(str(cell).ljust(width)
                             for cell, width in zip(row, widths)).rstrip()
                   for row in [header, *rows])


def _lr_value(metrics: Metrics, name: str) -> Optional[float]:
  """The logistic-regression output's value of a metric, if reported."""
  return metrics.get(LR_PREFIX + name)


def _has_lr(evaluation: Evaluation) -> bool:
  return any(n.startswith(LR_PREFIX) for n in evaluation.overall)


def _overall_rows(evaluation: Evaluation) -> List[List[str]]:
  names = _metric_order(n for n in evaluation.overall
                        if not n.endswith(DIFF_SUFFIX) and "/" not in n)
  baseline = evaluation.baseline_overall
  lr = _has_lr(evaluation)
  return [[name, format_metric(name, evaluation.overall[name])] +
          ([format_metric(name, _lr_value(evaluation.overall, name))]
           if lr else []) +
          ([format_metric(name, baseline.get(name)),
            format_metric(name + DIFF_SUFFIX,
                          evaluation.overall.get(name + DIFF_SUFFIX))]
           if baseline is not None else [])
          for name in names]


def _overall_header(evaluation: Evaluation) -> List[str]:
  return ["metric", "model"] + (
      ["logistic regression"] if _has_lr(evaluation) else []) + (
      ["baseline", "change (TFMA)"]
      if evaluation.baseline_overall is not None else [])


def describe(run: RunSummary) -> str:
  """The terminal summary: metrics, baseline, pushed or not and why."""
  lines = [f"run:       {run.output_dir}"
           + (f" (pipeline run {run.pipeline_run})" if run.pipeline_run
              else "")]
  failed = [c for c in run.components if c.state == "FAILED"]
  lines += [f"failed:    {c.node}: {c.message or 'see the logs'}"
            for c in failed]
  if run.evaluation:
    lines += ["", _table_text(_overall_header(run.evaluation),
                              _overall_rows(run.evaluation)), ""]
  else:
    lines.append("metrics:   none (no evaluation)")
  lines.append(f"baseline:  {baseline_verdict(run)}")
  lines.append(f"pushed:    {push_verdict(run)}")
  if run.earlier:
    lines.append(f"note:      from an earlier run: {', '.join(run.earlier)}")
  lines += [f"problem:   {p}" for p in run.problems]
  return "\n".join(lines)


def _run_labels(runs: Sequence[RunSummary]) -> List[str]:
  names = [os.path.basename(os.path.abspath(r.output_dir)) for r in runs]
  if len(set(names)) < len(names):
    return [os.path.abspath(r.output_dir) for r in runs]
  return names


def _comparison_rows(runs: Sequence[RunSummary]) -> List[List[str]]:
  """Overall metrics, hyperparameters and verdicts of runs, side by side."""
  def overall(run):
    return run.evaluation.overall if run.evaluation else {}

  def training(run):
    return run.training or {}

  rows = [[name] + [format_metric(name, overall(r).get(name)) for r in runs]
          for name in _metric_order(n for r in runs for n in overall(r)
                                    if not n.endswith(DIFF_SUFFIX))]
  rows += [[key] + [str(training(r).get(key, "-")) for r in runs]
           for key in ("rule", "batch_size")]
  scaled = [training(r).get("scaled", {}) for r in runs]
  rows += [[f"{name} (scaled)"] + [f"{s[name]:g}" if name in s else "-"
                                   for s in scaled]
           for name in sorted({k for s in scaled for k in s})]
  rows.append(["pushed"] + [push_verdict(r).split(":", 1)[0] for r in runs])
  return rows


def describe_comparison(runs: Sequence[RunSummary]) -> str:
  """The terminal table of runs side by side."""
  return _table_text([""] + _run_labels(runs), _comparison_rows(runs))


# --- Figures --------------------------------------------------------------


def _save(figure: Figure, path: str) -> str:
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
  return _save(figure, path)


def _bucket_order(values) -> List[str]:
  known = [b for b in contract.FREQUENCY_BUCKETS if b in values]
  return known + sorted(set(values) - set(known))


def _grouped_bars(axes, groups: Sequence[str],
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
  order = _bucket_order(by_value)
  groups = [f"{v}\n({format_metric('example_count', count)})" for v, count in
            ((v, by_value[v].candidate.get("example_count")) for v in order)]
  figure = Figure(figsize=(10, 4), layout="constrained")
  for axes, metric in zip(figure.subplots(1, len(SLICE_METRICS)),
                          SLICE_METRICS):
    series = {"model": [by_value[v].candidate.get(metric) for v in order]}
    if any(by_value[v].baseline for v in order):
      series["baseline"] = [(by_value[v].baseline or {}).get(metric)
                            for v in order]
    _grouped_bars(axes, groups, series)
    if metric == "calibration":
      axes.axhline(1.0, color="grey", linestyle="--")
    axes.set_title(f"{metric} by {contract.ID_FREQUENCY} (examples)")
    axes.legend()
  return _save(figure, path)


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
  return _save(figure, path)


# --- HTML -----------------------------------------------------------------

_STYLE = """
body { font-family: sans-serif; margin: 2em; max-width: 70em; }
table { border-collapse: collapse; margin: 0.5em 0 1em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: left; }
td.num { text-align: right; }
.verdict { font-size: 1.2em; padding: 0.5em; border: 2px solid #888; }
.failed, .problem { color: #a00; }
img { max-width: 100%; }
"""


def _is_number(text: str) -> bool:
  try:
    float(text.replace(",", ""))
    return True
  except ValueError:
    return False


def _cell(value: Any) -> str:
  """A <td>; numbers align right so their digits line up."""
  text = str(value)
  css = " class='num'" if _is_number(text) else ""
  return f"<td{css}>{html.escape(text)}</td>"


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
  head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
  body = "".join("<tr>" + "".join(_cell(c) for c in row) + "</tr>"
                 for row in rows)
  return f"<table><tr>{head}</tr>{body}</table>"


def _page(title: str, sections: Sequence[str]) -> str:
  return (f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
          f"<title>{html.escape(title)}</title><style>{_STYLE}</style>"
          f"</head><body><h1>{html.escape(title)}</h1>\n"
          + "\n".join(sections) + "\n</body></html>\n")


def _paragraph(text: str, css: str = "") -> str:
  style = f" class='{css}'" if css else ""
  return f"<p{style}>{html.escape(text)}</p>"


def _image(name: str, alt: str) -> str:
  return f"<img src='{html.escape(name)}' alt='{html.escape(alt)}'>"


def _outcome_section(run: RunSummary) -> str:
  parts = ["<h2>Outcome</h2>",
           _paragraph(f"Pushed: {push_verdict(run)}", "verdict"),
           _paragraph(f"Baseline: {baseline_verdict(run)}")]
  if run.evaluation:
    parts.append(_paragraph(
        "TFMA validation: " + ("all checks passed"
                               if run.evaluation.validation_ok
                               else "failed")))
  if run.earlier:
    parts.append(_paragraph(
        "From an earlier pipeline run in this directory (the latest run "
        f"did not produce them): {', '.join(run.earlier)}", "problem"))
  parts += [_paragraph(p, "problem") for p in run.problems]
  if run.components:
    parts += [f"<h3>Components of pipeline run "
              f"{html.escape(run.pipeline_run or '')}</h3>",
              _table(["component", "state", "message"],
                     [[c.node, c.state, c.message] for c in run.components])]
  outcome = run.outcome
  if outcome:
    parts.append(_table(["artifact", "location"], [
        ["model", outcome.model or "-"],
        ["evaluation", outcome.evaluation or "-"],
        ["pushed model", outcome.pushed_model or "-"],
        ["metadata store", outcome.metadata_path]]))
  return "\n".join(parts)


def _slice_rows(slices: Sequence[SliceMetrics],
                with_baseline: bool) -> List[List[str]]:
  """Id-frequency buckets rare to frequent; other slices largest first."""
  by_value = {s.value: s for s in slices}
  if all(s.feature == contract.ID_FREQUENCY for s in slices):
    ordered = [by_value[v] for v in _bucket_order(by_value)]
  else:
    ordered = sorted(slices,
                     key=lambda s: -s.candidate.get("example_count", 0.0))
  rows = []
  for s in ordered:
    row = [s.value, format_metric("example_count",
                                  s.candidate.get("example_count"))]
    row += [format_metric(m, s.candidate.get(m)) for m in SLICE_METRICS]
    row.append(format_metric("auc", _lr_value(s.candidate, "auc")))
    if with_baseline:
      row += [format_metric("auc", (s.baseline or {}).get("auc")),
              format_metric("auc_diff", s.candidate.get("auc_diff"))]
    rows.append(row)
  return rows


def _evaluation_sections(run: RunSummary, report_dir: str) -> List[str]:
  evaluation = run.evaluation
  if evaluation is None:
    return ["<h2>Evaluation</h2>",
            _paragraph("No evaluation: the run did not reach the Evaluator "
                       "(or it could not be read, see above).")]
  parts = ["<h2>Overall metrics</h2>",
           _table(_overall_header(evaluation), _overall_rows(evaluation))]
  if evaluation.baseline_overall is not None:
    parts.append(_paragraph("Change: model minus baseline, as TFMA computed "
                            "it."))
  else:
    parts.append(_paragraph("No baseline: there was no earlier blessed "
                            "model, so only the absolute checks applied."))
  parts.append("<h2>Calibration</h2>")
  if evaluation.reliability:
    parts.append(_image(plot_reliability(
        evaluation.reliability,
        os.path.join(report_dir, RELIABILITY_FIGURE)), "reliability"))
  else:
    parts.append(_paragraph("Absent: the evaluation holds no calibration "
                            "plot (TFMA's CalibrationPlot was not "
                            "computed)."))
  with_baseline = evaluation.baseline_overall is not None
  header = ["value", "examples", *SLICE_METRICS, "lr auc"] + (
      ["baseline auc", "auc change"] if with_baseline else [])
  features = sorted({s.feature for s in evaluation.slices},
                    key=lambda f: (f != contract.ID_FREQUENCY, f))
  parts.append("<h2>Slices</h2>")
  if not features:
    parts.append(_paragraph("The evaluation has no slices besides the "
                            "overall one."))
  for feature in features:
    slices = [s for s in evaluation.slices if s.feature == feature]
    parts.append(f"<h3>{html.escape(feature)}</h3>")
    if feature == contract.ID_FREQUENCY:
      parts.append(_image(plot_id_frequency(
          slices, os.path.join(report_dir, ID_FREQUENCY_FIGURE)),
                          "AUC and calibration by id frequency"))
    parts.append(_table(header, _slice_rows(slices, with_baseline)))
  return parts


def _training_sections(run: RunSummary, report_dir: str) -> List[str]:
  record = run.training
  if record is None:
    return ["<h2>Training</h2>",
            _paragraph("No training record (training.json) next to the "
                       "model: the run did not reach the Trainer.")]
  parts = ["<h2>Training</h2>"]
  history = record.get("history", {})
  if history:
    parts.append(_image(plot_training(
        {"model": history}, os.path.join(report_dir, TRAINING_FIGURE)),
                        "training curves"))
    epochs = max(len(v) for v in history.values())
    keys = sorted(history)
    parts.append(_table(["epoch", *keys], [
        [epoch + 1] + [f"{history[k][epoch]:.4g}"
                       if epoch < len(history[k]) else "-" for k in keys]
        for epoch in range(epochs)]))
    clipped = history.get("clipped_fraction")
    if clipped:
      parts.append(_paragraph(
          f"CowClip clipped {100 * clipped[-1]:.2f}% of the embedding-row "
          "updates in the last epoch (a row per id of the batch and field). "
          "Near 0: the clip did not act at this batch size, and the scaling "
          "rule alone set the embedding updates."))
  if "best_epoch" in record:
    lr = record.get("logistic_regression", {})
    parts.append(_paragraph(
        f"Early stopping on the validation slice of the train split "
        f"({record.get('validation_examples', '-')} examples; the eval split "
        f"is the Evaluator's): {record['epochs_run']} epochs run, the "
        f"weights of epoch {record['best_epoch']} kept. The "
        f"logistic-regression baseline: {lr.get('epochs_run', '-')} epochs, "
        f"epoch {lr.get('best_epoch', '-')} kept."))
  parts.append("<h2>Hyperparameters used</h2>")
  parts.append(_table(["setting", "value"], [
      [key, record.get(key, "-")] for key in (
          "rule", "base_batch_size", "batch_size", "train_examples",
          "steps_per_epoch")] + [
              ["derived from the data size (auto)",
               ", ".join(record.get("auto", [])) or "none"]]))
  base, scaled = record.get("base", {}), record.get("scaled", {})
  parts.append(_table(
      ["hyperparameter", f"base (batch {record.get('base_batch_size')})",
       f"scaled (batch {record.get('batch_size')})"],
      [[name, f"{base[name]:g}" if name in base else "-",
        f"{scaled[name]:g}" if name in scaled else "-"]
       for name in sorted(set(base) | set(scaled))]))
  return parts


def _tuning_section(run: RunSummary) -> List[str]:
  if run.tuned_values is None:
    return []
  def cell(value):
    if value is None:
      return "-"
    return f"{value:.4g}" if isinstance(value, float) else value

  parts = ["<h2>Tuning</h2>", _paragraph("Best values (base hyperparameters "
                                         "at the base batch size):"),
           _table(["hyperparameter", "value"],
                  [[k, cell(v)] for k, v in sorted(run.tuned_values.items())])]
  if run.trials:
    columns = list(dict.fromkeys(k for row in run.trials for k in row))
    parts += [_paragraph("Trials:"), _table(
        columns, [[cell(row.get(c)) for c in columns] for row in run.trials])]
  return parts


def write_run_page(run: RunSummary) -> str:
  """Writes DIR/report/index.html and its figures; returns the page path."""
  report_dir = os.path.join(run.output_dir, REPORT_DIR)
  os.makedirs(report_dir, exist_ok=True)
  sections = [_outcome_section(run),
              *_evaluation_sections(run, report_dir),
              *_training_sections(run, report_dir),
              *_tuning_section(run)]
  path = os.path.join(report_dir, INDEX_PAGE)
  with open(path, "w", encoding="utf-8") as f:
    f.write(_page(f"Pipeline run: {os.path.abspath(run.output_dir)}",
                  sections))
  return path


def write_report(output_dir: str,
                 min_slice_size: int = DEFAULT_MIN_SLICE_SIZE) -> str:
  """Reads the run in `output_dir`, writes its report; the index.html path.

  run_with_report calls it at the end of every run, failed ones included.
  """
  return write_run_page(read_run(output_dir, min_slice_size))


def run_with_report(config: PipelineConfig) -> metadata.RunOutcome:
  """Runs the whole pipeline (pipeline.runner), then writes its report."""
  try:
    return runner.run_pipeline(config)
  finally:  # A failed run gets a report too: that is when it is needed.
    try:
      logging.info("report: %s",
                   write_report(config.output, config.min_slice_size))
    except Exception:  # pylint: disable=broad-except
      logging.exception("could not write the run report")


def write_comparison_page(runs: Sequence[RunSummary]) -> str:
  """Writes <first run>/report/compare.html: the runs side by side."""
  report_dir = os.path.join(runs[0].output_dir, REPORT_DIR)
  os.makedirs(report_dir, exist_ok=True)
  labels = _run_labels(runs)
  sections = [
      _table(["run", "output directory", "pushed"],
             [[label, os.path.abspath(r.output_dir), push_verdict(r)]
              for label, r in zip(labels, runs)]),
      "<h2>Overall metrics and hyperparameters</h2>",
      _table([""] + labels, _comparison_rows(runs))]
  frequency = {label: {s.value: s for s in r.evaluation.slices
                       if s.feature == contract.ID_FREQUENCY}
               for label, r in zip(labels, runs) if r.evaluation}
  if any(frequency.values()):
    order = _bucket_order({v for by_value in frequency.values()
                           for v in by_value})
    figure = Figure(figsize=(8, 4), layout="constrained")
    axes = figure.subplots()
    _grouped_bars(axes, order, {
        label: [by_value[v].candidate.get("auc") if v in by_value else None
                for v in order] for label, by_value in frequency.items()})
    axes.set_title(f"auc by {contract.ID_FREQUENCY}")
    axes.legend()
    sections += ["<h2>AUC by id frequency</h2>", _image(_save(
        figure, os.path.join(report_dir, COMPARE_ID_FREQUENCY_FIGURE)),
                                                        "AUC by id frequency")]
  histories = {label: r.training["history"]
               for label, r in zip(labels, runs)
               if r.training and r.training.get("history")}
  if histories:
    sections += ["<h2>Training</h2>", _image(plot_training(
        histories, os.path.join(report_dir, COMPARE_TRAINING_FIGURE)),
                                             "training curves")]
  path = os.path.join(report_dir, COMPARE_PAGE)
  with open(path, "w", encoding="utf-8") as f:
    f.write(_page(f"Runs compared: {' vs '.join(labels)}", sections))
  return path
