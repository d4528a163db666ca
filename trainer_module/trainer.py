"""TFX Trainer entry point: `run_fn`, the input pipeline and the export.

run_fn composes the pure parts (scaling rule, models, CowClip training
step) and does the I/O: it reads the Transform output with tf.data, trains,
records the hyperparameters actually used, and exports a SavedModel whose
`serving_default` signature takes serialized RAW tf.Examples (the Transform
graph is attached) and returns the click probability.
"""

import json
import math
import os
from typing import Any, Dict, List, Mapping

import keras
import tensorflow as tf
import tensorflow_transform as tft

from trainer_module import features
from trainer_module import models
from trainer_module import preprocessing
from trainer_module import scaling
from trainer_module import training

# Name of the serving signature's output (the Evaluator reads it).
PREDICTION_KEY = "probability"
# Written next to the exported model: how this model was trained.
TRAINING_RECORD = "training.json"


def count_records(file_patterns: List[str]) -> int:
  """Number of examples in gzipped TFRecords (one cheap pass, no parsing)."""
  files = [f for p in file_patterns for f in tf.io.gfile.glob(p)]
  if not files:
    raise FileNotFoundError(f"no transformed examples match {file_patterns}")
  dataset = tf.data.TFRecordDataset(files, compression_type="GZIP",
                                    num_parallel_reads=tf.data.AUTOTUNE)
  return int(dataset.reduce(tf.constant(0, tf.int64), lambda n, _: n + 1))


def make_dataset(file_patterns: List[str],
                 tf_transform_output: tft.TFTransformOutput,
                 label: str,
                 batch_size: int,
                 shuffle: bool,
                 seed: int = 0) -> tf.data.Dataset:
  """(features, label) batches from transformed examples.

  Records are batched BEFORE parsing (one parse_example per batch instead
  of one per record) and read in parallel, so input is not the bottleneck.
  """
  files = [f for p in file_patterns for f in tf.io.gfile.glob(p)]
  feature_spec = tf_transform_output.transformed_feature_spec()
  dataset = tf.data.Dataset.from_tensor_slices(files)
  if shuffle:
    dataset = dataset.shuffle(len(files), seed=seed)
  dataset = dataset.interleave(
      lambda f: tf.data.TFRecordDataset(f, compression_type="GZIP"),
      num_parallel_calls=tf.data.AUTOTUNE, deterministic=not shuffle)
  if shuffle:
    dataset = dataset.shuffle(max(16 * batch_size, 10_000), seed=seed)
  dataset = dataset.batch(batch_size)

  def parse(serialized):
    parsed = tf.io.parse_example(serialized, feature_spec)
    return parsed, parsed.pop(label)

  return dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE).prefetch(
      tf.data.AUTOTUNE)


class ServingModule(tf.Module):
  """Raw serialized tf.Examples in, click probability out."""

  def __init__(self, model: keras.Model,
               tf_transform_output: tft.TFTransformOutput, label: str):
    super().__init__()
    self.model = model
    self.transform_layer = tf_transform_output.transform_features_layer()
    raw_spec = tf_transform_output.raw_feature_spec()
    raw_spec.pop(label, None)
    self._raw_spec = raw_spec

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string,
                                              name="examples")])
  def serve(self, examples):
    raw = tf.io.parse_example(examples, self._raw_spec)
    transformed = self.transform_layer(raw)
    logits = self.model(transformed, training=False)
    return {PREDICTION_KEY: tf.sigmoid(logits)}


def export_serving_model(model: keras.Model,
                         tf_transform_output: tft.TFTransformOutput,
                         label: str, export_dir: str) -> None:
  """Saves the model with the Transform graph as a SavedModel."""
  module = ServingModule(model, tf_transform_output, label)
  tf.saved_model.save(module, export_dir,
                      signatures={"serving_default": module.serve})


def training_hparams(custom_config: Mapping[str, Any],
                     tuned: Mapping[str, float]) -> Dict[str, Any]:
  """Base (possibly tuned) and scaled hyperparameters, as recorded."""
  base = {**custom_config["base_hparams"],
          **{k: v for k, v in tuned.items()
             if k in custom_config["base_hparams"]}}
  scaled = scaling.scale_hparams(custom_config["scaling_rule"], base,
                                 custom_config["base_batch_size"],
                                 custom_config["batch_size"])
  return {"rule": custom_config["scaling_rule"],
          "base_batch_size": custom_config["base_batch_size"],
          "batch_size": custom_config["batch_size"],
          "base": base,
          "scaled": scaled}


def run_fn(fn_args) -> None:
  """Trains the configured CTR model with CowClip and exports it."""
  config = fn_args.custom_config
  spec = features.get_spec(config["dataset"])
  tf_transform_output = tft.TFTransformOutput(fn_args.transform_output)
  tuned = (fn_args.hyperparameters or {}).get("values", {})
  record = training_hparams(config, tuned)
  batch_size = config["batch_size"]

  train_examples = count_records(fn_args.train_files)
  steps_per_epoch = math.ceil(train_examples / batch_size)
  vocab_sizes = preprocessing.vocabulary_sizes(tf_transform_output, spec)
  model = models.build_model(config["model"], vocab_sizes, spec.dense,
                             models.ModelOptions())
  training.compile_model(model, training.TrainingConfig(
      **record["scaled"], steps_per_epoch=steps_per_epoch,
      cowclip=config["cowclip"]))

  train = make_dataset(fn_args.train_files, tf_transform_output, spec.label,
                       batch_size, shuffle=True)
  evaluation = make_dataset(fn_args.eval_files, tf_transform_output,
                            spec.label, batch_size, shuffle=False)
  history = model.fit(
      train, validation_data=evaluation, epochs=config["epochs"],
      callbacks=[training.ThroughputLogger(batch_size),
                 keras.callbacks.TensorBoard(log_dir=fn_args.model_run_dir)])

  record.update(train_examples=train_examples,
                steps_per_epoch=steps_per_epoch,
                vocab_sizes=vocab_sizes,
                history={k: [float(v) for v in vs]
                         for k, vs in history.history.items()})
  export_serving_model(model, tf_transform_output, spec.label,
                       fn_args.serving_model_dir)
  for directory in (fn_args.model_run_dir, fn_args.serving_model_dir):
    with tf.io.gfile.GFile(os.path.join(directory, TRAINING_RECORD), "w") as f:
      json.dump(record, f, indent=2, sort_keys=True)
