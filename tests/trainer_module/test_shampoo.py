"""Shampoo against a float64 NumPy transcription of its module doc, its
pieces one by one, a Keras fit, and two replicas against one device
(distributed_shampoo.py, in its own process)."""

import math
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import script_output
from trainer_module import optimizers
from trainer_module import shampoo

HERE = os.path.dirname(os.path.abspath(__file__))
# A kernel within one block, one cut into 3 row blocks of 100, one cut into
# 3 column blocks of 87 (the last padded by 2), and a bias.
SHAPES = ((5, 3), (300, 7), (6, 259), (7,))
BLOCKED = ((300, 7), (7,))  # The XLA case: one blocked kernel is enough.
STEPS = 7
OPTIONS = dict(learning_rate=optimizers.LinearWarmup(0.05, 3), beta_1=0.9,
               epsilon=1e-7, matrix_epsilon=1e-6, block_size=128,
               start_preconditioning_step=2, precondition_every=3)


def reference_root(statistic, epsilon):
  values, vectors = np.linalg.eigh(statistic)
  top = values.max()
  ridge = epsilon * top if top > 0 else 1.0
  return (vectors * (np.maximum(values, 0) + ridge) ** -0.25) @ vectors.T


def reference_bounds(dim, block_size):
  """The blocks' [start, stop) along a dimension, the last one short."""
  size = math.ceil(dim / math.ceil(dim / block_size))
  return [(start, min(start + size, dim)) for start in range(0, dim, size)]


def reference_shampoo(initial, gradients, peak, warmup, beta_1, beta_2,
                      epsilon, matrix_epsilon, block_size,
                      start_preconditioning_step, precondition_every,
                      nesterov):
  """The module doc's update, float64, one block at a time (slices of
  unequal sizes, no padding)."""
  weights = [w.astype(np.float64) for w in initial]
  m = [np.zeros_like(w) for w in weights]
  v = [np.zeros_like(w) for w in weights]
  stats, roots = {}, {}

  def accumulate(old, new):
    return old + new if beta_2 == 1 else beta_2 * old + (1 - beta_2) * new

  for t, step_gradients in enumerate(gradients, start=1):
    lr = peak * min(1.0, t / warmup)
    for i, g in enumerate(step_gradients):
      g = g.astype(np.float64)
      v[i] = accumulate(v[i], g * g)
      v_hat = v[i] if beta_2 == 1 else v[i] / (1 - beta_2 ** t)
      adam = g / (np.sqrt(v_hat) + epsilon)
      d = adam
      if g.ndim == 2:
        s = np.zeros_like(g)
        for r0, r1 in reference_bounds(g.shape[0], block_size):
          for c0, c1 in reference_bounds(g.shape[1], block_size):
            block = g[r0:r1, c0:c1]
            key = (i, r0, c0)
            left, right = stats.get(key, (0.0, 0.0))
            left = accumulate(left, block @ block.T)
            right = accumulate(right, block.T @ block)
            stats[key] = left, right
            if (t >= start_preconditioning_step and
                (t - start_preconditioning_step) % precondition_every == 0):
              roots[key] = (reference_root(left, matrix_epsilon),
                            reference_root(right, matrix_epsilon))
            if t >= start_preconditioning_step:
              s[r0:r1, c0:c1] = roots[key][0] @ block @ roots[key][1]
        if t >= start_preconditioning_step:
          d = s * np.linalg.norm(adam) / np.linalg.norm(s)
      m[i] = beta_1 * m[i] + (1 - beta_1) * d
      if nesterov:
        update = (beta_1 * m[i] + (1 - beta_1) * d) / (1 - beta_1 ** (t + 1))
      else:
        update = m[i] / (1 - beta_1 ** t)
      weights[i] = weights[i] - lr * update
  return weights


def random_gradients(rng, shapes):
  """STEPS gradients per variable, each step at its own scale (so the
  grafted norms differ from step to step), the 300-row kernel's last row
  zero."""
  steps = []
  for _ in range(STEPS):
    scale = 10.0 ** rng.uniform(-2, 1)
    step = [scale * rng.normal(size=shape) for shape in shapes]
    for g in step:
      if len(g) == 300:
        g[-1] = 0.0
    steps.append([g.astype(np.float32) for g in step])
  return steps


@pytest.mark.parametrize("shapes,beta_2,nesterov,jit_compile,tolerance", [
    (SHAPES, 0.99, False, False, 1e-5), (SHAPES, 1.0, True, False, 1e-5),
    (BLOCKED, 0.99, True, True, 5e-3)], ids=["ema", "sum-nesterov", "xla"])
def test_the_optimizer_makes_the_reference_updates(shapes, beta_2, nesterov,
                                                   jit_compile, tolerance):
  """7 updates under tf.function: roots computed at updates 2 and 5 and
  stale in between, Adam's direction at update 1. The float32 weights'
  updates match the float64 reference within 1e-5 relative (measured: 2e-6).

  With XLA (training.TrainingConfig.jit_compile) tf.linalg.eigh is XLA's
  Jacobi solver, which stops early: the roots of the rank-deficient 100 x
  100 blocks were 2e-4 off and the updates up to 1.3e-3 (measured), so
  5e-3."""
  rng = np.random.default_rng(0)
  initial = [rng.normal(size=shape).astype(np.float32) for shape in shapes]
  gradients = random_gradients(rng, shapes)
  variables = [keras.Variable(w, name=f"w{i}") for i, w in
               enumerate(initial)]
  optimizer = shampoo.Shampoo(**OPTIONS, beta_2=beta_2, nesterov=nesterov)
  optimizer.build(variables)
  apply = tf.function(lambda g: optimizer.apply(g, variables),
                      jit_compile=jit_compile)
  for step in gradients:
    apply([tf.constant(g) for g in step])
  expected = reference_shampoo(
      initial, gradients, 0.05, 3, beta_2=beta_2, nesterov=nesterov,
      **{k: v for k, v in OPTIONS.items() if k != "learning_rate"})
  for variable, start, want in zip(variables, initial, expected):
    moved = want - start
    got = variable.numpy().astype(np.float64) - start
    assert np.max(np.abs(got - moved)) <= tolerance * np.max(np.abs(moved))
  assert int(optimizer.iterations.numpy()) == STEPS


def test_adam_direction_before_preconditioning_starts():
  """Until start_preconditioning_step, with beta_1 = 0, the first step is
  Adam's: lr * g / (|g| + epsilon), about lr * sign(g)."""
  rng = np.random.default_rng(1)
  gradient = rng.normal(size=(6, 4)).astype(np.float32)
  variable = keras.Variable(np.zeros((6, 4), np.float32))
  optimizer = shampoo.Shampoo(learning_rate=0.1, beta_1=0.0,
                              start_preconditioning_step=2)
  optimizer.apply([tf.constant(gradient)], [variable])
  np.testing.assert_allclose(variable.numpy(),
                             -0.1 * gradient / (np.abs(gradient) + 1e-7),
                             rtol=1e-6)


def test_a_preconditioned_update_has_adams_norm_per_variable():
  """From update 1 on Shampoo's direction, with beta_1 = 0: each kernel
  moves lr * ||Adam's direction|| (here g / (|g| + epsilon)), not along
  Adam's direction."""
  rng = np.random.default_rng(5)
  gradients = [rng.normal(size=shape).astype(np.float32) * scale
               for shape, scale in (((300, 7), 1.0), ((6, 4), 100.0))]
  variables = [keras.Variable(np.zeros(g.shape, np.float32))
               for g in gradients]
  optimizer = shampoo.Shampoo(learning_rate=0.1, beta_1=0.0,
                              start_preconditioning_step=1)
  optimizer.apply([tf.constant(g) for g in gradients], variables)
  for g, variable in zip(gradients, variables):
    adam = g / (np.abs(g) + 1e-7)
    moved = -variable.numpy()
    assert np.linalg.norm(moved) == pytest.approx(
        0.1 * np.linalg.norm(adam), rel=1e-5)
    cosine = np.sum(moved * adam) / (np.linalg.norm(moved) *
                                     np.linalg.norm(adam))
    assert cosine < 0.99


def test_inverse_4th_root_inverts_the_ridged_statistics():
  """root^4 (S + epsilon lambda_max I) = I for a batch of positive semi-
  definite S, one of them rank-deficient; an all-zero S gives I."""
  rng = np.random.default_rng(2)
  factors = [rng.normal(size=(6, 6)), rng.normal(size=(6, 2))]
  stats = np.stack([f @ f.T for f in factors] + [np.zeros((6, 6))])
  roots = shampoo.inverse_pth_root(tf.constant(stats), 4, 1e-3).numpy()
  assert roots.dtype == np.float64
  for s, root in zip(stats[:2], roots[:2]):
    ridged = s + 1e-3 * np.linalg.eigvalsh(s).max() * np.eye(6)
    np.testing.assert_allclose(np.linalg.matrix_power(root, 4) @ ridged,
                               np.eye(6), atol=1e-9)
    np.testing.assert_allclose(root, root.T, atol=1e-12)
  np.testing.assert_array_equal(roots[2], np.eye(6))


@pytest.mark.parametrize("shape,block_size,blocks", [
    ((300, 7), 128, (3, 100, 7)), ((6, 259), 128, (3, 6, 87)),
    ((390, 400), 128, (16, 98, 100)), ((5, 3), 128, (1, 5, 3))])
def test_blocks_round_trip(shape, block_size, blocks):
  matrix = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
  split = shampoo.to_blocks(tf.constant(matrix), block_size)
  assert tuple(split.shape) == blocks
  back = shampoo.from_blocks(split, shape, block_size)
  np.testing.assert_array_equal(back.numpy(), matrix)
  # Row-major block order, each block the matrix's slice; padding is zero.
  size_r, size_c = blocks[1:]
  col_blocks = math.ceil(shape[1] / size_c)
  last = split.numpy()[col_blocks - 1]
  width = shape[1] - (col_blocks - 1) * size_c
  np.testing.assert_array_equal(
      last[:min(size_r, shape[0]), :width],
      matrix[:size_r, (col_blocks - 1) * size_c:])
  assert not last[:, width:].any()


def test_block_partition_is_even_and_at_most_the_block_size():
  assert shampoo.block_partition(128, 128) == (1, 128)
  assert shampoo.block_partition(129, 128) == (2, 65)
  assert shampoo.block_partition(400, 128) == (4, 100)
  with pytest.raises(ValueError, match="positive"):
    shampoo.block_partition(0, 128)


def test_grafting_takes_adams_norm_and_keeps_the_direction():
  rng = np.random.default_rng(3)
  direction = rng.normal(size=(4, 5))
  adam = rng.normal(size=(4, 5)) * 7
  grafted = shampoo.grafted_direction(tf.constant(direction),
                                      tf.constant(adam)).numpy()
  assert np.linalg.norm(grafted) == pytest.approx(np.linalg.norm(adam),
                                                  rel=1e-12)
  cosine = np.sum(grafted * direction) / (
      np.linalg.norm(grafted) * np.linalg.norm(direction))
  assert cosine == pytest.approx(1.0, rel=1e-12)
  zero = shampoo.grafted_direction(tf.zeros([3]), tf.ones([3])).numpy()
  np.testing.assert_array_equal(zero, np.zeros(3))


def test_bad_arguments_are_named():
  with pytest.raises(ValueError, match="block_size must be a positive"):
    shampoo.Shampoo(block_size=0)
  with pytest.raises(ValueError, match="beta_2 must be in"):
    shampoo.Shampoo(beta_2=0.0)


def test_config_round_trips_with_the_warmup_schedule():
  optimizer = shampoo.Shampoo(learning_rate=optimizers.LinearWarmup(0.1, 5),
                              block_size=64, nesterov=True)
  again = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
  assert isinstance(again, shampoo.Shampoo)
  assert again.get_config() == optimizer.get_config()


def test_a_checkpoint_restores_the_statistics_and_roots(tmp_path):
  """Training resumed from a checkpoint makes the same next update."""
  rng = np.random.default_rng(6)
  gradients = [tf.constant(rng.normal(size=(9, 4)).astype(np.float32))
               for _ in range(3)]

  def trained(steps, restore=None):
    variable = keras.Variable(np.ones((9, 4), np.float32))
    optimizer = shampoo.Shampoo(learning_rate=0.1,
                                start_preconditioning_step=1,
                                precondition_every=2)
    optimizer.build([variable])
    checkpoint = tf.train.Checkpoint(variable=variable, optimizer=optimizer)
    if restore:
      checkpoint.restore(restore).assert_consumed()
    for g in steps:
      optimizer.apply([g], [variable])
    return variable.numpy(), checkpoint

  _, checkpoint = trained(gradients[:2])
  path = checkpoint.save(str(tmp_path / "ckpt"))
  resumed, _ = trained(gradients[2:], restore=path)
  straight, _ = trained(gradients)
  np.testing.assert_array_equal(resumed, straight)


def test_a_small_model_fit_lowers_the_loss():
  """A two-layer MLP on a learnable rule, Keras' own fit and train step,
  roots recomputed every 2 updates from update 3 on."""
  rng = np.random.default_rng(4)
  x = rng.normal(size=(512, 10)).astype(np.float32)
  y = (x[:, 0] * x[:, 1] + x[:, 2] > 0).astype(np.float32)
  keras.utils.set_random_seed(4)
  model = keras.Sequential([keras.Input((10,)),
                            keras.layers.Dense(16, activation="relu"),
                            keras.layers.Dense(1)])
  model.compile(optimizer=shampoo.Shampoo(
      learning_rate=0.01, start_preconditioning_step=3,
      precondition_every=2), loss=keras.losses.BinaryCrossentropy(
          from_logits=True))
  history = model.fit(x, y, batch_size=64, epochs=4, verbose=0)
  losses = history.history["loss"]
  assert losses[-1] < 0.8 * losses[0]


@pytest.mark.slow  # Trains mirrored, in another process.
def test_two_replicas_make_the_one_device_update():
  """The CowClip step of DCNv2 (DNN and matrix cross kernels) with Shampoo
  as the dense optimizer, mirrored over 2 logical CPU devices against one
  device: the same weights within 1e-5 relative after 3 updates (roots at
  updates 1 and 3, stale at 2)."""
  results = script_output.json_of(os.path.join(HERE,
                                               "distributed_shampoo.py"))
  assert set(results) == {"dcnv2-sparse"}
  for result in results.values():
    assert result["replicas"] == 2
    assert result["update"] > 1e-3
    assert result["weight_relative_difference"] < 1e-5
    assert max(result["metric_difference"].values()) < 1e-5
