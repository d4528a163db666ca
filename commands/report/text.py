"""The report in words: the terminal summary, verdicts and metric tables.

Made from a RunSummary (commands.report.reading) alone, so a hand-built
summary renders the same as a read one.
"""

import os
from typing import Any, List, Mapping, Optional, Sequence

from commands.report.reading import DIFF_SUFFIX
from commands.report.reading import Evaluation
from commands.report.reading import LR_PREFIX
from commands.report.reading import Metrics
from commands.report.reading import RunSummary
from components import gate_metrics
from pipeline.metadata import ComponentState
from trainer_module import paired_statistics

# TFMA names of the metrics shown first, in this order; the others follow
# alphabetically.
LEADING_METRICS = ("example_count", "auc", "binary_crossentropy",
                   "calibration", "mean_label", "mean_prediction")
# Shown per slice (with the example count).
SLICE_METRICS = ("auc", "calibration")
# Shown with the gate's confidence interval (components.gate_metrics).
INTERVAL_METRICS = (gate_metrics.AUC, gate_metrics.CALIBRATION,
                    gate_metrics.AUC_OVER_LR)
# The gate's paired change against the served model, by the metric whose
# change it is.
PAIRED_CHANGES = {gate_metrics.AUC: gate_metrics.AUC_CHANGE,
                  "binary_crossentropy": gate_metrics.LOG_LOSS_CHANGE}
# Shown inside other metrics' cells, not as rows.
_INTERVAL_PARTS = frozenset(
    [gate_metrics.bound_name(stem, bound) for stem in gate_metrics.STEMS
     for bound in (gate_metrics.LOWER, gate_metrics.UPPER)] +
    list(PAIRED_CHANGES.values()))


def format_metric(name: str, value: Optional[float]) -> str:
  """How the report writes a metric value (counts as integers)."""
  if value is None:
    return "-"
  diff = name.endswith(DIFF_SUFFIX)
  if name.removesuffix(DIFF_SUFFIX) == "example_count":
    return f"{value:+,.0f}" if diff else f"{value:,.0f}"
  return f"{value:+.4f}" if diff else f"{value:.4f}"


def metric_cell(metrics: Metrics, name: str) -> str:
  """A metric as the report writes it, with its interval when the gate
  computed one: 'auc 0.7310 [0.7281, 0.7339]'."""
  if name in INTERVAL_METRICS:
    text = gate_metrics.interval_text(
        metrics, name, signed=name == gate_metrics.AUC_OVER_LR)
    if text:
      return text
  return format_metric(name, metrics.get(name))


def change_cell(metrics: Metrics, name: str) -> str:
  """The candidate's change of a metric against the baseline model: the
  gate's paired change with its interval, else TFMA's difference."""
  if name in PAIRED_CHANGES:
    text = gate_metrics.interval_text(metrics, PAIRED_CHANGES[name],
                                      DIFF_SUFFIX, signed=True)
    if text:
      return text
  return format_metric(name + DIFF_SUFFIX, metrics.get(name + DIFF_SUFFIX))


def _metric_order(names) -> List[str]:
  return sorted(set(names), key=lambda n: (
      LEADING_METRICS.index(n) if n in LEADING_METRICS
      else len(LEADING_METRICS), n))


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


def noise_passes(run: RunSummary) -> Sequence[str]:
  """The checks that passed on their interval alone (metadata.
  describe_noise_passes), one line each."""
  return run.outcome.noise_passes if run.outcome else ()


# What every [a, b] of a metrics table is (trainer_module.paired_statistics).
INTERVALS_NOTE = (
    f"Every [a, b] is a {paired_statistics.CONFIDENCE:.0%} confidence "
    "interval of the eval rows: AUC by DeLong's method, calibration (mean "
    "prediction over mean label) by the delta method, and the paired "
    "differences of two scores of the same rows (model minus logistic "
    "regression, the change against the served model) by DeLong's paired "
    "method for AUC and the paired mean for log loss.")


def warm_start_text(run: RunSummary) -> Optional[str]:
  """Where the model started from, when it did not start from scratch
  (trainer_module/warm_start.py), or why a served model was not used;
  None when nothing was served to start from."""
  warm = (run.training or {}).get("warm_start")
  if not warm:
    return None
  if "skipped" in warm:
    return f"none, trained from scratch: {warm['skipped']}"
  return (f"from {warm['from']}: the rows of {warm['carried_ids']:,} ids "
          f"carried over, {warm['new_ids']:,} new ids, "
          f"{warm['dropped_ids']:,} dropped")


def batch_text(run: RunSummary) -> Optional[str]:
  """The batch size the Trainer trained at and why (the user's, or the
  auto rule's: trainer_module/plan.py), and the precision; None for a
  record without the reason (older runs)."""
  training = run.training or {}
  if "batch_size_reason" not in training:
    return None
  line = (f"batch {training['batch_size']} ({training['batch_size_reason']})"
          f", {training['rule']} scaling")
  return line + (f", in {precision_text(training)}"
                 if training.get("precision") else "")


def precision_text(record: Mapping[str, Any]) -> str:
  """The precision trained in, and for auto what the probe measured and
  whether this run probed or took the choice kept from an earlier one
  (trainer_module/precision.py)."""
  chosen = record.get("precision", {})
  if not chosen:
    return "-"
  if "bf16_speedup" not in chosen:
    return chosen["chosen"]
  kept = ("" if "kept_at" not in chosen else
          ", probed by this run and kept for the next" if chosen["probed_now"]
          else ", the choice kept from an earlier run on this kind of machine")
  return (f"{chosen['chosen']} (auto: bf16 matmul "
          f"{chosen['bf16_speedup']:.2f}x float32, "
          f"{chosen['bfloat16_gflops']:.0f} against "
          f"{chosen['float32_gflops']:.0f} GFLOP/s{kept})")


def served_text(run: RunSummary) -> Optional[str]:
  """Which model the export serves, and why, in the gate's words: the
  Trainer serves the model only when its validation AUC is above the
  logistic regression's beyond the noise of a paired one-sided test
  (served_model.choose_served); None when the run has no record."""
  served = (run.training or {}).get("served")
  if not served:
    return None
  model = served["model"]
  if "difference" not in served:  # A record without the paired test.
    return f"the {model}: {served.get('reason', '--serve model')}"
  evidence = (f"validation AUC of the {model} minus the logistic "
              f"regression's {served['difference']:+.4f} on "
              f"{served['rows']:,} rows (one-sided "
              f"{paired_statistics.CONFIDENCE:.0%} lower bound "
              f"{served['lower_bound']:+.4f})")
  if served["served"] == "model":
    why = ("--serve model" if served["serve"] == "model" else
           "above zero beyond noise")
    return f"the {model}: {evidence}, {why}"
  return (f"the logistic-regression baseline, not the {model}: {evidence}, "
          "not above zero beyond noise, so the simpler model is served and "
          "the metrics above are its own (--serve model serves the "
          f"{model} whatever its AUC)")


def explanation_lines(run: RunSummary, width: int) -> List[str]:
  """What the Trainer did that the metrics do not say, as labelled lines
  (the label padded to `width`): where the model started, the batch it
  trained at and why, which model is served and why."""
  return [f"{label} ".ljust(width) + text
          for label, text in (("warm start:", warm_start_text(run)),
                              ("trained:", batch_text(run)),
                              ("served:", served_text(run))) if text]


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


def lr_value(metrics: Metrics, name: str) -> Optional[float]:
  """The logistic-regression output's value of a metric, if reported."""
  return metrics.get(LR_PREFIX + name)


def _has_lr(evaluation: Evaluation) -> bool:
  return any(n.startswith(LR_PREFIX) for n in evaluation.overall)


def overall_rows(evaluation: Evaluation) -> List[List[str]]:
  names = _metric_order(n for n in evaluation.overall
                        if not n.endswith(DIFF_SUFFIX) and "/" not in n
                        and n not in _INTERVAL_PARTS)
  baseline = evaluation.baseline_overall
  lr = _has_lr(evaluation)
  return [[name, metric_cell(evaluation.overall, name)] +
          ([format_metric(name, lr_value(evaluation.overall, name))]
           if lr else []) +
          ([metric_cell(baseline, name), change_cell(evaluation.overall, name)]
           if baseline is not None else [])
          for name in names]


def overall_header(evaluation: Evaluation) -> List[str]:
  return ["metric", "model"] + (
      ["logistic regression"] if _has_lr(evaluation) else []) + (
      ["baseline", "change"]
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
    lines += ["", _table_text(overall_header(run.evaluation),
                              overall_rows(run.evaluation)), ""]
  else:
    lines.append("metrics:   none (no evaluation)")
  lines.append(f"baseline:  {baseline_verdict(run)}")
  lines += explanation_lines(run, width=11)
  lines.append(f"pushed:    {push_verdict(run)}")
  lines += [f"on noise:  {line}" for line in noise_passes(run)]
  if run.earlier:
    lines.append(f"note:      from an earlier run: {', '.join(run.earlier)}")
  lines += [f"problem:   {p}" for p in run.problems]
  return "\n".join(lines)


# The headline's metrics: (TFMA name, label).
HEADLINE_METRICS = (("auc", "AUC"), ("binary_crossentropy", "log loss"),
                    ("calibration", "calibration"))


def _headline_metrics(metrics: Metrics) -> str:
  return "  ".join(f"{label} {metric_cell(metrics, name)}"
                   for name, label in HEADLINE_METRICS)


def _lr_metrics(metrics: Metrics) -> Metrics:
  return {name[len(LR_PREFIX):]: value for name, value in metrics.items()
          if name.startswith(LR_PREFIX)}


def _headline_changes(metrics: Metrics) -> str:
  """The gate's paired changes against the served model, if it had one."""
  cells = [(label, change_cell(metrics, name))
           for name, label in HEADLINE_METRICS if name in PAIRED_CHANGES]
  return "  ".join(f"{label} {cell}" for label, cell in cells if cell != "-")


def _component_time(component: ComponentState) -> str:
  """'43.2 s', or how it ended when it did not run to completion here."""
  if component.state == "COMPLETE" and component.seconds is not None:
    return f"{component.seconds:.1f} s"
  return "cached" if component.state == "CACHED" else component.state.lower()


def headline(run: RunSummary, page: Optional[str]) -> str:
  """The end of a run on the console: the model's metrics beside the
  logistic-regression baseline's and the served model's (on the same
  rows), the gate's verdict and why, where the model went, each
  component's time and the report."""
  lines = []
  if run.evaluation:
    overall = run.evaluation.overall
    lines.append(f"model:      {_headline_metrics(overall)}")
    if _has_lr(run.evaluation):
      over = gate_metrics.interval_text(overall, gate_metrics.AUC_OVER_LR,
                                        signed=True)
      lines.append(f"baseline:   {_headline_metrics(_lr_metrics(overall))}"
                   "  (logistic regression" +
                   (f"; model AUC minus LR {over})" if over else ")"))
    if run.evaluation.baseline_overall is not None:
      lines.append(
          f"in service: {_headline_metrics(run.evaluation.baseline_overall)}"
          "  (the model being served, on the same eval rows)")
      lines.append(f"vs served:  {_headline_changes(overall)}")
  lines += explanation_lines(run, width=12)
  outcome = run.outcome
  if outcome and outcome.ingestion:
    lines.append(f"ingested:   {outcome.ingestion}")
  if outcome and not outcome.pushed and outcome.failed_checks:
    lines += [f"not pushed: {check}" for check in outcome.failed_checks]
  else:
    lines.append(f"pushed:     {push_verdict(run)}")
  lines += [f"on noise:   {line}" for line in noise_passes(run)]
  if run.components:
    lines.append("components: " + ", ".join(
        f"{c.node} {_component_time(c)}" for c in run.components))
  if page:
    lines.append(f"report:     {page}")
  return "\n".join(lines)


def run_labels(runs: Sequence[RunSummary]) -> List[str]:
  names = [os.path.basename(os.path.abspath(r.output_dir)) for r in runs]
  if len(set(names)) < len(names):
    return [os.path.abspath(r.output_dir) for r in runs]
  return names


def comparison_rows(runs: Sequence[RunSummary]) -> List[List[str]]:
  """Overall metrics, hyperparameters and verdicts of runs, side by side."""
  def overall(run):
    return run.evaluation.overall if run.evaluation else {}

  def training(run):
    return run.training or {}

  rows = [[name] + [metric_cell(overall(r), name) for r in runs]
          for name in _metric_order(n for r in runs for n in overall(r)
                                    if not n.endswith(DIFF_SUFFIX)
                                    and n not in _INTERVAL_PARTS)]
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
  return _table_text([""] + run_labels(runs), comparison_rows(runs))
