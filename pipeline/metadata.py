"""Every read of a run's ML Metadata store: what ran, what it produced.

The runner, the report, the study and the tuning tool ask the store the
same few questions, so they ask them here:

* `latest_artifact`: the newest live artifact of a type (the Evaluator's
  baseline copy left out);
* `node_artifacts`: the artifacts of the latest finished
  (or cached) execution of one pipeline node. By execution rather than the
  newest artifact of a type: a cached node returns artifacts older than
  those of another, later run in the same store;
* `latest_pipeline_run`: the components of the latest pipeline run;
* `ingestion_counts`, `window_description`, `execution_spans`: rows
  ingested, the days trained on, component timings;
* `read_outcome_at`: what a finished run produced (RunOutcome).
"""

import dataclasses
from typing import Dict, FrozenSet, Mapping, Optional, Tuple

from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2
import tensorflow_model_analysis as tfma
from tensorflow_model_analysis.view import util as tfma_view_util
from tensorflow_model_analysis.writers import eval_config_writer
from tensorflow_model_analysis.writers import metrics_plots_and_validations_writer
from tfx import v1 as tfx
from tfx.orchestration.portable.mlmd import execution_lib

from components import baseline
from components import gate_metrics
from components import span_window
from trainer_module import paired_statistics

# Execution states of a node that finished: ran, or reused a cached result.
FINISHED = (metadata_store_pb2.Execution.COMPLETE,
            metadata_store_pb2.Execution.CACHED)


def open_store(metadata_path: str) -> metadata_store.MetadataStore:
  """The SQLite ML Metadata store at `metadata_path` (created if absent)."""
  return metadata_store.MetadataStore(
      tfx.orchestration.metadata.sqlite_metadata_connection_config(
          metadata_path))


def latest_artifact(store: metadata_store.MetadataStore, type_name: str,
                    among: FrozenSet[int] = frozenset()
                   ) -> Optional[metadata_store_pb2.Artifact]:
  """The newest live artifact of `type_name` in `store` of those whose ids
  are `among` (a run's outputs: latest_pipeline_run), else the newest of
  all; None if there is none.

  `among` matters when a run reuses older artifacts from the cache: a
  backfill of an earlier span is reported with its own model, not the
  newer span's. The Evaluator's baseline (a copy of the served model) is
  not a Model this pipeline trained: it is left out.
  """
  artifacts = store.get_artifacts_by_type(type_name)
  live = [a for a in artifacts
          if a.state == metadata_store_pb2.Artifact.LIVE
          and not baseline.is_baseline_copy(a)]
  pool = [a for a in live if a.id in among] or live
  return max(pool, key=lambda a: a.id) if pool else None


def latest_execution(store: metadata_store.MetadataStore, pipeline_name: str,
                     node_id: str) -> Optional[metadata_store_pb2.Execution]:
  """The latest finished (or cached) execution of a node, or None."""
  context = store.get_context_by_type_and_name(
      "node", f"{pipeline_name}.{node_id}")
  executions = [e for e in (store.get_executions_by_context(context.id)
                            if context else [])
                if e.last_known_state in FINISHED]
  return max(executions, key=lambda e: e.id) if executions else None


def node_artifacts(metadata_path: str, pipeline_name: str, node_id: str,
                   inputs: bool = False) -> Dict[str, str]:
  """Output key -> URI of the latest finished execution of a node, and its
  input keys too when `inputs` (an input and an output never share a key
  in TFX's components).

  Raises:
    LookupError: the node never finished in this pipeline's store.
  """
  store = open_store(metadata_path)
  execution = latest_execution(store, pipeline_name, node_id)
  if execution is None:
    raise LookupError(f"{metadata_path}: {node_id} of pipeline "
                      f"{pipeline_name} never finished")
  kinds = {metadata_store_pb2.Event.OUTPUT}
  if inputs:
    kinds.add(metadata_store_pb2.Event.INPUT)
  events = [e for e in store.get_events_by_execution_ids([execution.id])
            if e.type in kinds]
  uris = {a.id: a.uri for a in store.get_artifacts_by_id(
      [e.artifact_id for e in events])}
  return {e.path.steps[0].key: uris[e.artifact_id] for e in events}


def ingestion_counts(store: metadata_store.MetadataStore,
                     among: FrozenSet[int] = frozenset()) -> Dict[str, int]:
  """The row counts RawCtrExampleGen recorded on its latest Examples
  (rows_read, bad_rows, train_rows, eval_rows) and its span (TFX's span
  property: the day of daily data, 0 for data without {SPAN}), or {} when
  none did. The latest among the artifact ids `among` when there are
  some (a run's outputs: a re-run of an earlier day reads that day's,
  cached, not the newest)."""
  ingested = [a for a in store.get_artifacts_by_type("Examples")
              if "rows_read" in a.custom_properties]
  if not ingested:
    return {}
  latest = max([a for a in ingested if a.id in among] or ingested,
               key=lambda a: a.id)
  counts = {key: latest.custom_properties[key].int_value
            for key in ("rows_read", "bad_rows", "train_rows", "eval_rows")}
  # TFX's driver records the span as a custom property.
  counts["span"] = (latest.custom_properties["span"].int_value
                    if "span" in latest.custom_properties else
                    latest.properties["span"].int_value)
  return counts


def window_description(store: metadata_store.MetadataStore,
                       among: FrozenSet[int]) -> Optional[str]:
  """What a run's SpanWindow (among its output ids) gave Transform and the
  Trainer, when more than its own day: "trained on spans 1,2 (a window of
  2 days)", with the spans missing from it; None otherwise."""
  windows = [a for a in store.get_artifacts_by_type("Examples")
             if a.id in among and
             span_window.WINDOW_SPANS_PROPERTY in a.custom_properties]
  if not windows:
    return None
  window = max(windows, key=lambda a: a.id).custom_properties
  days = window[span_window.WINDOW_DAYS_PROPERTY]
  # A compiled spec's executor may record it as a JSON number (a double).
  days = days.int_value or int(days.double_value)
  if days == 1:
    return None
  trained = window[span_window.WINDOW_SPANS_PROPERTY].string_value
  missing = window[span_window.MISSING_SPANS_PROPERTY].string_value
  return (f"trained on spans {trained} (a window of {days} days"
          + (f"; spans {missing} missing: not ingested by a run of this "
             "output directory" if missing else "") + ")")


def execution_spans(store: metadata_store.MetadataStore
                   ) -> Dict[str, Tuple[float, float]]:
  """Node id -> (start, end) seconds since the epoch of its execution (the
  latest one of a node that ran more than once). Cache hits are left out:
  a resumed run's cached node reports the execution that did the work."""
  spans = {}
  for execution in sorted(store.get_executions(), key=lambda e: e.id):
    if execution.last_known_state == metadata_store_pb2.Execution.CACHED:
      continue
    node = next((c.name for c in store.get_contexts_by_execution(execution.id)
                 if c.type == "node"), None)
    if node is None:
      continue
    spans[node.rsplit(".", 1)[-1]] = (
        execution.create_time_since_epoch / 1000,
        execution.last_update_time_since_epoch / 1000)
  return spans


@dataclasses.dataclass(frozen=True)
class ComponentState:
  """One component (node) of the latest pipeline run, how it ended and how
  long its execution took, from creation to its last update in ML
  Metadata (a cached one's is the cache lookup)."""
  node: str
  state: str
  message: str = ""
  seconds: Optional[float] = None


def latest_pipeline_run(store: metadata_store.MetadataStore
                       ) -> Tuple[Optional[str], Tuple[ComponentState, ...],
                                  FrozenSet[int]]:
  """(run id, its components, ids of the artifacts it output or cached)."""
  runs = store.get_contexts_by_type("pipeline_run")
  if not runs:
    return None, (), frozenset()
  run = max(runs, key=lambda c: c.id)
  executions = sorted(store.get_executions_by_context(run.id),
                      key=lambda e: e.id)
  components = []
  for execution in executions:
    nodes = [c.name.split(".", 1)[-1]
             for c in store.get_contexts_by_execution(execution.id)
             if c.type == "node"]
    result = execution_lib.get_execution_result(execution,
                                                ignore_parse_errors=True)
    components.append(ComponentState(
        node=nodes[0] if nodes else execution.type,
        state=metadata_store_pb2.Execution.State.Name(
            execution.last_known_state),
        message=result.result_message if result else "",
        seconds=(execution.last_update_time_since_epoch -
                 execution.create_time_since_epoch) / 1000))
  events = store.get_events_by_execution_ids([e.id for e in executions])
  outputs = frozenset(e.artifact_id for e in events
                      if e.type == metadata_store_pb2.Event.OUTPUT)
  return run.name, tuple(components), outputs


@dataclasses.dataclass(frozen=True)
class RunOutcome:
  """What a finished run produced, read from ML Metadata."""
  metadata_path: str
  pushed: bool
  pushed_model: Optional[str]
  evaluation: Optional[str]
  model: Optional[str]
  failed_checks: Tuple[str, ...] = ()
  ingestion: Optional[str] = None
  noise_passes: Tuple[str, ...] = ()

  def describe(self) -> str:
    lines = [f"metadata store:   {self.metadata_path}",
             f"ingested:         {self.ingestion}",
             f"trained model:    {self.model}",
             f"evaluation:       {self.evaluation}"]
    if self.pushed:
      lines.append(f"pushed model:     {self.pushed_model}")
    else:
      lines += [f"not pushed: {check}" for check in self.failed_checks or
                ("the model was not blessed",)]
    return "\n".join(lines)


# A check's statistic, by the name of the metric its threshold reads.
_GATE_STEMS = {gate_metrics.bound_name(stem, bound): stem
               for stem in gate_metrics.STEMS
               for bound in (gate_metrics.LOWER, gate_metrics.UPPER)}
_CONFIDENCE = f"{paired_statistics.CONFIDENCE:.0%}"


def describe_failure(failure, metrics: Optional[Dict[str, float]] = None
                    ) -> str:
  """Which check failed and its numbers: 'auc 0.6012 [0.5890, 0.6134]: its
  95% interval is entirely below the minimum 0.7000', the statistic and
  its interval from `metrics` (the slice's, by TFMA's names)."""
  name = failure.metric_key.name
  if not failure.HasField("metric_value"):
    return f"{name}: {failure.message}"
  value = failure.metric_value.double_value.value
  stem = _GATE_STEMS.get(name)
  if stem:
    return _describe_gate_failure(failure, stem, metrics or {})
  bound = failure.metric_threshold.value_threshold
  if bound.HasField("lower_bound") and value < bound.lower_bound.value:
    return f"{name} {value:.4f} < min {bound.lower_bound.value:.4f}"
  if bound.HasField("upper_bound") and value > bound.upper_bound.value:
    return f"{name} {value:.4f} > max {bound.upper_bound.value:.4f}"
  return f"{name} {value:.4f}: {failure.message}"


def _describe_gate_failure(failure, stem: str, metrics: Dict[str, float]
                          ) -> str:
  """A failed check of components.gate_metrics: its bound lies beyond the
  threshold, so the whole interval does."""
  key, threshold = failure.metric_key, failure.metric_threshold
  signed = key.is_diff or stem == gate_metrics.AUC_OVER_LR
  shown = gate_metrics.interval_text(
      metrics, stem, "_diff" if key.is_diff else "", signed=signed) or (
          f"with {key.name} {failure.metric_value.double_value.value:.4f}")
  whole = f"its {_CONFIDENCE} interval is entirely"
  if key.is_diff:
    change = threshold.change_threshold
    higher = change.direction == tfma.MetricDirection.HIGHER_IS_BETTER
    label = "auc" if stem == gate_metrics.AUC_CHANGE else "log loss"
    return (f"{label} changed by {shown} vs the last blessed model: {whole} "
            f"{'below' if higher else 'above'} the allowed "
            f"{change.absolute.value:+.4f}")
  bound = threshold.value_threshold
  if stem == gate_metrics.AUC_OVER_LR:
    return (f"the model's AUC minus the logistic-regression baseline's is "
            f"{shown}: {whole} below the allowed "
            f"{bound.lower_bound.value:+.4f}: a model that loses to "
            "logistic regression is not pushed")
  if bound.HasField("lower_bound"):
    return (f"{stem} {shown}: {whole} below the minimum "
            f"{bound.lower_bound.value:.4f}")
  return (f"{stem} {shown}: {whole} above the maximum "
          f"{bound.upper_bound.value:.4f}")


def _candidate_slicing_metrics(evaluation_uri: str) -> list:
  """The candidate model's (slice key, metrics) pairs, as
  tfma.load_eval_result's slicing_metrics, without loading its plots:
  converting the calibration plots to dicts took about a second of each
  run's end for metrics that read none of them."""
  eval_config = eval_config_writer.load_eval_run(evaluation_uri)[0]
  candidate = next((s.name for s in eval_config.model_specs
                    if not s.is_baseline), "")
  return [metrics for proto in (metrics_plots_and_validations_writer
                                .load_and_deserialize_metrics(evaluation_uri))
          for metrics in [tfma_view_util.convert_metrics_proto_to_dict(
              proto, model_name=candidate or None)]
          if metrics is not None]


def _model_metrics(slicing_metrics, slice_key) -> Dict[str, float]:
  """{TFMA name: value} of the model's output ("") on one slice."""
  for key, by_output in slicing_metrics:
    if key == slice_key:
      return {name: value["doubleValue"]
              for by_sub_key in [by_output.get("", {})]
              for values in by_sub_key.values()
              for name, value in values.items()
              if isinstance(value, dict) and "doubleValue" in value}
  return {}


def failed_checks(evaluation_uri: str) -> Tuple[str, ...]:
  """The Evaluator's failed checks, one readable line each."""
  result = tfma.load_validation_result(evaluation_uri)
  if result.validation_ok:
    return ()
  evaluation = _candidate_slicing_metrics(evaluation_uri)
  checks = []
  for failures in result.metric_validations_per_slice:
    slice_key = tfma.slicer.deserialize_slice_key(failures.slice_key)
    where = tfma.slicer.stringify_slice_key(slice_key)
    metrics = _model_metrics(evaluation, slice_key)
    checks += [f"{describe_failure(failure, metrics)} ({where})"
               for failure in failures.failures]
  return tuple(checks)


@dataclasses.dataclass(frozen=True)
class GateCheck:
  """One check of components.gate_metrics as the eval config sets it: the
  statistic (its stem), the bound its threshold reads (LOWER or UPPER),
  the limit, and whether it is a change against the served model."""
  stem: str
  bound: str
  limit: float
  change: bool = False


def gate_checks(eval_config) -> Tuple[GateCheck, ...]:
  """The gate's checks on the overall slice, from an EvalConfig."""
  checks = []
  for spec in eval_config.metrics_specs:
    for metric in spec.metrics:
      statistic = getattr(gate_metrics, metric.class_name, None)
      if not hasattr(statistic, "STEM"):
        continue
      for per_slice in metric.per_slice_thresholds:
        threshold = per_slice.threshold
        if threshold.HasField("change_threshold"):
          higher = (threshold.change_threshold.direction ==
                    tfma.MetricDirection.HIGHER_IS_BETTER)
          checks.append(GateCheck(
              statistic.STEM, gate_metrics.UPPER if higher else
              gate_metrics.LOWER,
              threshold.change_threshold.absolute.value, change=True))
        value = threshold.value_threshold
        if value.HasField("lower_bound"):
          checks.append(GateCheck(statistic.STEM, gate_metrics.UPPER,
                                  value.lower_bound.value))
        if value.HasField("upper_bound"):
          checks.append(GateCheck(statistic.STEM, gate_metrics.LOWER,
                                  value.upper_bound.value))
  return tuple(checks)


def describe_noise_passes(checks, metrics: Mapping[str, float]
                         ) -> Tuple[str, ...]:
  """The checks that passed on their interval alone: the point estimate is
  beyond the limit, but the 95% interval reaches it, so the eval rows
  cannot tell the two apart. The push goes on (the gate fails a check only
  beyond the noise, components.gate_metrics); this says so, one line each.

  `metrics`: the candidate's overall metrics by TFMA's names (changes with
  the "_diff" suffix).
  """
  rows = metrics.get("example_count")
  count = f"{rows:,.0f} eval rows" if rows else "the eval rows"
  lines = []
  for check in checks:
    suffix = "_diff" if check.change else ""
    value, low, high = (metrics.get(name + suffix) for name in (
        check.stem, gate_metrics.bound_name(check.stem, gate_metrics.LOWER),
        gate_metrics.bound_name(check.stem, gate_metrics.UPPER)))
    if None in (value, low, high):
      continue
    # UPPER read against a minimum, LOWER against a maximum.
    minimum = check.bound == gate_metrics.UPPER
    if (value >= check.limit) if minimum else (value <= check.limit):
      continue
    if (high < check.limit) if minimum else (low > check.limit):
      continue  # A failed check, said by failed_checks.
    signed = check.change or check.stem == gate_metrics.AUC_OVER_LR
    number = "{:+.4f}" if signed else "{:.4f}"
    what = (f"{check.stem.replace('_', ' ')} vs the served model"
            if check.change else check.stem.replace("_", " "))
    lines.append(
        f"{what} {number.format(value)} is "
        f"{'below the minimum' if minimum else 'above the maximum'} "
        f"{number.format(check.limit)}; {count} cannot tell it from the "
        f"limit ({_CONFIDENCE} interval {number.format(low)} to "
        f"{number.format(high)}): more eval rows would decide")
  return tuple(lines)


def noise_passes(evaluation_uri: str) -> Tuple[str, ...]:
  """describe_noise_passes of an Evaluator's output (overall slice)."""
  eval_config = eval_config_writer.load_eval_run(evaluation_uri)[0]
  return describe_noise_passes(
      gate_checks(eval_config),
      _model_metrics(_candidate_slicing_metrics(evaluation_uri), ()))


def read_outcome_at(metadata_path: str) -> RunOutcome:
  """The latest artifacts in the metadata store at `metadata_path`.

  Needs no PipelineConfig, so a finished run can be read (commands.report.pages)
  from its output directory alone.
  """
  store = open_store(metadata_path)
  return read_outcome(store, latest_pipeline_run(store)[2], metadata_path)


def read_outcome(store: metadata_store.MetadataStore, outputs: FrozenSet[int],
                 metadata_path: str) -> RunOutcome:
  """read_outcome_at on an open store, whose latest run output `outputs`
  (latest_pipeline_run: a caller that has them reads them once)."""

  def uri(type_name):
    artifact = latest_artifact(store, type_name, outputs)
    return artifact.uri if artifact else None

  counts = ingestion_counts(store, outputs)
  ingestion = (f"{counts['rows_read']:,} rows, "
               f"{counts['bad_rows']:,} bad rows dropped "
               f"({counts['train_rows']:,} train, "
               f"{counts['eval_rows']:,} eval)"
               + (f", span {counts['span']}" if counts["span"] else "")
               ) if counts else None
  window = window_description(store, outputs)
  if ingestion and window:
    ingestion += "; " + window
  pushed = latest_artifact(store, "PushedModel", outputs)
  evaluation = uri("ModelEvaluation")
  is_pushed = bool(pushed and pushed.custom_properties["pushed"].int_value)
  return RunOutcome(
      metadata_path=metadata_path,
      pushed=is_pushed,
      pushed_model=(pushed.custom_properties["pushed_destination"]
                    .string_value if is_pushed else None),
      evaluation=evaluation,
      model=uri("Model"),
      failed_checks=(failed_checks(evaluation)
                     if evaluation and not is_pushed else ()),
      ingestion=ingestion,
      noise_passes=noise_passes(evaluation) if evaluation else ())
