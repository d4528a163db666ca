"""The human-readable report of a pipeline run: DIR/report/index.html.

read_run (commands.report.reading) says what the run left; this module
writes the pages from it, with the words of commands.report.text and the
figures of commands.report.figures. The page is static HTML with PNG
figures (matplotlib, Agg), so it opens from disk, is archived with the run,
and needs no server. A run that stopped early still gets a page saying what
exists. `python -m pipeline report DIR [--compare OTHER_DIR]` writes it and
prints the summary.
"""

import argparse
import html
import os
from typing import Any, List, Mapping, Sequence

from matplotlib.figure import Figure

from commands.cli import flags
from commands.report import calibration as report_calibration
from commands.report import figures as report_figures
from commands.report import reading as report_reading
from commands.report import text as report_text
from commands.report.reading import RunSummary
from commands.report.reading import SliceMetrics
from commands.report.text import format_metric
from commands.report.text import SLICE_METRICS
from pipeline import config as config_lib
from pipeline.config import DEFAULT_MIN_SLICE_SIZE
from trainer_module import contract

REPORT_DIR = "report"
INDEX_PAGE = "index.html"
COMPARE_PAGE = "compare.html"
RELIABILITY_FIGURE = "reliability.png"
ID_FREQUENCY_FIGURE = "id_frequency.png"
TRAINING_FIGURE = "training.png"
CALIBRATION_BUCKETS_FIGURE = "calibration_buckets.png"
# The reliability figure's points: TFMA's fine calibration-plot buckets
# merged into this many of about equal example count.
RELIABILITY_BINS = 20
COMPARE_ID_FREQUENCY_FIGURE = "compare_id_frequency.png"
COMPARE_TRAINING_FIGURE = "compare_training.png"

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
           _paragraph(f"Pushed: {report_text.push_verdict(run)}", "verdict"),
           _paragraph(f"Baseline: {report_text.baseline_verdict(run)}")]
  parts += [_paragraph(f"On noise: {line}", "verdict")
            for line in report_text.noise_passes(run)]
  served = report_text.served_text(run)
  if served:
    parts.append(_paragraph(f"Served: {served}", "verdict"))
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
    ordered = [by_value[v] for v in report_figures.bucket_order(by_value)]
  else:
    ordered = sorted(slices,
                     key=lambda s: -s.candidate.get("example_count", 0.0))
  rows = []
  for s in ordered:
    row = [s.value, format_metric("example_count",
                                  s.candidate.get("example_count"))]
    row += [format_metric(m, s.candidate.get(m)) for m in SLICE_METRICS]
    row.append(format_metric("auc", report_text.lr_value(s.candidate, "auc")))
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
           _table(report_text.overall_header(evaluation),
                  report_text.overall_rows(evaluation)),
           _paragraph(report_text.INTERVALS_NOTE)]
  if evaluation.baseline_overall is not None:
    parts.append(_paragraph("Change: model minus baseline, as TFMA computed "
                            "it."))
  else:
    parts.append(_paragraph("No baseline: there was no earlier blessed "
                            "model, so only the absolute checks applied."))
  parts.append("<h2>Calibration</h2>")
  if evaluation.reliability:
    parts.append(_image(report_figures.plot_reliability(
        {model: report_calibration.merge_by_count(points, RELIABILITY_BINS)
         for model, points in evaluation.reliability.items()},
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
      parts.append(_image(report_figures.plot_id_frequency(
          slices, os.path.join(report_dir, ID_FREQUENCY_FIGURE)),
                          "AUC and calibration by id frequency"))
    parts.append(_table(header, _slice_rows(slices, with_baseline)))
  return parts


def _calibration_bucket_section(run: RunSummary,
                                report_dir: str) -> List[str]:
  """Bias and calibration by predicted-CTR decile, id frequency and slice
  feature, with the bucket-bias variances (commands.report.calibration)."""
  if run.evaluation is None:
    return []
  parts = ["<h2>Calibration by bucket</h2>"]
  axes = report_calibration.calibration_axes(run.evaluation)
  if not axes:
    return parts + [_paragraph(
        "No buckets: the evaluation has neither TFMA's calibration plot "
        "nor slices with mean label and mean prediction.")]
  parts += [
      _paragraph("Bias: mean label minus mean prediction (the sign of the "
                 "'Factory Floor' paper, §7); calibration: mean prediction "
                 "over mean label. The deciles of predicted CTR merge "
                 "TFMA's fine calibration-plot buckets by example count (a "
                 "fine bucket is never split: decile sizes are "
                 "approximate). Bucket-bias variance: the unweighted "
                 "variance of the bias over an axis' buckets."),
      _image(report_calibration.plot(axes, os.path.join(
          report_dir, CALIBRATION_BUCKETS_FIGURE)),
             "calibration bias by bucket")]
  for name, buckets in axes.items():
    parts += [f"<h3>{html.escape(name)}: bucket-bias variance "
              f"{report_calibration.bias_variance(buckets):.3e}</h3>",
              _table(report_calibration.HEADER,
                     report_calibration.rows(buckets))]
  return parts


def _production_options(record: Mapping[str, Any]) -> List[str]:
  """What the activation and negative down-sampling did in training (PD
  and the calibration buckets have their own sections)."""
  rows = []
  options = record.get("model_options", {})
  if options.get("activation") == "smelu":
    rows.append(["activation", f"SmeLU, beta {options.get('smelu_beta')}"])
  sampling = record.get("negative_sampling")
  if sampling:
    rows.append(["negative down-sampling",
                 f"non-clicks kept with probability {sampling['rate']:g}, "
                 f"weighted {sampling['non_click_weight']:g}"
                 + (f"; WARNING: {sampling['warning']}"
                    if sampling.get("warning") else "")])
  if not rows:
    return []
  return ["<h2>Production options</h2>", _table(["option", "what it did"],
                                                rows)]


def _training_sections(run: RunSummary, report_dir: str) -> List[str]:
  record = run.training
  if record is None:
    return ["<h2>Training</h2>",
            _paragraph("No training record (training.json) next to the "
                       "model: the run did not reach the Trainer.")]
  parts = ["<h2>Training</h2>"]
  history = record.get("history", {})
  if history:
    parts.append(_image(report_figures.plot_training(
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
    parts.append(_paragraph(
        f"Early stopping on the validation slice of the train split "
        f"({record.get('validation_examples', '-')} examples; the eval split "
        f"is the Evaluator's): {record['epochs_run']} epochs run, the "
        f"weights of epoch {record['best_epoch']} kept. "
        + _baseline_fit(record.get("logistic_regression", {}))))
  parts += _production_options(record)
  parts.append("<h2>Hyperparameters used</h2>")
  parts.append(_table(["setting", "value"], [
      [key, record.get(key, "-")] for key in (
          "rule", "base_batch_size", "batch_size", "train_examples",
          "steps_per_epoch")] + [
              ["derived from the data size (auto)",
               ", ".join(record.get("auto", [])) or "none"],
              ["precision of the DNN", report_text.precision_text(record)]]))
  base, scaled = record.get("base", {}), record.get("scaled", {})
  parts.append(_table(
      ["hyperparameter", f"base (batch {record.get('base_batch_size')})",
       f"scaled (batch {record.get('batch_size')})"],
      [[name, f"{base[name]:g}" if name in base else "-",
        f"{scaled[name]:g}" if name in scaled else "-"]
       for name in sorted(set(base) | set(scaled))]))
  return parts


def _baseline_fit(lr: Mapping[str, Any]) -> str:
  """How the logistic-regression baseline was fitted (trainer.
  train_baseline's record)."""
  if "grid" not in lr:
    return ""
  tried = ", ".join(f"C {g['c']:g}: {g['val_logloss']:.5f}"
                    for g in lr["grid"])
  return (f"The logistic-regression baseline (Newton-CG): validation log loss "
          f"by C {tried}; C {lr['c']:g} kept and refitted on the validation "
          f"slice too; {lr['seconds']:.1f} s in all.")


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


def reproducibility_rows(run: RunSummary) -> List[List[str]]:
  """Per replica: its seed, early stopping, validation AUC (training.json)
  and eval AUC (TFMA, the replica's output), then the served model's."""
  record = run.training or {}
  overall = run.evaluation.overall if run.evaluation else {}
  rows = []
  for index, replica in enumerate(record.get("replicas", [])):
    output = contract.replica_output(index)
    best = replica.get("best", {})
    rows.append([output, replica.get("seed", "-"),
                 f"{replica.get('best_epoch', '-')}/"
                 f"{replica.get('epochs_run', '-')}",
                 format_metric("auc", best.get("val_auc")),
                 format_metric("auc", overall.get(f"{output}/auc"))])
  if rows:
    rows.append([f"served ({record.get('push', '-')})", "-", "-", "-",
                 format_metric("auc", overall.get("auc"))])
  return rows


def _reproducibility_section(run: RunSummary) -> List[str]:
  """Prediction Difference (components.prediction_difference) overall and
  by slice, and each replica's AUC; nothing when neither was computed."""
  evaluation = run.evaluation
  names = (contract.REPLICA_PD, contract.BASELINE_PD)
  replicas = reproducibility_rows(run)
  if evaluation is None or not (
      replicas or any(n in evaluation.overall for n in names)):
    return []
  parts = ["<h2>Reproducibility: Prediction Difference</h2>", _paragraph(
      "PD = mean over examples of |y1 - y2| / ((y1 + y2) / 2) (Anil et al. "
      "2022, section 5): between the replicas trained with different seeds "
      "(mean over pairs), and between this model's served prediction and "
      "the baseline model's (churn between pushes).")]
  rows = [["overall", format_metric("example_count",
                                    evaluation.overall.get("example_count"))]
          + [format_metric(n, evaluation.overall.get(n)) for n in names]]
  rows += [[f"{s.feature}={s.value}",
            format_metric("example_count", s.candidate.get("example_count"))]
           + [format_metric(n, s.candidate.get(n)) for n in names]
           for s in evaluation.slices]
  parts.append(_table(["slice", "examples", "PD between replicas",
                       "PD vs baseline"], rows))
  if replicas:
    parts.append(_table(["replica", "seed", "best/run epochs",
                         "validation auc", "eval auc"],
                        replicas))
  return parts


def write_run_page(run: RunSummary) -> str:
  """Writes DIR/report/index.html and its figures; returns the page path."""
  report_dir = os.path.join(run.output_dir, REPORT_DIR)
  os.makedirs(report_dir, exist_ok=True)
  sections = [_outcome_section(run),
              *_evaluation_sections(run, report_dir),
              *_calibration_bucket_section(run, report_dir),
              *_reproducibility_section(run),
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

  commands.runs.run calls it at the end of every run, failed ones
  included.
  """
  return write_run_page(report_reading.read_run(output_dir, min_slice_size))


def write_comparison_page(runs: Sequence[RunSummary]) -> str:
  """Writes <first run>/report/compare.html: the runs side by side."""
  report_dir = os.path.join(runs[0].output_dir, REPORT_DIR)
  os.makedirs(report_dir, exist_ok=True)
  labels = report_text.run_labels(runs)
  sections = [
      _table(["run", "output directory", "pushed"],
             [[label, os.path.abspath(r.output_dir),
               report_text.push_verdict(r)]
              for label, r in zip(labels, runs)]),
      "<h2>Overall metrics and hyperparameters</h2>",
      _table([""] + labels, report_text.comparison_rows(runs))]
  frequency = {label: {s.value: s for s in r.evaluation.slices
                       if s.feature == contract.ID_FREQUENCY}
               for label, r in zip(labels, runs) if r.evaluation}
  if any(frequency.values()):
    order = report_figures.bucket_order({v for by_value in frequency.values()
                           for v in by_value})
    figure = Figure(figsize=(8, 4), layout="constrained")
    axes = figure.subplots()
    report_figures.grouped_bars(axes, order, {
        label: [by_value[v].candidate.get("auc") if v in by_value else None
                for v in order] for label, by_value in frequency.items()})
    axes.set_title(f"auc by {contract.ID_FREQUENCY}")
    axes.legend()
    sections += ["<h2>AUC by id frequency</h2>", _image(report_figures.save(
        figure, os.path.join(report_dir, COMPARE_ID_FREQUENCY_FIGURE)),
                                                        "AUC by id frequency")]
  histories = {label: r.training["history"]
               for label, r in zip(labels, runs)
               if r.training and r.training.get("history")}
  if histories:
    sections += ["<h2>Training</h2>", _image(report_figures.plot_training(
        histories, os.path.join(report_dir, COMPARE_TRAINING_FIGURE)),
                                             "training curves")]
  path = os.path.join(report_dir, COMPARE_PAGE)
  with open(path, "w", encoding="utf-8") as f:
    f.write(_page(f"Runs compared: {' vs '.join(labels)}", sections))
  return path


def main(args: argparse.Namespace) -> int:
  """`report DIR [--compare OTHER_DIR]`: prints the summary, writes the
  pages."""
  gate = flags.settings_from_args(args, config_lib.GateSettings)
  run = report_reading.read_run(args.dir, gate.min_slice_size)
  print(report_text.describe(run))
  print(f"report:    {write_run_page(run)}")
  if args.compare:
    runs = [run, report_reading.read_run(args.compare, gate.min_slice_size)]
    print("\n" + report_text.describe_comparison(runs))
    print(f"compare:   {write_comparison_page(runs)}")
  return 0
