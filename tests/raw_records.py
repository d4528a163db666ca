"""Raw examples as ExampleGen writes them (int64 features, an int label),
and the two methods of a TFTransformOutput that the Trainer's input
pipeline reads, for tests of that pipeline without a Transform run."""

from typing import Dict, Sequence

import tensorflow as tf


def raw_example(label: float, **ints: int) -> bytes:
  """A serialized raw example: int64 features and the int label 'click'."""
  feature = {name: tf.train.Feature(int64_list=tf.train.Int64List(
      value=[int(value)])) for name, value in ints.items()}
  feature["click"] = tf.train.Feature(int64_list=tf.train.Int64List(
      value=[int(label)]))
  return tf.train.Example(features=tf.train.Features(
      feature=feature)).SerializeToString()


class TransformOutput:
  """Raw int64 features `names` and the label 'click'; the 'transform'
  passes the features through and casts the label to float32, as the
  preprocessing_fn does."""

  def __init__(self, names: Sequence[str] = ("row",)):
    self._names = tuple(names)
    # Where a real one's graph is: a held split's kept inputs name it.
    self.transform_savedmodel_dir = "transform_fn"

  def raw_feature_spec(self) -> Dict[str, tf.io.FixedLenFeature]:
    return {name: tf.io.FixedLenFeature([], tf.int64)
            for name in self._names + ("click",)}

  def transformed_feature_spec(self) -> Dict[str, tf.io.FixedLenFeature]:
    return {**self.raw_feature_spec(),
            "click": tf.io.FixedLenFeature([], tf.float32)}

  def transform_features_layer(self):
    def transform(raw):
      return {**raw, "click": tf.cast(raw["click"], tf.float32)}
    return transform
