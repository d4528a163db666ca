"""The report's words, page and figures from a hand-built RunSummary.

No pipeline, no TFMA: what report_reading would return is written here, so
every number on the page is known and checked where it must appear.
"""

import dataclasses
import html
import os

from commands.report import pages as report
from commands.report import text as report_text
from commands.report.reading import Evaluation
from commands.report.reading import ReliabilityPoint
from commands.report.reading import RunSummary
from commands.report.reading import SliceMetrics
from pipeline import metadata
from trainer_module import contract

OVERALL = {"example_count": 4000.0, "auc": 0.7312, "auc_diff": 0.0123,
           "binary_crossentropy": 0.4571, "calibration": 1.02,
           "logistic_regression/auc": 0.7011,
           "logistic_regression/binary_crossentropy": 0.4702}
BASELINE = {"example_count": 4000.0, "auc": 0.7189,
            "binary_crossentropy": 0.4633, "calibration": 0.97}
TRAINING = {"rule": "cowclip", "base_batch_size": 1024, "batch_size": 8192,
            "train_examples": 36000, "steps_per_epoch": 5, "auto": ["l2"],
            "base": {"dense_lr": 1e-3, "embed_lr": 1e-4},
            "scaled": {"dense_lr": 8e-3, "embed_lr": 1e-4},
            "history": {"loss": [0.52, 0.47], "val_loss": [0.50, 0.48],
                        "auc": [0.69, 0.72], "val_auc": [0.70, 0.73],
                        "clipped_fraction": [0.01, 0.0042]},
            "best_epoch": 2, "epochs_run": 2, "validation_examples": 3600,
            "logistic_regression": {"best_epoch": 1, "epochs_run": 2}}


def _slice(value, examples, auc):
  return SliceMetrics(contract.ID_FREQUENCY, value,
                      {"example_count": examples, "auc": auc,
                       "calibration": 1.0, "auc_diff": 0.01,
                       "logistic_regression/auc": auc - 0.02},
                      {"auc": auc - 0.01})


def _summary(output_dir, pushed=True, **changes):
  outcome = metadata.RunOutcome(
      metadata_path=os.path.join(output_dir, "metadata.sqlite"),
      pushed=pushed, pushed_model="/serving/7" if pushed else None,
      evaluation="/evaluation/9", model="/model/8",
      failed_checks=() if pushed else ("auc 0.7312 < min 0.9000 (Overall)",))
  evaluation = Evaluation(
      uri="/evaluation/9", overall=OVERALL, baseline_overall=BASELINE,
      slices=(_slice("frequent", 2500.0, 0.75), _slice("rare", 500.0, 0.61),
              _slice("medium", 1000.0, 0.70)),
      reliability={"candidate": (ReliabilityPoint(0.1, 0.12, 900.0),
                                 ReliabilityPoint(0.4, 0.38, 300.0))},
      validation_ok=pushed)
  fields = dict(output_dir=output_dir, pipeline_run="run-1",
                components=(metadata.ComponentState("Trainer", "COMPLETE"),
                            metadata.ComponentState("Evaluator", "COMPLETE")),
                outcome=outcome, blessed=pushed,
                baseline_model="/model/3", evaluation=evaluation,
                training=TRAINING)
  fields.update(changes)
  return RunSummary(**fields)


def _png(path):
  with open(path, "rb") as f:
    return f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_metric_words_of_a_hand_built_run(tmp_path):
  run = _summary(str(tmp_path))
  text = report_text.describe(run)
  assert "(pipeline run run-1)" in text
  assert "pushed:    yes: the Evaluator blessed the model, pushed to " \
         "/serving/7" in text
  assert "baseline:  /model/3" in text
  # metric, model, logistic regression, baseline, change.
  assert "auc                  0.7312  0.7011               0.7189    " \
         "+0.0123" in text
  assert "example_count        4,000" in text
  assert report_text.overall_header(run.evaluation) == [
      "metric", "model", "logistic regression", "baseline", "change"]
  names = [row[0] for row in report_text.overall_rows(run.evaluation)]
  assert names == ["example_count", "auc", "binary_crossentropy",
                   "calibration"]  # Leading order; no lr/ or _diff rows.


def test_verdicts_say_why_not_pushed(tmp_path):
  failed = _summary(str(tmp_path), pushed=False)
  assert report_text.push_verdict(failed) == (
      "no: the Evaluator did not bless the model: auc 0.7312 < min 0.9000 "
      "(Overall)")
  unread = _summary(str(tmp_path), outcome=None)
  assert report_text.push_verdict(unread) == (
      "unknown: ML Metadata could not be read")
  first = _summary(str(tmp_path), evaluation=None)
  assert report_text.baseline_verdict(first) == "none: no evaluation"
  failed_component = _summary(str(tmp_path), components=(
      metadata.ComponentState("Transform", "FAILED", "bad vocabulary"),))
  assert "failed:    Transform: bad vocabulary" in report_text.describe(
      failed_component)


def test_headline_of_a_pushed_and_of_a_refused_run(tmp_path):
  components = (metadata.ComponentState("Transform", "CACHED", seconds=0.2),
                metadata.ComponentState("Trainer", "COMPLETE", seconds=43.21),
                metadata.ComponentState("Evaluator", "FAILED", seconds=3.0))
  pushed = _summary(str(tmp_path), components=components)
  assert report_text.headline(pushed, "/out/report/index.html") == (
      "model:      AUC 0.7312  log loss 0.4571  calibration 1.0200\n"
      "baseline:   AUC 0.7011  log loss 0.4702  calibration -  "
      "(logistic regression)\n"
      "in service: AUC 0.7189  log loss 0.4633  calibration 0.9700  (the "
      "model being served, on the same eval rows)\n"
      "vs served:  AUC +0.0123\n"
      "pushed:     yes: the Evaluator blessed the model, pushed to "
      "/serving/7\n"
      "components: Transform cached, Trainer 43.2 s, Evaluator failed\n"
      "report:     /out/report/index.html")
  refused = report_text.headline(_summary(str(tmp_path), pushed=False),
                                 None).splitlines()
  assert refused[4] == "not pushed: auc 0.7312 < min 0.9000 (Overall)"
  assert not any(line.startswith("report:") for line in refused)


def test_the_batch_size_and_why_are_said_on_the_console(tmp_path):
  reason = ("auto: 269 steps an epoch on 8,800,000 training rows; 65536 "
            "would give 135, under 256")
  run = _summary(str(tmp_path), training={
      **TRAINING, "batch_size": 32768, "batch_size_reason": reason})
  line = f"batch 32768 ({reason}), cowclip scaling"
  assert f"trained:    {line}" in report_text.headline(run, None).splitlines()
  assert f"trained:   {line}" in report_text.describe(run).splitlines()
  assert report_text.batch_text(_summary(str(tmp_path))) is None
  kept = _summary(str(tmp_path), training={
      **TRAINING, "batch_size_reason": "--batch-size", "precision": {
          "setting": "auto", "chosen": "float32", "float32_gflops": 270.0,
          "bfloat16_gflops": 150.0, "bf16_speedup": 150 / 270,
          "kept_at": "R/Trainer/precision/k.json", "probed_now": True}})
  assert report_text.batch_text(kept) == (
      "batch 8192 (--batch-size), cowclip scaling, in float32 (auto: bf16 "
      "matmul 0.56x float32, 150 against 270 GFLOP/s, probed by this run "
      "and kept for the next)")


def test_a_run_serving_its_baseline_says_so_everywhere(tmp_path):
  served = {"served": contract.LR_OUTPUT, "serve": "best", "model": "deepfm",
            "model_validation_auc": 0.7202, "lr_validation_auc": 0.7153,
            "difference": 0.0049, "interval": [-0.0123, 0.0221],
            "lower_bound": -0.0095, "rows": 723}
  run = _summary(str(tmp_path), training={**TRAINING, "served": served})
  evidence = ("validation AUC of the deepfm minus the logistic regression's "
              "+0.0049 on 723 rows (one-sided 95% lower bound -0.0095)")
  line = (f"the logistic-regression baseline, not the deepfm: {evidence}, "
          "not above zero beyond noise, so the simpler model is served and "
          "the metrics above are its own (--serve model serves the deepfm "
          "whatever its AUC)")
  assert f"served:     {line}" in report_text.headline(run, None).splitlines()
  assert f"served:    {line}" in report_text.describe(run).splitlines()
  with open(report.write_run_page(run)) as f:
    assert html.escape(f"Served: {line}") in f.read()
  # The model served says so too, with the same evidence.
  model_served = _summary(str(tmp_path), training={**TRAINING, "served": {
      **served, "served": "model", "difference": 0.0312,
      "interval": [0.0101, 0.0523], "lower_bound": 0.0135}})
  line = ("the deepfm: validation AUC of the deepfm minus the logistic "
          "regression's +0.0312 on 723 rows (one-sided 95% lower bound "
          "+0.0135), above zero beyond noise")
  assert f"served:     {line}" in report_text.headline(
      model_served, None).splitlines()
  forced = _summary(str(tmp_path), training={**TRAINING, "served": {
      **served, "served": "model", "serve": "model"}})
  assert report_text.served_text(forced).endswith(
      "-0.0095), --serve model")


# The gate's intervals (components.gate_metrics), as TFMA's loader names
# them: the served-model changes are diffs.
GATE = {"auc_lower": 0.7201, "auc_upper": 0.7423,
        "calibration_lower": 0.98, "calibration_upper": 1.06,
        "auc_over_logistic_regression": 0.0301,
        "auc_over_logistic_regression_lower": 0.0212,
        "auc_over_logistic_regression_upper": 0.039,
        "auc_change_diff": 0.0121, "auc_change_lower_diff": -0.0011,
        "auc_change_upper_diff": 0.0253, "log_loss_change_diff": -0.0062,
        "log_loss_change_lower_diff": -0.0101,
        "log_loss_change_upper_diff": -0.0023}


def test_gated_metrics_show_their_intervals(tmp_path):
  run = _summary(str(tmp_path))
  run = dataclasses.replace(run, evaluation=dataclasses.replace(
      run.evaluation, overall={**OVERALL, **GATE}))
  assert report_text.headline(run, None).splitlines()[:4] == [
      "model:      AUC 0.7312 [0.7201, 0.7423]  log loss 0.4571  "
      "calibration 1.0200 [0.9800, 1.0600]",
      "baseline:   AUC 0.7011  log loss 0.4702  calibration -  "
      "(logistic regression; model AUC minus LR +0.0301 [+0.0212, +0.0390])",
      "in service: AUC 0.7189  log loss 0.4633  calibration 0.9700  (the "
      "model being served, on the same eval rows)",
      "vs served:  AUC +0.0121 [-0.0011, +0.0253]  "
      "log loss -0.0062 [-0.0101, -0.0023]"]
  rows = {row[0]: row[1:] for row in report_text.overall_rows(run.evaluation)}
  assert list(rows) == ["example_count", "auc", "binary_crossentropy",
                        "calibration", "auc_over_logistic_regression"]
  assert rows["auc"] == ["0.7312 [0.7201, 0.7423]", "0.7011", "0.7189",
                         "+0.0121 [-0.0011, +0.0253]"]
  assert rows["binary_crossentropy"][-1] == "-0.0062 [-0.0101, -0.0023]"
  assert rows["auc_over_logistic_regression"][0] == (
      "+0.0301 [+0.0212, +0.0390]")


def test_run_page_and_figures_of_a_hand_built_run(tmp_path):
  run = _summary(str(tmp_path))
  path = report.write_run_page(run)
  assert path == os.path.join(str(tmp_path), report.REPORT_DIR,
                              report.INDEX_PAGE)
  page = open(path, encoding="utf-8").read()
  assert "Pushed: yes: the Evaluator blessed the model" in page
  assert "TFMA validation: all checks passed" in page
  assert "<td class='num'>0.7312</td>" in page  # Model.
  assert "<td class='num'>0.7011</td>" in page  # Logistic regression.
  assert "<td class='num'>+0.0123</td>" in page  # TFMA's change.
  # Id-frequency buckets rare to frequent, whatever the summary's order.
  assert (page.index("<td>rare</td>") < page.index("<td>medium</td>")
          < page.index("<td>frequent</td>"))
  assert "CowClip clipped 0.42% of the embedding-row updates" in page
  assert "<td class='num'>0.008</td>" in page  # Scaled dense_lr.
  assert "2 epochs run, the weights of epoch 2 kept" in page
  assert "<td>Evaluator</td><td>COMPLETE</td>" in page
  for figure in (report.RELIABILITY_FIGURE, report.ID_FREQUENCY_FIGURE,
                 report.TRAINING_FIGURE):
    assert f"src='{figure}'" in page
    assert _png(os.path.join(str(tmp_path), report.REPORT_DIR, figure))


def test_run_page_says_what_the_production_options_did(tmp_path):
  training = {**TRAINING, "model_options": {"activation": "smelu",
                                            "smelu_beta": 0.5},
              "negative_sampling": {"rate": 0.25, "non_click_weight": 4.0,
                                    "warning": "one non-click outweighs"}}
  page = open(report.write_run_page(_summary(str(tmp_path),
                                             training=training)),
              encoding="utf-8").read()
  assert "<h2>Production options</h2>" in page
  assert "SmeLU, beta 0.5" in page
  assert ("non-clicks kept with probability 0.25, weighted 4; WARNING: one "
          "non-click outweighs") in page
  plain = open(report.write_run_page(_summary(str(tmp_path / "plain"))),
               encoding="utf-8").read()
  assert "Production options" not in plain


def test_run_page_says_which_precision_auto_chose_and_why(tmp_path):
  training = {**TRAINING, "precision": {
      "setting": "auto", "chosen": "mixed_bfloat16", "float32_gflops": 518.0,
      "bfloat16_gflops": 930.0, "bf16_speedup": 930 / 518,
      "probe_seconds": 0.4}}
  page = open(report.write_run_page(_summary(str(tmp_path),
                                             training=training)),
              encoding="utf-8").read()
  assert ("<td>mixed_bfloat16 (auto: bf16 matmul 1.80x float32, 930 against "
          "518 GFLOP/s)</td>") in page
  chosen = {**TRAINING, "precision": {"setting": "float32",
                                      "chosen": "float32"}}
  page = open(report.write_run_page(_summary(str(tmp_path / "set"),
                                             training=chosen)),
              encoding="utf-8").read()
  assert "<td>precision of the DNN</td><td>float32</td>" in page
  kept = {**TRAINING, "precision": {**training["precision"],
                                    "kept_at": "R/Trainer/precision/k.json",
                                    "probed_now": False}}
  page = open(report.write_run_page(_summary(str(tmp_path / "kept"),
                                             training=kept)),
              encoding="utf-8").read()
  assert ("518 GFLOP/s, the choice kept from an earlier run on this kind of "
          "machine)</td>") in page


def test_page_of_a_run_that_stopped_before_training(tmp_path):
  run = RunSummary(str(tmp_path), problems=("could not read X",))
  page = open(report.write_run_page(run), encoding="utf-8").read()
  assert "No evaluation: the run did not reach the Evaluator" in page
  assert "No training record (training.json)" in page
  assert "<p class='problem'>could not read X</p>" in page
  assert not os.path.exists(os.path.join(
      str(tmp_path), report.REPORT_DIR, report.RELIABILITY_FIGURE))


def test_comparison_of_two_hand_built_runs(tmp_path):
  first = _summary(str(tmp_path / "a"))
  second = _summary(str(tmp_path / "b"), pushed=False,
                    training={**TRAINING, "batch_size": 1024})
  rows = [line.split() for line in
          report_text.describe_comparison([first, second]).splitlines()]
  assert rows[0] == ["a", "b"]
  assert ["auc", "0.7312", "0.7312"] in rows
  assert ["batch_size", "8192", "1024"] in rows
  assert ["dense_lr", "(scaled)", "0.008", "0.008"] in rows
  assert rows[-1] == ["pushed", "yes", "no"]
  page = open(report.write_comparison_page([first, second]),
              encoding="utf-8").read()
  assert os.path.abspath(str(tmp_path / "b")) in page
  for figure in (report.COMPARE_ID_FREQUENCY_FIGURE,
                 report.COMPARE_TRAINING_FIGURE):
    assert _png(os.path.join(str(tmp_path / "a"), report.REPORT_DIR,
                             figure))


def test_a_pass_on_noise_alone_is_said_everywhere(tmp_path):
  """Calibration 1.18 outside the band [0.9, 1.1], its interval reaching
  into it: pushed, and the headline, the summary and the page say that
  the eval rows could not tell (metadata.describe_noise_passes)."""
  checks = (metadata.GateCheck("auc", "upper", 0.5),
            metadata.GateCheck("calibration", "upper", 0.9),
            metadata.GateCheck("calibration", "lower", 1.1),
            metadata.GateCheck("auc_change", "upper", -0.001, change=True))
  overall = {"example_count": 1787.0, "auc": 0.67, "auc_lower": 0.64,
             "auc_upper": 0.70, "calibration": 1.18,
             "calibration_lower": 1.07, "calibration_upper": 1.30,
             "auc_change_diff": -0.004, "auc_change_lower_diff": -0.012,
             "auc_change_upper_diff": 0.004}
  lines = metadata.describe_noise_passes(checks, overall)
  assert lines == (
      "calibration 1.1800 is above the maximum 1.1000; 1,787 eval rows "
      "cannot tell it from the limit (95% interval 1.0700 to 1.3000): more "
      "eval rows would decide",
      "auc change vs the served model -0.0040 is below the minimum -0.0010; "
      "1,787 eval rows cannot tell it from the limit (95% interval -0.0120 "
      "to +0.0040): more eval rows would decide")
  # Beyond the noise it is a failed check, not a pass on noise; inside the
  # band, nothing to say.
  assert metadata.describe_noise_passes(
      checks[1:3], {**overall, "calibration_lower": 1.12}) == ()
  assert metadata.describe_noise_passes(
      checks[1:3], {**overall, "calibration": 1.05}) == ()

  run = _summary(str(tmp_path))
  run = dataclasses.replace(run, outcome=dataclasses.replace(
      run.outcome, noise_passes=lines[:1]))
  for text, prefix in ((report_text.headline(run, None), "on noise:   "),
                       (report_text.describe(run), "on noise:  ")):
    assert prefix + lines[0] in text.splitlines()
  page = report.write_run_page(run)
  with open(page) as f:
    content = f.read()
  assert html.escape("On noise: " + lines[0]) in content
  assert "is a 95% confidence interval" in content
