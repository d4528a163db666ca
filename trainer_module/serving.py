"""The exported SavedModel: raw serialized tf.Examples in, the click
probability (and the baseline's, each replica's, the id-frequency slice)
out, with the Transform graph attached."""

from typing import Dict, Sequence

import keras
import numpy as np
import tensorflow as tf
import tensorflow_transform as tft
# The save_traces switch of tf_keras's model.save, for a tf_keras layer
# saved inside a tf.Module.
from tf_keras.src.saving.legacy.saved_model import utils as keras_save_options

from trainer_module import contract
from trainer_module import features
from trainer_module import preprocessing
from trainer_module import settings as settings_lib
from trainer_module.settings import TrainerSettings


def frequency_buckets(typical_counts: tf.Tensor,
                      thresholds: Sequence[int]) -> tf.Tensor:
  """contract.FREQUENCY_BUCKETS names of [batch] training-set id counts.

  Args:
    typical_counts: float [batch] counts (see ServingModule.slicing_features).
    thresholds: (rare/medium, medium/frequent) boundaries; a count equal to
      a boundary falls in the higher bucket.
  """
  index = tf.zeros_like(typical_counts, tf.int32)
  for threshold in thresholds:
    index += tf.cast(typical_counts >= threshold, tf.int32)
  return tf.gather(tf.constant(contract.FREQUENCY_BUCKETS), index)


def serving_outputs(probabilities: Sequence[tf.Tensor],
                    baseline_probability: tf.Tensor, push: str,
                    serve_baseline: bool = False) -> Dict[str, tf.Tensor]:
  """The serving signature's outputs from the replicas' probabilities.

  contract.PREDICTION_KEY is the one replica's probability, or with
  several the mean of their probabilities (push "ensemble", the
  self-ensemble) or replica 0's (push "single"); each replica's is also
  returned under contract.replica_output(i). contract.LR_OUTPUT is the
  logistic-regression baseline's, and with `serve_baseline` it is also
  PREDICTION_KEY (served_model.choose_served).
  """
  outputs = {contract.LR_OUTPUT: baseline_probability}
  if len(probabilities) > 1:
    outputs.update({contract.replica_output(i): p
                    for i, p in enumerate(probabilities)})
  if serve_baseline:
    outputs[contract.PREDICTION_KEY] = baseline_probability
  else:
    outputs[contract.PREDICTION_KEY] = (
        tf.add_n(list(probabilities)) / len(probabilities)
        if push == "ensemble" else probabilities[0])
  return outputs


class ServingModule(tf.Module):
  """Raw serialized tf.Examples in, click probability out.

  Its functions branch on Python values only, so they are traced without
  AutoGraph's rewrite (of them, the models and the Transform layer), which
  cost seconds of every export.

  Besides `serve`, `slicing_features` gives the Evaluator (TFMA
  preprocessing function) each example's id-frequency bucket, from the
  training-set counts of the Transform vocabularies: the slice that shows
  whether large-batch training hurt the rare ids.
  """

  def __init__(self, replicas: Sequence[keras.Model], baseline: keras.Model,
               tf_transform_output: tft.TFTransformOutput,
               spec: features.DatasetSpec, frequency_field: str,
               frequency_thresholds: Sequence[int],
               push: str = settings_lib.DEFAULT_PUSH,
               serve_baseline: bool = False):
    """`replicas`: the model's replicas (one without --replicas; see
    serve); `push`: settings.PUSH_MODES, what is served with replicas;
    `serve_baseline`: serve the baseline's probability instead."""
    super().__init__()
    self.replicas = list(replicas)
    self._push = push
    self._serve_baseline = serve_baseline
    self.baseline = baseline
    self.transform_layer = tf_transform_output.transform_features_layer()
    raw_spec = tf_transform_output.raw_feature_spec()
    raw_spec.pop(spec.label, None)
    self._raw_spec = raw_spec
    fields = (spec.categorical_features if frequency_field == "all"
              else (frequency_field,))
    # Count of every id, OOV rows (rare or unseen ids) included as 0.
    self.id_counts = {
        field: tf.Variable(np.concatenate([
            preprocessing.vocabulary_frequencies(tf_transform_output, field),
            np.zeros(features.NUM_OOV_BUCKETS, np.int64)]), trainable=False,
                           name=f"id_counts_{field}")
        for field in fields}
    self._frequency_thresholds = tuple(frequency_thresholds)

  def _transform(self, examples):
    return self.transform_layer(tf.io.parse_example(examples, self._raw_spec))

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string,
                                              name="examples")],
               autograph=False)
  def serve(self, examples):
    """The click probability and the baseline's; with replicas, each
    replica's too (contract.replica_output), and the served probability is
    their mean (push "ensemble") or replica 0's (push "single"), or the
    baseline's when it is served."""
    transformed = self._transform(examples)
    return serving_outputs(
        [tf.sigmoid(replica(transformed, training=False))
         for replica in self.replicas],
        tf.sigmoid(self.baseline(transformed, training=False)), self._push,
        self._serve_baseline)

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string,
                                              name="examples")],
               autograph=False)
  def slicing_features(self, examples):
    """{contract.ID_FREQUENCY: bucket}: by the geometric mean of the
    example's id counts over the fields (or the count in the one chosen
    field)."""
    transformed = self._transform(examples)
    log_counts = [
        tf.math.log1p(tf.cast(tf.gather(counts, tf.reshape(
            transformed[field], [-1])), tf.float32))
        for field, counts in sorted(self.id_counts.items())]
    typical = tf.math.expm1(tf.reduce_mean(tf.stack(log_counts), axis=0))
    return {contract.ID_FREQUENCY: frequency_buckets(
        typical, self._frequency_thresholds)}


def export_serving_model(replicas: Sequence[keras.Model],
                         baseline: keras.Model,
                         tf_transform_output: tft.TFTransformOutput,
                         settings: TrainerSettings, export_dir: str,
                         serve_baseline: bool = False) -> None:
  """Saves the model's replicas (one without --replicas) and its logistic-
  regression baseline with the Transform graph as a SavedModel; with
  `serve_baseline` its served probability is the baseline's."""
  module = ServingModule(replicas, baseline, tf_transform_output, settings.spec,
                         settings.frequency_field,
                         settings.frequency_thresholds, settings.push,
                         serve_baseline)
  # tf.Transform's layer is a tf_keras Model: by default saving traces its
  # calls again and a signature of its own, which nothing loads (these
  # signatures call it); 2.4 s of every export (docs/tests.md).
  with keras_save_options.keras_option_scope(save_traces=False,
                                             in_tf_saved_model_scope=False):
    tf.saved_model.save(module, export_dir, signatures={
        "serving_default": module.serve,
        contract.SLICING_SIGNATURE: module.slicing_features})
