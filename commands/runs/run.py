"""`run`: the whole pipeline on this machine, with its console and report.

The command line has checked the input (pipeline.input_check) before this
module, which imports TFX, was imported. The run's console
(commands.cli.console) sends the libraries' output to DIR/logs/run.log
unless --verbose; the report (commands.report) is written at the end of
every run, failed ones included.
"""

import argparse
import dataclasses
import logging
from typing import Optional, Tuple

from commands.cli import console
from commands.report import pages
from commands.report import reading as report_reading
from commands.report import text as report_text
from commands.report.reading import RunSummary
from pipeline import metadata
from pipeline import progress
from pipeline import runner
from pipeline.config import PipelineConfig


@dataclasses.dataclass(frozen=True)
class ReportedRun:
  """A finished pipeline run: its outcome and its report."""
  outcome: metadata.RunOutcome
  summary: Optional[RunSummary]  # None: the report could not be written.
  page: Optional[str]

  def headline(self) -> str:
    """What the run ends with on the console (report_text.headline)."""
    return report_text.headline(
        self.summary or RunSummary(self.outcome.metadata_path,
                                   outcome=self.outcome), self.page)


def run_with_report(config: PipelineConfig,
                    verbose: bool = False) -> ReportedRun:
  """Runs the whole pipeline (pipeline.runner) with its console
  (commands.cli.console; library output to DIR/logs/run.log unless `verbose`),
  then writes its report.

  A failed run gets a report too (that is when it is needed). The caller
  has checked the input (pipeline.input_check: the command line, before it
  imported TensorFlow); a run it refused has no report: nothing ran.
  """
  with console.pipeline_console(config.output, verbose):
    try:
      outcome = runner.run_pipeline(config)
    except BaseException:
      _write_report_logged(config)
      raise
    summary, page = _write_report_logged(config)
  return ReportedRun(outcome, summary, page)


def _write_report_logged(config: PipelineConfig
                        ) -> Tuple[Optional[RunSummary], Optional[str]]:
  """Writes the run's report: (what it read, the page). A failure to write
  it is logged, not raised: a report must not fail the run it describes,
  nor hide its error."""
  try:
    summary = report_reading.read_run(config.output, config.gate.min_slice_size)
    page = pages.write_run_page(summary)
  except Exception as error:  # pylint: disable=broad-except
    logging.warning("could not write the run report: %s", error,
                    exc_info=True)
    return None, None
  logging.info("report: %s", page)
  return summary, page


def main(args: argparse.Namespace) -> int:
  """Runs the checked config (args.config) and ends with the headline."""
  run = run_with_report(args.config, args.verbose)
  print(run.headline())
  return 0 if run.outcome.pushed else progress.EXIT_NOT_PUSHED
