"""What the report reads about a run: ML Metadata, TFMA's output, training.json.

Everything comes from what the run left in its output DIR: ML Metadata
(DIR/metadata.sqlite, through pipeline.metadata) says which artifacts exist
and what each component of the latest pipeline run did; TFMA's own loaders
read the evaluation (metrics of the candidate, of the baseline and TFMA's
diffs, per slice; the calibration plot; the validation); training.json next
to the model says how it was trained. Nothing is recomputed: read_run
returns a RunSummary the text, figures and pages are made from.
"""

import dataclasses
import json
import os
from typing import Any, Dict, Mapping, Optional
from typing import Tuple

from ml_metadata.proto import metadata_store_pb2
import tensorflow as tf
import tensorflow_model_analysis as tfma
from tensorflow_model_analysis.writers import eval_config_writer
from tfx.components.evaluator import constants as evaluator_constants
from tfx.utils import io_utils
from tfx.utils import path_utils

from components import tuner as tuner_component
from pipeline import metadata
from pipeline.config import DEFAULT_MIN_SLICE_SIZE
from trainer_module import contract

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
  pipeline_run, components, outputs = metadata.latest_pipeline_run(store)
  found = {name: metadata.latest_artifact(store, name, outputs) for name in (
      "Model", "ModelEvaluation", "ModelBlessing", "PushedModel",
      "HyperParameters", "TunerResults")}
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
                               metadata.read_outcome, store, outputs,
                               metadata_path)
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
