"""The batch-size scaling study: its runs, its CSV, its report, its resume."""

import csv
import dataclasses
import json
import math
import os

import keras
import numpy as np
import pytest
from scipy import stats as scipy_stats

from commands.cli import main as cli
from commands.experiments import study
from commands.experiments import study_evaluation
from commands.experiments import study_provenance
from commands.experiments import study_results
from conftest import STUDY_MIN_FREQUENCY
from pipeline.config import PipelineConfig
from pipeline.pipeline import create_eval_config
from trainer_module import callbacks as callbacks_lib
from trainer_module import kept_split
from trainer_module import paired_statistics
from trainer_module import trainer


def test_cowclip_is_on_exactly_for_the_cowclip_rule():
  runs = study.study_runs(["deepfm"], ["none", "sqrt", "cowclip"],
                          [1024, 4096], [1, 2])
  assert len(runs) == 3 * 2 * 2
  assert all(r.cowclip == (r.rule == "cowclip") for r in runs)
  assert len({r.key for r in runs}) == len(runs)


def test_ablation_adds_the_cowclip_rule_without_clipping():
  runs = study.study_runs(["deepfm"], ["none", "cowclip"], [1024], [1],
                          ablation=True)
  assert {(r.rule, r.cowclip) for r in runs} == {
      ("none", False), ("cowclip", True), ("cowclip", False)}
  assert study_results.run_label("cowclip", False) == "cowclip (no clipping)"
  assert study_results.run_label("sqrt", False) == "sqrt"


def test_unknown_rule_or_model_is_rejected():
  with pytest.raises(ValueError, match="scaling rule 'cube'"):
    study.study_runs(["deepfm"], ["cube"], [1024], [1])
  with pytest.raises(ValueError, match="model 'xgb'"):
    study.study_runs(["xgb"], ["none"], [1024], [1])


def test_study_eval_config_is_the_pipelines_cut_to_what_is_reported():
  config = PipelineConfig.from_fields(
      dataset="criteo", data="unused", output="unused")
  full = create_eval_config(config)
  cut = study_evaluation.study_eval_config(config)
  assert list(cut.model_specs) == list(full.model_specs)
  assert [list(s.feature_keys) for s in cut.slicing_specs] == [
      [], ["id_frequency"]]
  names = [m.class_name for m in cut.metrics_specs[0].metrics]
  assert names == [m.class_name for m in full.metrics_specs[0].metrics
                   if m.class_name != "CalibrationPlot"]
  assert {"AUC", "BinaryCrossEntropy", "Calibration"} <= set(names)
  thresholds = [t.threshold for m in cut.metrics_specs[0].metrics
                for t in m.per_slice_thresholds]
  assert thresholds and not any(t.HasField("change_threshold")
                                for t in thresholds)
  assert any(t.HasField("value_threshold") for t in thresholds)


def test_metrics_row_reads_overall_and_frequency_slices():
  slices = {"": {"auc": 0.7, "binary_crossentropy": 0.5, "calibration": 1.1,
                 "mean_label": 0.25, "mean_prediction": 0.275,
                 "example_count": 300.0},
            "id_frequency=rare": {"auc": 0.6, "example_count": 120.0},
            "id_frequency=frequent": {"auc": 0.8, "example_count": 180.0},
            "C6=x": {"auc": 0.1}}
  row = study_evaluation.metrics_row(slices)
  assert (row["auc"], row["logloss"], row["calibration"]) == (0.7, 0.5, 1.1)
  assert row["eval_examples"] == 300
  assert (row["auc_rare"], row["examples_rare"]) == (0.6, 120)
  assert (row["auc_frequent"], row["examples_frequent"]) == (0.8, 180)
  assert math.isnan(row["auc_medium"]) and math.isnan(row["examples_medium"])


def test_model_metrics_keep_the_baselines_apart():
  # The shape of TFMA 0.47's EvalResult.slicing_metrics for the exported
  # two-output signature (model "", logistic regression LR_OUTPUT).
  def by_output(auc, lr_auc):
    return {"": {"": {"auc": {"doubleValue": auc},
                      "example_count": {"doubleValue": 302.0},
                      "auc_over_logistic_regression": auc - lr_auc}},
            "logistic_regression": {"": {"auc": {"doubleValue": lr_auc},
                                         "example_count": {
                                             "doubleValue": 302.0}}}}
  slices = study_evaluation.model_metrics_by_slice([
      ((), by_output(0.75, 0.7)),
      ((("id_frequency", b"rare"),), by_output(0.6, 0.65))])
  assert slices[""]["auc"] == 0.75 and slices[""]["example_count"] == 302
  assert slices[""]["auc_over_logistic_regression"] == pytest.approx(0.05)
  assert slices["id_frequency=rare"]["auc"] == 0.6
  assert slices[""]["logistic_regression/auc"] == 0.7
  row = study_evaluation.metrics_row(slices)
  assert (row["auc"], row["lr_auc"]) == (0.75, 0.7)
  assert math.isnan(row["lr_logloss"])


def test_last_epoch_weights_are_the_last_not_the_restored_best():
  """LastEpochWeights, placed before trainer.fit's early stopping, keeps
  the weights Keras trained last, not the best epoch's it restores."""
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
  model.compile(optimizer=keras.optimizers.SGD(0.5), loss="mse")
  x = np.ones((8, 1), np.float32)
  # The validation loss rises every epoch: the first is the best.
  y = np.full((8, 1), 3.0, np.float32)
  last = study.LastEpochWeights()
  weights = []
  model.fit(x, y, validation_data=(x, np.zeros((8, 1), np.float32)),
            epochs=3, verbose=0, callbacks=[
                keras.callbacks.LambdaCallback(
                    on_epoch_end=lambda *_: weights.append(
                        model.get_weights())),
                last, keras.callbacks.EarlyStopping(
                    monitor="val_loss", patience=5,
                    restore_best_weights=True)])
  for got, want in zip(last.weights, weights[-1]):
    np.testing.assert_array_equal(got, want)
  assert not np.array_equal(model.get_weights()[0], weights[-1][0])


def test_replicas_reach_the_eval_config_and_seeds_may_not_share_them():
  """With replicas the study's TFMA config keeps the Evaluator's replica PD
  and per-replica AUC; a run of seed s trains replicas s..s+N-1."""
  config = PipelineConfig.from_fields(
      dataset="criteo", data="unused", output="unused", replicas=2)
  cut = study_evaluation.study_eval_config(config)
  names = [m.class_name for spec in cut.metrics_specs for m in spec.metrics]
  assert "ReplicaPredictionDifference" in names
  assert ["replica_0", "replica_1"] in [list(spec.output_names)
                                        for spec in cut.metrics_specs]
  assert len(study.study_runs(["deepfm"], ["none"], [1024], [1, 3],
                              replicas=2)) == 2
  with pytest.raises(ValueError, match=r"seeds 1 and 2 with 2 replicas .*"
                     r"space the seeds at least 2 apart"):
    study.study_runs(["deepfm"], ["none"], [1024], [2, 1], replicas=2)


def test_metrics_row_reads_the_replicas_pd_and_aucs():
  # EvalResult.slicing_metrics as TFMA 0.47 gives them for a two-replica
  # export: the PD (a custom metric's float) under output "", each
  # replica's AUC under its output, the logistic regression's under its.
  def by_output(auc, pd, replica_aucs):
    outputs = {"": {"": {"auc": {"doubleValue": auc},
                         "example_count": {"doubleValue": 400.0},
                         "replica_prediction_difference": pd}},
               "logistic_regression": {"": {"auc": {"doubleValue": 0.5}}}}
    for i, value in enumerate(replica_aucs):
      outputs[f"replica_{i}"] = {"": {"auc": {"doubleValue": value}}}
    return outputs
  slices = study_evaluation.model_metrics_by_slice([
      ((), by_output(0.75, 0.2, [0.74, 0.73])),
      ((("id_frequency", b"rare"),), by_output(0.6, 0.3, [0.58, 0.59]))])
  assert slices[""]["replica_1/auc"] == 0.73
  assert slices[""]["logistic_regression/auc"] == 0.5
  row = study_evaluation.metrics_row(slices, replicas=2)
  assert (row["auc"], row["replica_pd"]) == (0.75, 0.2)
  assert row["replica_pd_rare"] == 0.3 and math.isnan(row["replica_pd_medium"])
  assert row["replica_aucs"] == "0.74 0.73"
  single = study_evaluation.metrics_row(slices)
  assert single["replica_aucs"] == ""


def _row(rule, batch, seed, auc, diverged=False, cowclip=None):
  cowclip = rule == "cowclip" if cowclip is None else cowclip
  row = {name: 1.0 for name in study_results.COLUMNS}
  row.update(run=study.StudyRun("deepfm", rule, batch, seed, cowclip).key,
             model="deepfm", rule=rule, cowclip=cowclip, batch_size=batch,
             seed=seed, embedding_update="dense", diverged=diverged, auc=auc,
             auc_rare=auc - 0.05, examples_medium=math.nan,
             bias_constraints="", replicas=1, push="", replica_aucs="",
             **{c: math.nan for c in study_results.COLUMNS
                if c.startswith("replica_pd")})
  if diverged:
    for name in ("auc", "logloss", "auc_rare"):
      row[name] = math.nan
  return row


def test_a_run_that_trains_like_a_finished_one_reuses_its_row(tmp_path):
  config = PipelineConfig.from_fields(
      dataset="criteo", data="d", output=str(tmp_path), epochs=2)
  base = config.spec.base_batch_size
  rows = []
  for rule, batch in (("none", base), ("cowclip", base), ("none", 4 * base)):
    row = _row(rule, batch, 1, 0.7)
    # As the study records them: `auto` base values from the training rows.
    hparams = study.plan_lib.training_hparams(
        study.run_config(config, study.StudyRun("deepfm", rule, batch, 1,
                                                rule == "cowclip")
                         ).trainer, {}, batch, 50_000)["scaled"]
    row.update(epochs=2, train_examples=50_000,
               **{k: hparams[k] for k in ("dense_lr", "embed_lr", "l2")})
    study_results.append_row(str(tmp_path / "study.csv"), row)
  rows = study_results.read_rows(str(tmp_path / "study.csv"))

  sqrt_base = study.StudyRun("deepfm", "sqrt", base, 1, False)
  reused = study.same_training(config, sqrt_base, rows)
  assert reused["run"] == sqrt_base.key and reused["rule"] == "sqrt"
  assert reused["auc"] == 0.7 and not reused["cowclip"]
  # The ablation at the base batch is `none` too.
  assert study.same_training(
      config, study.StudyRun("deepfm", "cowclip", base, 1, False), rows)
  # Scaled hyperparameters, seed or clipping differ: train.
  for run in (study.StudyRun("deepfm", "sqrt", 4 * base, 1, False),
              study.StudyRun("deepfm", "none", base, 2, False),
              study.StudyRun("deepfm", "cowclip", 4 * base, 1, True)):
    assert study.same_training(config, run, rows) is None, run.key
  assert study.same_training(
      PipelineConfig.from_fields(
          dataset="criteo", data="d", output="o", epochs=1),
      sqrt_base, rows) is None


def test_a_study_dir_refuses_other_study_wide_settings(tmp_path):
  """Runs are found by key; the key does not say the activation, so the
  directory remembers the study-wide settings and refuses others."""
  config = PipelineConfig.from_fields(dataset="criteo", data="d",
                          output=str(tmp_path / "s"), epochs=2)
  results = str(tmp_path / "s")
  study_provenance.check_study_settings(config, results)
  # Per-run settings (batch, rule, model) may differ between runs.
  study_provenance.check_study_settings(study.run_config(
      config, study.StudyRun("dcn", "sqrt", 4096, 1, False)), results)
  # Settings no study run uses: a study recorded before they existed (as
  # docs/study_paper_regime/ was before --no-warm-start) still resumes.
  study_provenance.check_study_settings(dataclasses.replace(
      config, trainer=dataclasses.replace(config.trainer, warm_start=False)),
                                        results)
  assert "warm_start" not in (tmp_path / "s" /
                              study_provenance.STUDY_SETTINGS).read_text()
  smelu = dataclasses.replace(config, trainer=dataclasses.replace(
      config.trainer, model_options={"activation": "smelu"},
      negative_sampling_rate=0.5))
  with pytest.raises(ValueError) as error:
    study_provenance.check_study_settings(smelu, results)
  message = str(error.value)
  assert str(tmp_path / "s") in message and "another --results or --output" in message
  assert "model_options" in message and "negative_sampling_rate: 1.0, now 0.5" in message
  for replicas in ({"replicas": 2}, {"replicas": 1, "push": "single"}):
    with pytest.raises(ValueError, match=f"{list(replicas)[-1]}: "):
      study_provenance.check_study_settings(dataclasses.replace(
          config, trainer=dataclasses.replace(config.trainer, **replicas)),
                                 results)


def test_csv_round_trip_and_bad_values(tmp_path):
  path = str(tmp_path / "study.csv")
  assert study_results.read_rows(path) == []
  study_results.append_row(path, _row("none", 1024, 1, 0.75))
  study_results.append_row(path, _row("none", 8192, 1, 0.7, diverged=True))
  rows = study_results.read_rows(path)
  assert [r["run"] for r in rows] == ["deepfm-none-noclip-b1024-s1",
                                      "deepfm-none-noclip-b8192-s1"]
  assert rows[0]["auc"] == 0.75 and rows[0]["cowclip"] is False
  assert rows[1]["diverged"] is True and math.isnan(rows[1]["auc"])
  with open(path) as f:
    text = f.read()
  with open(path, "w") as f:
    f.write(text.replace("0.75", "high"))
  with pytest.raises(ValueError, match=r"study\.csv:2: column 'auc'"):
    study_results.read_rows(path)


def test_steps_to_logloss_counts_whole_epochs_up_to_the_first_reaching_it(
    tmp_path):
  path = str(tmp_path / "study.csv")
  study_results.append_row(path, dict(
      _row("none", 1024, 1, 0.75), steps=300, epochs_run=3,
      validation_logloss_by_epoch="0.47 0.46 0.465",
      validation_auc_by_epoch="0.70 0.72 0.71"))
  (row,) = study_results.read_rows(path)
  assert study_results.epoch_values(row, "validation_auc_by_epoch") == [
      0.70, 0.72, 0.71]
  assert study_results.steps_to_logloss(row, 0.47) == 100
  assert study_results.steps_to_logloss(row, 0.465) == 200
  assert study_results.steps_to_logloss(row, 0.4599) is None


def test_appending_to_a_csv_without_the_optional_columns_adds_them(tmp_path):
  """A study.csv from before bias_constraints existed keeps its rows, and the
  new row's value lands under its own header."""
  path = str(tmp_path / "study.csv")
  old_columns = [c for c in study_results.COLUMNS if c != "bias_constraints"]
  with open(path, "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=old_columns, extrasaction="ignore")
    writer.writeheader()
    writer.writerow(_row("none", 1024, 1, 0.75))
  new = dict(_row("cowclip", 1024, 1, 0.76), bias_constraints="C6")
  study_results.append_row(path, new)
  rows = study_results.read_rows(path)
  assert [(r["auc"], r["bias_constraints"]) for r in rows] == [
      (0.75, ""), (0.76, "C6")]


def test_appending_replica_columns_to_an_older_csv(tmp_path):
  """A study.csv from before the replica columns keeps its rows (read as no
  replicas: NaN / ""); a row with replicas lands under its own headers."""
  path = str(tmp_path / "study.csv")
  old_columns = [c for c in study_results.COLUMNS
                 if not c.startswith(("replica", "push"))]
  with open(path, "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=old_columns, extrasaction="ignore")
    writer.writeheader()
    writer.writerow(_row("none", 1024, 1, 0.75))
  assert math.isnan(study_results.read_rows(path)[0]["replica_pd"])
  study_results.append_row(path, dict(
      _row("none", 1024, 3, 0.76), replicas=2, push="ensemble",
      replica_pd=0.19, replica_pd_rare=0.25, replica_aucs="0.74 0.745"))
  old, new = study_results.read_rows(path)
  assert (old["push"], old["replica_aucs"]) == ("", "")
  assert (new["replicas"], new["push"], new["replica_pd"],
          new["replica_pd_rare"], new["replica_aucs"]) == (
              2, "ensemble", 0.19, 0.25, "0.74 0.745")


def test_report_shows_the_replicas_pd_when_measured(tmp_path):
  rows = [dict(_row("none", 1024, seed, 0.75), replicas=2, push="ensemble",
               replica_pd=pd, replica_pd_rare=pd + 0.1,
               replica_aucs=f"{0.74 + seed / 100} 0.73")
          for seed, pd in ((1, 0.2), (3, 0.1))]
  text = study_results.markdown_report(rows, [])
  assert "## deepfm: Prediction Difference between the replicas" in text
  assert "| none | 0.1500 ± 0.0707 |" in text
  # Mean over the replicas (0.74, 0.75), then over the seeds.
  assert "## deepfm: Mean AUC of the replicas" in text
  assert "| none | 0.7450 ± 0.0071 |" in text
  assert "## deepfm: PD between replicas by id frequency, batch 1024" in text
  assert "| none | 0.2500 ± 0.0707 | n/a |" in text
  paths = study_results.write_figures(rows, str(tmp_path))
  assert "pd_vs_batch.png" in [os.path.basename(p) for p in paths]
  without = study_results.markdown_report([_row("none", 1024, 1, 0.75)], [])
  assert "replicas" not in without


def test_report_tables_and_figures(tmp_path):
  rows = [_row("none", 1024, 1, 0.75), _row("none", 1024, 2, 0.77),
          _row("none", 8192, 1, 0.6, diverged=True),
          _row("none", 8192, 2, 0.62),
          _row("cowclip", 1024, 1, 0.76), _row("cowclip", 8192, 1, 0.76),
          _row("cowclip", 8192, 1, 0.74, cowclip=False)]
  text = study_results.markdown_report(rows, ["header line"])
  # The header, then every run study.csv holds (a resumed study's command
  # may have asked for one of them).
  assert ("header line\nRuns in study.csv: models deepfm; rules none, "
          "cowclip, cowclip (no clipping); batch sizes 1024, 8192; seeds 1, "
          "2.\n") in text
  assert "## deepfm: Eval AUC" in text and "## deepfm: Eval log loss" in text
  assert "| none | 0.7600 ± 0.0141 | 0.6200 (1/2 diverged) |" in text
  assert "| cowclip | 0.7600 | 0.7600 |" in text
  assert "| cowclip (no clipping) |  | 0.7400 |" in text
  assert "eval AUC by id frequency, batch 1024" in text
  assert "eval AUC by id frequency, batch 8192" in text
  assert "rare 1, medium < min slice size, frequent 1" in text
  paths = study_results.write_figures(rows, str(tmp_path))
  assert sorted(os.path.basename(p) for p in paths) == [
      "auc_by_frequency.png", "auc_vs_batch.png", "epoch_time_vs_batch.png"]
  for path in paths:
    with open(path, "rb") as f:
      assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_seed_difference_is_welchs_interval():
  values, base = [0.7946, 0.7952, 0.7940], [0.7944, 0.7947, 0.7950]
  difference, low, high = study_results.seed_difference(values, base)
  reference = scipy_stats.ttest_ind(values, base, equal_var=False)
  want = reference.confidence_interval(study_results.SEED_CONFIDENCE)
  assert difference == pytest.approx(np.mean(values) - np.mean(base))
  assert (low, high) == pytest.approx((want.low, want.high), rel=1e-12)
  # One seed on a side: no spread to test against.
  one = study_results.seed_difference([0.80], base)
  assert one[0] == pytest.approx(0.80 - np.mean(base))
  assert math.isnan(one[1]) and math.isnan(one[2])


def test_report_gives_each_run_against_the_base_run():
  rows = [_row("none", 1024, 1, 0.75), _row("none", 1024, 2, 0.77),
          _row("sqrt", 8192, 1, 0.78), _row("sqrt", 8192, 2, 0.79),
          _row("cowclip", 8192, 1, 0.76)]
  text = study_results.markdown_report(rows, [])
  lines = text.splitlines()
  start = lines.index("## deepfm: Eval AUC (best epoch: the kept model), "
                      "minus the base run's (`none` at batch 1024; 95% "
                      "interval over seeds, Welch's t; seeds of each side)")
  _, low, high = study_results.seed_difference([0.78, 0.79], [0.75, 0.77])
  assert lines[start + 2:start + 6] == [
      "| rule | 1024 | 8192 |", "|---|---|---|",
      "| none |  |  |",
      f"| sqrt |  | +0.0250 [{low:+.4f}, {high:+.4f}] (2 vs 2) |"]
  assert lines[start + 6] == "| cowclip |  | +0.0000 (1 vs 2) |"
  assert "log loss (best epoch), minus the base run's" in text
  # Without a base run (`none` at the smallest batch), no such table.
  assert "minus the base run's" not in study_results.markdown_report(
      rows[2:], [])


class _FirstEpochBest(keras.callbacks.EarlyStopping):
  """Early stopping that keeps the first epoch, whatever the losses; with
  `stop_at`, also a Ctrl-C as that epoch (0-based) begins."""

  def __init__(self, stop_at=None, **kwargs):
    super().__init__(**kwargs)
    self.stop_at = stop_at

  def _is_improvement(self, monitor_value, reference_value):
    return self.best_weights is None

  def on_epoch_begin(self, epoch, logs=None):
    if epoch == self.stop_at:
      raise KeyboardInterrupt


@pytest.mark.slow
def test_a_run_past_its_best_epoch_is_also_evaluated_at_its_last(
    criteo_study_dir, tmp_path, monkeypatch, caplog):
  """The kept model is the best epoch's; the last epoch's is exported and
  evaluated beside it (last_* columns), its bias refitted the same way.
  Stopped by Ctrl-C after its first epoch, the study's re-run resumes the
  run after that epoch (its backup under the run's directory, removed once
  the row is written), from the train split the stopped command kept.
  """
  stop_at = [1]

  def stopping():
    early = _FirstEpochBest(
        stop_at=stop_at.pop() if stop_at else None,
        monitor=callbacks_lib.EARLY_STOPPING_MONITOR, mode="min",
        patience=callbacks_lib.EARLY_STOPPING_PATIENCE,
        restore_best_weights=True)
    return early

  monkeypatch.setattr(callbacks_lib, "early_stopping", stopping)
  data, work = criteo_study_dir
  results = tmp_path / "past_best"
  argv = ["study", "--dataset", "criteo", "--data", str(data),
          "--output", str(work / "pipeline"), "--results", str(results),
          "--batch-sizes", "256", "--rules", "none", "--seeds", "7",
          "--epochs", "3", "--hidden-units", "16", "--min-frequency",
          str(STUDY_MIN_FREQUENCY)]
  run_dir = work / "pipeline" / "runs" / "past_best" / (
      "deepfm-none-noclip-b256-s7")
  assert cli.main(argv) == 130
  assert not (results / "study.csv").exists()
  # The parsed train split is kept in DIR, and the re-run reads it back
  # (a failed read would write it again).
  kept = work / "pipeline" / kept_split.HELD_SPLIT_DIR / "held.json"
  kept_at = kept.stat().st_mtime_ns
  (state,) = (run_dir / "backup").glob("*/*/fit_state.json")
  held = json.loads(state.read_text())
  assert held["epoch"] == 1 and held["seconds"] > 0
  # The row's train_seconds count the stopped attempt's epoch: as if it
  # had taken 1,000 s.
  state.write_text(json.dumps({**held, "seconds": 1000.0}))
  assert cli.main(argv) == 0
  assert any("after its epoch 1" in r.getMessage() for r in caplog.records)
  assert kept.stat().st_mtime_ns == kept_at
  assert not (run_dir / "backup").exists()
  (row,) = study_results.read_rows(str(results / "study.csv"))
  # As without the stop: early stopping's state, restored from the backup,
  # ends the run after epoch 2 and keeps epoch 1; the curves hold both.
  assert row["best_epoch"] == 1 and row["epochs_run"] == 2
  assert 1000 < row["train_seconds"] < 2000
  for kept, last in (("auc", "last_auc"), ("logloss", "last_logloss")):
    assert 0 < row[last] and row[last] != row[kept]
  assert 0.9 < row["last_calibration"] < 1.1
  losses = study_results.epoch_values(row, "validation_logloss_by_epoch")
  aucs = study_results.epoch_values(row, "validation_auc_by_epoch")
  assert len(losses) == len(aucs) == row["epochs_run"]
  assert all(0 < v for v in losses) and all(0 < v < 1 for v in aucs)
  assert study_results.steps_to_logloss(row, losses[0]) == row["steps"] / (
      row["epochs_run"])
  # With --results apart, the runs go under DIR/runs/<results' name>/.
  assert (run_dir / "serving_last").is_dir() and (run_dir / "tfma_last").is_dir()


@pytest.mark.slow
def test_study_command_trains_every_run_and_resumes(criteo_study_dir,
                                                   tmp_path, monkeypatch,
                                                   capfd):
  """Every run of the grid, the console, the report; a re-run trains
  nothing; then, with the results kept apart from the DIR (as in git, docs/
  study.md), a fresh DIR, as on a fresh machine, reruns Transform, serves
  the kept baseline, trains only the missing run, and refuses rows of
  other data."""
  data, work = criteo_study_dir
  results = tmp_path / "grid"
  flags = ["study", "--dataset", "criteo", "--data", str(data), "--results",
           str(results), "--epochs", "1", "--hidden-units", "16",
           "--min-frequency", str(STUDY_MIN_FREQUENCY), "--embed-lr", "1e-3"]
  argv = flags + ["--output", str(work / "pipeline"), "--batch-sizes",
                  "256,1024", "--rules", "none,sqrt,cowclip", "--seeds", "7"]
  assert cli.main(argv) == 0
  console = capfd.readouterr().out
  # The console reads like `run`'s: Transform and the baseline start and
  # end, each run with its AUC, epochs and time; the libraries' output is
  # in the log.
  for line in ("Transform ...", "Transform done in", "baseline ...",
               "baseline done in", "run 1/6 deepfm-none-noclip-b256-s7 ...",
               "auc 0.", "1 epochs (best 1)", "examples/s",
               "logs/run.log"):
    assert line in console, (line, console)
  assert "WARNING" not in console
  assert (work / "pipeline" / "logs" / "run.log").stat().st_size > 0
  # At the base batch (1024) sqrt trains exactly as none: reused, not rerun.
  assert ("run 4/6 deepfm-sqrt-noclip-b1024-s7 done in" in console and
          "trains exactly as a finished run" in console)
  with open(results / "study.csv", newline="") as f:
    rows = list(csv.DictReader(f))
  assert sorted(r["run"] for r in rows) == sorted(
      r.key for r in study.study_runs(["deepfm"], ["none", "sqrt", "cowclip"],
                                      [256, 1024], [7]))
  by_run = {r["run"]: r for r in rows}
  assert (by_run["deepfm-sqrt-noclip-b1024-s7"]["auc"] ==
          by_run["deepfm-none-noclip-b1024-s7"]["auc"])
  assert (by_run["deepfm-sqrt-noclip-b256-s7"]["auc"] !=
          by_run["deepfm-none-noclip-b256-s7"]["auc"])
  for key in ("deepfm-cowclip-clip-b256-s7", "deepfm-cowclip-clip-b1024-s7"):
    assert 0 <= float(by_run[key]["clipped_fraction"]) <= 1
  assert by_run["deepfm-none-noclip-b256-s7"]["clipped_fraction"] == ""
  for row in rows:
    assert row["diverged"] == "False"
    # One epoch: the last epoch is the kept one.
    assert (row["last_auc"], row["last_logloss"]) == (row["auc"],
                                                      row["logloss"])
    assert 0.0 < float(row["lr_auc"]) <= 1.0
    assert 0.0 < float(row["auc"]) <= 1.0
    # What run_fn would serve, by the paired test on the validation slice
    # (served_model.choose_served), and that one's eval AUC.
    low, difference, high = (float(row[f"validation_auc_{k}"])
                             for k in ("low", "difference", "high"))
    assert low < difference < high and float(row["validation_rows"]) > 0
    model_served = paired_statistics.Estimate(difference, (high - low) / (
        2 * paired_statistics.Z)).lower_bound() > 0
    assert row["served"] == ("model" if model_served else "lr")
    assert row["served_auc"] == row["auc" if model_served else "lr_auc"]
    assert float(row["logloss"]) > 0 and float(row["examples_per_second"]) > 0
    # One epoch: its rate is the row's.
    assert float(row["examples_per_second_by_epoch"]) == pytest.approx(
        float(row["examples_per_second"]), abs=0.5)
    assert float(row["examples_per_cpu_second"]) > 0
    assert float(row["eval_examples"]) > 0
    sqrt_of_quarter = row["run"] == "deepfm-sqrt-noclip-b256-s7"
    assert float(row["embed_lr"]) == 1e-3 * (0.5 if sqrt_of_quarter else 1)
  report = (results / "study.md").read_text()
  assert "## deepfm: Eval AUC" in report and "| cowclip |" in report
  for name in ("auc_vs_batch.png", "epoch_time_vs_batch.png",
               "auc_by_frequency.png"):
    assert (results / name).stat().st_size > 0

  before = (results / "study.csv").read_text()
  assert cli.main(argv) == 0
  console = capfd.readouterr().out
  assert "6 of 6 runs already" in console
  assert "Transform" not in console  # Nothing to train: no data read.
  assert (results / "study.csv").read_text() == before

  # A fresh DIR: the kept baseline, and the one missing run.
  assert (results / trainer.BASELINE_WEIGHTS).stat().st_size > 0
  kept = json.loads((results / trainer.BASELINE_RECORD).read_text())
  assert kept["l2"] > 0 and kept["data_fingerprint"]
  assert kept["train_rows"] > 0
  assert not (work / "pipeline" / "study.csv").exists()

  def no_search(*args, **kwargs):
    raise AssertionError("the baseline was searched again")

  monkeypatch.setattr(trainer, "train_baseline", no_search)
  fresh = flags + ["--output", str(tmp_path / "fresh"), "--batch-sizes",
                   "256", "--rules", "none", "--seeds"]
  assert cli.main(fresh + ["7,8"]) == 0
  assert "1 of 2 runs already" in capfd.readouterr().out
  rows = study_results.read_rows(str(results / "study.csv"))
  first = next(r for r in rows if r["run"] == "deepfm-none-noclip-b256-s7")
  resumed = rows[-1]
  assert resumed["run"] == "deepfm-none-noclip-b256-s8"
  assert first["data_fingerprint"] == resumed["data_fingerprint"] == kept[
      "data_fingerprint"]
  assert "cores" in resumed["machine"] and resumed["commit"]
  # The same baseline: the same AUC (TFMA's, from histograms) and log loss
  # up to the order of its sum (the fresh DIR's ExampleGen may write the
  # eval rows in another order: 8e-10 apart under load).
  assert resumed["lr_auc"] == first["lr_auc"]
  assert resumed["lr_logloss"] == pytest.approx(first["lr_logloss"],
                                                rel=1e-7)
  # The kept baseline's validation probabilities decide the served model
  # of the fresh DIR's run as they did the first's.
  assert resumed["validation_rows"] == first["validation_rows"]
  assert resumed["served"] in ("model", "lr")

  csv_path = results / "study.csv"
  csv_path.write_text(csv_path.read_text().replace(
      kept["data_fingerprint"], "0123456789abcdef", 1))
  assert cli.main(fresh + ["7,8,9"]) == 1
  error = capfd.readouterr().err
  assert ("run deepfm-none-noclip-b256-s7 was trained on other data (data "
          "fingerprint 0123456789abcdef" in error), error
  assert "Traceback" not in error
