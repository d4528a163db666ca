"""Rows of an embedding table read by id, without reading the table.

With the sparse embedding update, LazyAdam writes the tables and their Adam
slots with scatter ops, which put a TensorFlow resource variable in
copy-on-read mode: from then on every whole read (ReadVariableOp, what
tf.gather on a keras.Variable does before it gathers) copies the whole
table. A step that looks up 52 tables, gathers their rows for CowClip and
their slots' rows for Adam copied every table several times: at 10x the
default vocabulary that was a third of the step (docs/benchmark.md). Read
through the resource variable itself, tf.gather is one ResourceGather of
the rows. The dense update does not use this: it reads whole tables anyway,
and a ResourceGather would put them in copy-on-read mode too.
"""

import keras
import tensorflow as tf


def resource(variable):
  """The tf.Variable behind a keras.Variable (itself otherwise): what
  tf.gather reads rows of without a whole read."""
  return variable.value if isinstance(variable, keras.Variable) else variable


def gather_rows(variable, ids: tf.Tensor) -> tf.Tensor:
  """The rows `ids` of `variable`, read alone (ResourceGather)."""
  return tf.gather(resource(variable), ids)
