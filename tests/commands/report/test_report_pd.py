"""The report's reproducibility section: PD overall and by slice, and each
replica's AUC, from a hand-built summary."""

import dataclasses

from commands.report import pages as report
from commands.report.reading import SliceMetrics
from trainer_module import contract

import test_report_rendering as rendering


def _replica_run(tmp_path):
  run = rendering._summary(str(tmp_path))  # pylint: disable=protected-access
  overall = {**run.evaluation.overall, contract.REPLICA_PD: 0.0731,
             contract.BASELINE_PD: 0.1042,
             "replica_0/auc": 0.7301, "replica_1/auc": 0.7288}
  slices = run.evaluation.slices + (SliceMetrics(
      "C1", "abc", {"example_count": 900.0, "auc": 0.7,
                    contract.REPLICA_PD: 0.0912}, None),)
  training = {**run.training, "push": "ensemble", "replicas": [
      {"seed": 0, "best_epoch": 2, "epochs_run": 3,
       "best": {"val_auc": 0.7411}},
      {"seed": 1, "best_epoch": 1, "epochs_run": 3,
       "best": {"val_auc": 0.7398}}]}
  return dataclasses.replace(
      run, training=training, evaluation=dataclasses.replace(
          run.evaluation, overall=overall, slices=slices))


def test_replica_rows_read_training_record_and_tfma(tmp_path):
  assert report.reproducibility_rows(_replica_run(tmp_path)) == [
      ["replica_0", 0, "2/3", "0.7411", "0.7301"],
      ["replica_1", 1, "1/3", "0.7398", "0.7288"],
      ["served (ensemble)", "-", "-", "-", "0.7312"]]


def test_page_shows_pd_by_slice_and_replicas(tmp_path):
  page = open(report.write_run_page(_replica_run(tmp_path)),
              encoding="utf-8").read()
  section = page[page.index("Reproducibility: Prediction Difference"):]
  assert ("<tr><td>overall</td><td class='num'>4,000</td>"
          "<td class='num'>0.0731</td><td class='num'>0.1042</td></tr>"
          in section)
  assert ("<tr><td>C1=abc</td><td class='num'>900</td>"
          "<td class='num'>0.0912</td><td>-</td></tr>" in section)
  assert "<td>replica_1</td>" in section


def test_no_section_without_replicas_or_baseline_pd(tmp_path):
  page = open(report.write_run_page(rendering._summary(str(tmp_path))),  # pylint: disable=protected-access
              encoding="utf-8").read()
  assert "Prediction Difference" not in page
