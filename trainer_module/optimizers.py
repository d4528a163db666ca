"""The optimizers of the CowClip training step and the dense rate's warmup.

Registered with Keras under package "cowclip_ctr", so saved models and
checkpoints find them by name wherever they live.
"""

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="cowclip_ctr")
class LinearWarmup(keras.optimizers.schedules.LearningRateSchedule):
  """peak * min(1, (step + 1) / warmup_steps): linear from 0 to peak.

  ``step`` is the optimizer's iteration count (0 at the first update), so
  the first update already moves (peak / warmup_steps) and update number
  ``warmup_steps`` is the first at the full rate.
  """

  def __init__(self, peak: float, warmup_steps: int):
    self.peak = peak
    self.warmup_steps = warmup_steps

  def __call__(self, step):
    if self.warmup_steps <= 0:
      return tf.constant(self.peak, tf.float32)
    progress = (tf.cast(step, tf.float32) + 1.0) / float(self.warmup_steps)
    return self.peak * tf.minimum(1.0, progress)

  def get_config(self):
    return {"peak": self.peak, "warmup_steps": self.warmup_steps}


class GlobalGradients:
  """An optimizer given the GLOBAL batch's gradients, the same on every
  replica: the training step sums the replicas' gradients itself
  (distribution.py), so the optimizer must not sum them again. (Keras'
  TensorFlow optimizers all-reduce by SUM, which would apply R times the
  gradient, and gather IndexedSlices, applying a row once per replica.)"""

  def _all_reduce_sum_gradients(self, grads_and_vars):
    return list(grads_and_vars)


@keras.saving.register_keras_serializable(package="cowclip_ctr")
class FusedAdam(GlobalGradients, keras.optimizers.Adam):
  """Adam whose dense update is TensorFlow's fused ApplyAdam kernel.

  Keras 3's Adam makes ~8 element-wise passes (each op reads and writes a
  whole [V, d] tensor); ApplyAdam reads gradient, m, v and the weight once
  and writes m, v and the weight once, on CPU and GPU. Same formula (Keras
  and TF both use alpha = lr sqrt(1 - beta_2^t) / (1 - beta_1^t) and
  epsilon outside the square root). IndexedSlices gradients and amsgrad
  take Keras' own path.
  """

  def update_step(self, gradient, variable, learning_rate):
    if isinstance(gradient, tf.IndexedSlices) or self.amsgrad:
      return super().update_step(gradient, variable, learning_rate)
    dtype = variable.dtype
    step = tf.cast(self.iterations + 1, dtype)
    beta_1 = tf.cast(self.beta_1, dtype)
    beta_2 = tf.cast(self.beta_2, dtype)
    index = self._get_variable_index(variable)
    tf.raw_ops.ResourceApplyAdam(
        var=_resource(variable), m=_resource(self._momentums[index]),
        v=_resource(self._velocities[index]),
        beta1_power=tf.pow(beta_1, step), beta2_power=tf.pow(beta_2, step),
        lr=tf.cast(learning_rate, dtype), beta1=beta_1, beta2=beta_2,
        epsilon=tf.cast(self.epsilon, dtype),
        grad=tf.cast(gradient, dtype))


def _resource(variable):
  """The resource handle of a keras.Variable or (inside apply) tf.Variable."""
  if isinstance(variable, keras.Variable):
    variable = variable.value
  return variable.handle


@keras.saving.register_keras_serializable(package="cowclip_ctr")
class LazyAdam(GlobalGradients, keras.optimizers.Adam):
  """Adam that updates only the rows of tf.IndexedSlices gradients.

  Keras 3's Adam densifies an IndexedSlices gradient (``gradient - m``), so
  every row's moments decay and every row moves at every step. Here, for an
  IndexedSlices gradient, only the rows it names get the Adam moment and
  weight updates (scatter ops; TF Addons' LazyAdam semantics, bias
  correction from the global step). Dense gradients get plain Adam.

  ``unique_indices=True`` promises that every IndexedSlices gradient names
  each row once (the training step deduplicates the batch's ids itself),
  which saves a tf.unique per table and step.
  """

  def __init__(self, *args, unique_indices: bool = False, **kwargs):
    super().__init__(*args, **kwargs)
    if self.amsgrad:
      raise ValueError("LazyAdam does not support amsgrad")
    self.unique_indices = unique_indices

  def get_config(self):
    config = super().get_config()
    config["unique_indices"] = self.unique_indices
    return config

  def update_step(self, gradient, variable, learning_rate):
    if not isinstance(gradient, tf.IndexedSlices):
      return super().update_step(gradient, variable, learning_rate)
    if not self.unique_indices:
      gradient = sum_duplicate_slices(gradient)
    rows = gradient.indices
    values = tf.cast(gradient.values, variable.dtype)
    step = tf.cast(self.iterations + 1, variable.dtype)
    beta_1 = tf.cast(self.beta_1, variable.dtype)
    beta_2 = tf.cast(self.beta_2, variable.dtype)
    alpha = (tf.cast(learning_rate, variable.dtype) *
             tf.sqrt(1 - tf.pow(beta_2, step)) / (1 - tf.pow(beta_1, step)))
    index = self._get_variable_index(variable)
    m = self._momentums[index]
    v = self._velocities[index]
    m_rows = beta_1 * tf.gather(m, rows) + (1 - beta_1) * values
    v_rows = beta_2 * tf.gather(v, rows) + (1 - beta_2) * tf.square(values)
    self.assign(m, tf.IndexedSlices(m_rows, rows))
    self.assign(v, tf.IndexedSlices(v_rows, rows))
    self.assign_sub(variable, tf.IndexedSlices(
        alpha * m_rows / (tf.sqrt(v_rows) + self.epsilon), rows))


def sum_duplicate_slices(slices: tf.IndexedSlices) -> tf.IndexedSlices:
  """The same gradient with one slice per distinct row (values summed).

  Scatter updates of repeated rows would keep only one of them.
  """
  rows, position = tf.unique(slices.indices)
  values = tf.math.unsorted_segment_sum(slices.values, position,
                                        tf.shape(rows)[0])
  return tf.IndexedSlices(values, rows, slices.dense_shape)
