"""How the study evaluates a trained model: TFMA, as the Evaluator does
(its reader and metrics in batches: components.evaluator).

The Evaluator's EvalConfig without the change thresholds (there is no
baseline), on the RAW eval examples, overall and by id-frequency bucket;
metrics_row turns TFMA's slices into the study.csv columns.
"""

import math
from typing import Dict, Mapping, Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from tensorflow_metadata.proto.v0 import schema_pb2
import tensorflow_model_analysis as tfma

from components.evaluator import evaluate_examples
from pipeline.config import PipelineConfig
from pipeline.pipeline import create_eval_config
from trainer_module import contract

BUCKETS = contract.FREQUENCY_BUCKETS


def study_eval_config(config: PipelineConfig) -> tfma.EvalConfig:
  """The Evaluator's config, cut to what the study reports.

  Same candidate model spec (serving and id-frequency signatures), metrics
  and options, but: no baseline and no change thresholds (a study run has no
  baseline model, and TFMA refuses change thresholds without one; the
  Evaluator rubber-stamps a first run instead), no plots, and only the
  overall and id-frequency slices. With the plots and the per-feature
  slices, TFMA took over 2 minutes per model on 60k eval examples here,
  longer than training.
  """
  eval_config = tfma.EvalConfig()
  eval_config.CopyFrom(create_eval_config(config))
  candidates = [m for m in eval_config.model_specs if not m.is_baseline]
  del eval_config.model_specs[:]
  eval_config.model_specs.extend(candidates)
  eval_config.model_specs[0].ClearField("name")  # The one model evaluated.
  kept = [s for s in eval_config.slicing_specs
          if list(s.feature_keys) in ([], [contract.ID_FREQUENCY])]
  del eval_config.slicing_specs[:]
  eval_config.slicing_specs.extend(kept)
  for spec in eval_config.metrics_specs:
    metrics = [m for m in spec.metrics if not m.class_name.endswith("Plot")]
    del spec.metrics[:]
    spec.metrics.extend(metrics)
    for metric in spec.metrics:
      for threshold in metric.per_slice_thresholds:
        threshold.threshold.ClearField("change_threshold")
  return eval_config


def _slice_name(slice_key) -> str:
  """'' for the overall slice, else 'feature=value'."""
  return ",".join(
      f"{feature}={value.decode() if isinstance(value, bytes) else value}"
      for feature, value in slice_key)


def tfma_metrics(serving_dir: str, eval_config: tfma.EvalConfig,
                 eval_pattern: str, schema: schema_pb2.Schema,
                 output_path: str, beam_args: Sequence[str]
                ) -> Dict[str, Dict[str, float]]:
  """{slice name: {metric: value}} of one exported model on the raw
  examples of eval_pattern (`schema`: their raw schema), read and computed
  as the Evaluator does ('' is the overall slice)."""
  eval_config = tfma.utils.update_eval_config_with_defaults(eval_config)
  model = tfma.default_eval_shared_model(eval_saved_model_path=serving_dir,
                                         eval_config=eval_config)
  with beam.Pipeline(options=PipelineOptions(list(beam_args))) as pipeline:
    evaluate_examples(pipeline, model, eval_config, [eval_pattern], schema,
                      output_path)
  slices = model_metrics_by_slice(
      tfma.load_eval_result(output_path).slicing_metrics)
  if "" not in slices:
    raise LookupError(f"TFMA wrote no overall slice to {output_path}")
  return slices


def model_metrics_by_slice(slicing_metrics) -> Dict[str, Dict[str, float]]:
  """{slice name: {metric: value}} of the model's output from TFMA's
  EvalResult.slicing_metrics; a replica's or the logistic-regression
  baseline's metrics as '<output>/<metric>'."""
  slices = {}
  for slice_key, by_output in slicing_metrics:
    values = slices.setdefault(_slice_name(slice_key), {})
    # {output: {sub key: {metric: value}}}. The model's output is "" (the
    # model spec's prediction_key).
    for output, by_sub_key in by_output.items():
      if output and output != contract.LR_OUTPUT and not output.startswith(
          contract.REPLICA_OUTPUT_PREFIX):
        continue
      prefix = f"{output}/" if output else ""
      for metrics in by_sub_key.values():
        for name, value in metrics.items():
          # TFMA writes its own metrics as {"doubleValue": x}, a custom
          # metric's float (components.gate_metrics) as the number itself.
          if isinstance(value, (int, float)):
            values[prefix + name] = float(value)
          elif "doubleValue" in value:
            values[prefix + name] = value["doubleValue"]
  return slices


def metrics_row(slices: Mapping[str, Mapping[str, float]],
                replicas: int = 1) -> Dict[str, object]:
  """The study.csv metric columns from tfma_metrics' slices.

  A bucket below the eval config's min_slice_size is not reported: NaN.
  With `replicas` > 1 also the Prediction Difference between them overall
  and per bucket, and each replica's AUC ('replica_aucs': space-separated,
  replica 0 first); "auc" is then the served model's. lr_auc and
  lr_logloss are the study's logistic-regression baseline's, served beside
  every run.
  """
  overall = slices[""]
  row = {"auc": overall.get("auc", math.nan),
         "logloss": overall.get("binary_crossentropy", math.nan),
         "mean_prediction": overall.get("mean_prediction", math.nan),
         "mean_label": overall.get("mean_label", math.nan),
         "calibration": overall.get("calibration", math.nan),
         "eval_examples": overall.get("example_count", math.nan),
         "lr_auc": overall.get(f"{contract.LR_OUTPUT}/auc", math.nan),
         "lr_logloss": overall.get(
             f"{contract.LR_OUTPUT}/binary_crossentropy", math.nan)}
  for bucket in BUCKETS:
    values = slices.get(f"{contract.ID_FREQUENCY}={bucket}", {})
    row[f"auc_{bucket}"] = values.get("auc", math.nan)
    row[f"examples_{bucket}"] = values.get("example_count", math.nan)
    row[f"replica_pd_{bucket}"] = values.get(contract.REPLICA_PD, math.nan)
  row["replica_pd"] = overall.get(contract.REPLICA_PD, math.nan)
  row["replica_aucs"] = " ".join(
      str(overall.get(f"{contract.replica_output(i)}/auc", math.nan))
      for i in range(replicas)) if replicas > 1 else ""
  return row
