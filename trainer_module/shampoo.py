"""Shampoo for the dense and cross layers, its step size grafted from Adam.

Shampoo (Anil et al., "Scalable Second Order Optimization for Deep
Learning", 2020) preconditions a 2-D kernel's gradient G on both sides. The
kernel is cut into blocks of at most ``block_size`` rows and columns
(``block_partition``) and each block b keeps two statistics,

  L_b += G_b G_b^T   (its rows x rows)     R_b += G_b^T G_b   (cols x cols)

(an exponential moving average with weight beta_2 when beta_2 < 1), and
moves along L_b^{-1/4} G_b R_b^{-1/4}. The inverse 4th roots cost a float64
eigendecomposition each (``inverse_pth_root``), so they are recomputed every
``precondition_every`` updates and used stale in between, as in the paper.
Biases and every variable that is not 2-D get the paper's diagonal
fallback: Adam's direction.

Grafting (the paper's layer-wise learning-rate grafting): each variable's
Shampoo direction is rescaled to the norm of the Adam direction of the same
gradient (``grafted_direction``). Shampoo chooses where a layer moves, Adam
how far, so the dense learning rate, its warmup and the batch-size scaling
rule tuned for optimizers.FusedAdam still apply. Momentum runs on the
grafted direction.

Update t (1-based) of a variable W with gradient g:

  v <- beta_2 v + (1 - beta_2) g^2     (beta_2 = 1: v <- v + g^2, Adagrad)
  a  = g / (sqrt(v / (1 - beta_2^t)) + epsilon)  (beta_2 = 1: no correction)
  2-D W: L, R updated from g (every update, so they are full when
         preconditioning starts); for t >= start_preconditioning_step,
         s = the blocks' L^{-1/4} G_b R^{-1/4} put back together and
         d = s ||a|| / ||s||; before, d = a.
  other W: d = a
  m <- beta_1 m + (1 - beta_1) d
  W <- W - lr m / (1 - beta_1^t)
       (nesterov: W - lr (beta_1 m + (1 - beta_1) d) / (1 - beta_1^(t+1)))

The momentum is bias-corrected like Adam's, so that before preconditioning
starts the step has Adam's size from the first update on.

block_size 128 and a ridge relative to the largest eigenvalue are the
settings of the authors' implementation (google-research/scalable_shampoo,
README); the block size of the paper's Criteo (DLRM) run was not found.
Dimensions are cut evenly rather than into 128s and a remainder.

The statistics are float64: a block's smallest kept eigenvalues are
matrix_epsilon (1e-6) times its largest, below the rounding of a float32
running sum of G G^T. The roots are float32: they multiply the gradient.
"""

import math
from typing import Tuple

import keras
import tensorflow as tf

from trainer_module import optimizers


def block_partition(dim: int, block_size: int) -> Tuple[int, int]:
  """(blocks, size) cutting a dimension of ``dim`` into the fewest blocks
  of at most ``block_size``, all of one size.

  Block i holds indices [i * size, (i + 1) * size); the last one is padded
  with blocks * size - dim (< blocks) zero rows. Zero rows of G add zero
  rows and columns to L, and the root of a block-diagonal matrix is the
  block-diagonal of the roots, so the padding changes no real entry of the
  direction. One size for all blocks lets them stack into one tensor: one
  batched matmul and one batched eigendecomposition per kernel.
  """
  if dim < 1 or block_size < 1:
    raise ValueError(f"need a positive dimension and block size, got "
                     f"dim={dim}, block_size={block_size}")
  blocks = math.ceil(dim / block_size)
  return blocks, math.ceil(dim / blocks)


def to_blocks(matrix: tf.Tensor, block_size: int) -> tf.Tensor:
  """The [rows, cols] matrix as [row_blocks * col_blocks, size_r, size_c]
  blocks (block_partition of each dimension; row-major block order)."""
  rows, cols = matrix.shape
  row_blocks, row_size = block_partition(rows, block_size)
  col_blocks, col_size = block_partition(cols, block_size)
  padded = tf.pad(matrix, [[0, row_blocks * row_size - rows],
                           [0, col_blocks * col_size - cols]])
  blocks = tf.reshape(padded, [row_blocks, row_size, col_blocks, col_size])
  return tf.reshape(tf.transpose(blocks, [0, 2, 1, 3]),
                    [row_blocks * col_blocks, row_size, col_size])


def from_blocks(blocks: tf.Tensor, shape: Tuple[int, int],
                block_size: int) -> tf.Tensor:
  """The [rows, cols] matrix of to_blocks' blocks (the padding dropped)."""
  rows, cols = shape
  row_blocks, row_size = block_partition(rows, block_size)
  col_blocks, col_size = block_partition(cols, block_size)
  grid = tf.reshape(blocks, [row_blocks, col_blocks, row_size, col_size])
  padded = tf.reshape(tf.transpose(grid, [0, 2, 1, 3]),
                      [row_blocks * row_size, col_blocks * col_size])
  return padded[:rows, :cols]


def inverse_pth_root(statistics: tf.Tensor, p: int = 4,
                     epsilon: float = 1e-6) -> tf.Tensor:
  """(S + epsilon * lambda_max(S) I)^(-1/p) of each symmetric positive
  semi-definite S of ``statistics`` [..., n, n], in float64.

  From the eigendecomposition (tf.linalg.eigh): S = Q diag(lambda) Q^T,
  root = Q diag((max(lambda, 0) + ridge)^(-1/p)) Q^T. The ridge is relative
  to the matrix's largest eigenvalue, so it does not depend on the scale of
  the gradients, and it bounds the root's condition number by
  (1 / epsilon)^(1/p) where the statistics are rank-deficient (a block of
  100 rows after fewer than 100 / cols updates). Eigenvalues rounded below
  0 count as 0. An all-zero S (a block no gradient reached) gives I.

  Under XLA (jit_compile) tf.linalg.eigh becomes XLA's Jacobi solver, which
  stops at a looser tolerance: measured on rank-deficient 100 x 100
  statistics, roots 2e-4 relative off the float64 LAPACK ones (1e-7 on a
  well-conditioned 5 x 5).
  """
  matrices = tf.cast(statistics, tf.float64)
  matrices = (matrices + tf.linalg.matrix_transpose(matrices)) / 2
  eigenvalues, eigenvectors = tf.linalg.eigh(matrices)
  top = tf.reduce_max(eigenvalues, axis=-1, keepdims=True)
  ridge = tf.where(top > 0, epsilon * top, tf.ones_like(top))
  powers = tf.pow(tf.maximum(eigenvalues, 0.0) + ridge, -1.0 / p)
  return tf.matmul(eigenvectors * powers[..., tf.newaxis, :], eigenvectors,
                   adjoint_b=True)


def grafted_direction(direction: tf.Tensor, graft: tf.Tensor) -> tf.Tensor:
  """``direction`` rescaled to the (Frobenius) norm of ``graft``: the
  layer's step direction from one optimizer and its size from another.
  0 where ``direction`` is 0."""
  return direction * tf.math.divide_no_nan(tf.norm(graft),
                                           tf.norm(direction))


def statistic_update(statistic: tf.Tensor, value: tf.Tensor,
                     beta_2: float) -> tf.Tensor:
  """The running statistic with ``value`` added: the exponential moving
  average beta_2 * statistic + (1 - beta_2) * value, or the sum when
  beta_2 = 1 (Adagrad's accumulator, the paper's default)."""
  if beta_2 == 1.0:
    return statistic + value
  return beta_2 * statistic + (1.0 - beta_2) * value


def _bias_correction(beta: float, step: tf.Tensor, dtype) -> tf.Tensor:
  """1 - beta^step, computed in float64: in float32, 1 - 0.999 is off by
  1.3e-5 relative, which Adam's step size would inherit."""
  power = tf.pow(tf.constant(beta, tf.float64), tf.cast(step, tf.float64))
  return tf.cast(1.0 - power, dtype)


class _Preconditioner:
  """A 2-D variable's block statistics (float64) and their inverse 4th
  roots (float32), each [blocks, size, size]."""

  def __init__(self, optimizer, variable, block_size):
    rows, cols = variable.shape
    row_blocks, row_size = block_partition(rows, block_size)
    col_blocks, col_size = block_partition(cols, block_size)
    blocks = row_blocks * col_blocks
    prefix = variable.path.replace("/", "_")

    def slot(size, dtype, name):
      return optimizer.add_variable([blocks, size, size], dtype=dtype,
                                    name=f"{prefix}_{name}")

    self.left = slot(row_size, "float64", "left_statistics")
    self.right = slot(col_size, "float64", "right_statistics")
    self.left_root = slot(row_size, "float32", "left_inverse_root")
    self.right_root = slot(col_size, "float32", "right_inverse_root")


@keras.saving.register_keras_serializable(package="cowclip_ctr")
class Shampoo(optimizers.GlobalGradients, keras.optimizers.Optimizer):
  """Blocked Shampoo with Adam grafting and momentum (see module doc).

  Cost, measured on the DeepFM-sized stack 390 -> 400 -> 400 -> 400 -> 1
  (docs/scripts/shampoo_step_time.py, 2 CPU cores shared with other
  work): an update without new roots 10-19 ms median (FusedAdam: 0.6 ms),
  a recomputation of the roots ~80 ms more, i.e. ~8 ms per step at
  precondition_every=10. Whole steps at batch 8192 (110-155 ms) did not
  differ beyond the machine's noise.

  Args:
    learning_rate: a float or a schedule (optimizers.LinearWarmup).
    beta_1: momentum of the grafted direction (0: none).
    beta_2: weight of the running statistics L, R and of Adam's second
      moment; 1.0 sums them (Adagrad).
    epsilon: Adam's epsilon, outside the square root (FusedAdam's default).
    matrix_epsilon: ridge of the inverse roots, relative to each block's
      largest eigenvalue (inverse_pth_root).
    block_size: largest block side; larger dimensions are cut evenly.
    precondition_every: updates between recomputations of the roots.
    start_preconditioning_step: first update (1-based) that uses Shampoo's
      direction; Adam's before, while the statistics fill (25: the
      authors' examples).
    nesterov: Nesterov momentum.
  """

  def __init__(self, learning_rate=1e-3, beta_1: float = 0.9,
               beta_2: float = 0.999, epsilon: float = 1e-7,
               matrix_epsilon: float = 1e-6, block_size: int = 128,
               precondition_every: int = 10,
               start_preconditioning_step: int = 25, nesterov: bool = False,
               name: str = "shampoo", **kwargs):
    super().__init__(learning_rate=learning_rate, name=name, **kwargs)
    if not 0.0 <= beta_1 < 1.0:
      raise ValueError(f"beta_1 must be in [0, 1), got {beta_1}")
    if not 0.0 < beta_2 <= 1.0:
      raise ValueError(f"beta_2 must be in (0, 1], got {beta_2}")
    for label, value in (("block_size", block_size),
                         ("precondition_every", precondition_every),
                         ("start_preconditioning_step",
                          start_preconditioning_step)):
      if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{label} must be a positive integer, got "
                         f"{value!r}")
    self.beta_1 = beta_1
    self.beta_2 = beta_2
    self.epsilon = epsilon
    self.matrix_epsilon = matrix_epsilon
    self.block_size = block_size
    self.precondition_every = precondition_every
    self.start_preconditioning_step = start_preconditioning_step
    self.nesterov = nesterov

  def build(self, var_list):
    if self.built:
      return
    super().build(var_list)
    self._momentums, self._velocities, self._preconditioners = [], [], []
    for variable in var_list:
      self._momentums.append(
          self.add_variable_from_reference(variable, name="momentum"))
      self._velocities.append(
          self.add_variable_from_reference(variable, name="velocity"))
      self._preconditioners.append(
          _Preconditioner(self, variable, self.block_size)
          if len(variable.shape) == 2 else None)

  def update_step(self, gradient, variable, learning_rate):
    dtype = variable.dtype
    index = self._get_variable_index(variable)
    gradient = tf.cast(tf.convert_to_tensor(gradient), dtype)
    step = self.iterations + 1
    velocity = self._velocities[index]
    self.assign(velocity, statistic_update(velocity, tf.square(gradient),
                                           self.beta_2))
    if self.beta_2 < 1.0:
      velocity = velocity / _bias_correction(self.beta_2, step, dtype)
    adam = gradient / (tf.sqrt(velocity) + self.epsilon)
    preconditioner = self._preconditioners[index]
    direction = adam if preconditioner is None else self._shampoo_direction(
        gradient, adam, preconditioner, step)
    momentum = self._momentums[index]
    beta_1 = self.beta_1
    self.assign(momentum, beta_1 * momentum + (1.0 - beta_1) * direction)
    if self.nesterov:
      update = ((beta_1 * momentum + (1.0 - beta_1) * direction) /
                _bias_correction(beta_1, step + 1, dtype))
    else:
      update = momentum / _bias_correction(beta_1, step, dtype)
    self.assign_sub(variable, tf.cast(learning_rate, dtype) * update)

  def _shampoo_direction(self, gradient, adam, preconditioner: _Preconditioner,
                         step):
    """Updates the statistics (and, when due, the roots); returns Adam's
    direction before start_preconditioning_step, the grafted Shampoo
    direction from then on."""
    blocks = to_blocks(gradient, self.block_size)
    wide = tf.cast(blocks, tf.float64)
    self.assign(preconditioner.left, statistic_update(
        preconditioner.left, tf.matmul(wide, wide, adjoint_b=True),
        self.beta_2))
    self.assign(preconditioner.right, statistic_update(
        preconditioner.right, tf.matmul(wide, wide, adjoint_a=True),
        self.beta_2))
    start = self.start_preconditioning_step
    started = step >= start

    def recompute_roots():
      for statistic, root in ((preconditioner.left, preconditioner.left_root),
                              (preconditioner.right,
                               preconditioner.right_root)):
        self.assign(root, inverse_pth_root(statistic, 4,
                                           self.matrix_epsilon))

    tf.cond(started & ((step - start) % self.precondition_every == 0),
            recompute_roots, lambda: None)

    def preconditioned():
      direction = tf.matmul(tf.matmul(preconditioner.left_root, blocks),
                            preconditioner.right_root)
      return grafted_direction(
          from_blocks(direction, gradient.shape, self.block_size), adam)

    return tf.cond(started, preconditioned, lambda: adam)

  def get_config(self):
    config = super().get_config()
    config.update({
        "beta_1": self.beta_1, "beta_2": self.beta_2,
        "epsilon": self.epsilon, "matrix_epsilon": self.matrix_epsilon,
        "block_size": self.block_size,
        "precondition_every": self.precondition_every,
        "start_preconditioning_step": self.start_preconditioning_step,
        "nesterov": self.nesterov})
    return config
