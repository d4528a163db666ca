"""The logistic-regression baseline's fit: Newton's method on one-hot ids.

Why not the model's own minibatch step: the baseline is a convex problem
(mean log loss + l2 |W|^2 over a few hundred thousand one-hot weights), and
fitted by Adam to convergence, one L2 after another, it took as long as the
DeepFM it guards (882 of the Trainer's 1,645 s at 2M rows, docs/
lr_baseline.md). A full-batch second-order solver needs a few dozen
passes in all for the whole L2 path, each two sparse products (X w and
X^T r) of one index per field and row. scikit-learn's Newton-CG solves this
objective, but without a preconditioner its conjugate gradients crawl on
one-hot columns of very different counts (preconditioned_newton); it stays
here as the reference the tests and docs/scripts/lr_solver_ab.py compare
with.

The rows come from the split as the Trainer holds it (TrainingData), are
put side by side as one CSR matrix (every field's ids offset by the
vocabulary sizes before it), and the fitted weights are written back into
the Keras "lr" model, which serves them as before.
"""

import dataclasses
import time
from typing import (Any, Dict, Iterable, Iterator, List, Mapping, Optional,
                    Sequence)

import keras
import numpy as np
from tensorflow import nest
from scipy import sparse
from scipy.sparse import linalg as sparse_linalg
from sklearn import linear_model

# The solver (ours, or one of scikit-learn's) and its stopping point: the
# largest gradient entry of the objective (the mean log loss + the
# penalty). With scikit-learn's solvers on 200k generated Criteo rows, the
# whole path and refit, same process, two rounds on a loaded machine:
# Newton-CG at 1e-4 in 14-16 s, at 1e-5 18-24 s, at 1e-6 30-33 s; L-BFGS
# at 1e-4 15-20 s, at 1e-5 35-37 s; the refitted baseline's eval AUC
# 0.7258 in every case (docs/lr_baseline.md, "The fit's solver").
PRECONDITIONED_NEWTON = "preconditioned-newton"
SOLVER = PRECONDITIONED_NEWTON
GRADIENT_TOLERANCE = 1e-4
# ... but never above this share of the penalty's gradient on a unit
# weight, 2 l2 = 1 / (C x the rows' weight): the L2 shrinks with the rows,
# and an absolute 1e-4 let the fit at the next C, started from the last
# one's weights, stop at once (0 iterations, the same validation loss): at
# 300k rows C = 0.1 could not be told from 0.03, at 2M rows 0.03 from 0.01,
# and the 2M baseline kept 0.01 and ranked 0.0032 below scikit-learn's. At
# 2M rows a share of 1 chose C = 0.03, eval AUC 0.7448 (scikit-learn's
# 0.7450), in 344 s; a share of 0.1 the same in 584 s (docs/lr_baseline.md).
PENALTY_SHARE = 1.0
MAX_ITERATIONS = 1000
# The L2 path fits at most this many training rows, the first ones; only
# the refit fits them all. The grid is in C, whose best value did not move
# with the rows (l2 = 1 / (2 C n): C = 0.03 at 20k, 200k and 2M rows), while
# the path's cost grows with them: at 2M rows it was 284 of the fit's 343 s
# (docs/lr_baseline.md).
PATH_ROWS = 500_000


def tolerance(c: float, weight: float) -> float:
  """The solver's tolerance at C = `c` over rows of total `weight`."""
  return min(GRADIENT_TOLERANCE, PENALTY_SHARE / (c * weight))


# What a row costs the fit, per field: a float64 value and an int32 column
# of the one-hot matrix, once (preconditioned_newton copies no matrix;
# scikit-learn's Newton-CG held it twice); and per row about twelve float64
# vectors of the solver. 39 fields (Criteo): ~0.56 KB a row, 5 GB at 9M.
_FIELD_BYTES = 8 + 4
_ROW_BYTES = 12 * 8
# The share of the available memory the fit may take.
MEMORY_SHARE = 0.6


def rows_that_fit(fields: int, available_bytes: int) -> int:
  """How many rows of `fields` one-hot fields the fit can hold in
  MEMORY_SHARE of `available_bytes`."""
  return int(MEMORY_SHARE * available_bytes //
             (fields * _FIELD_BYTES + _ROW_BYTES))


def first_rows(batches: Iterable[Any], limit: int) -> Iterator[Any]:
  """The (features, label[, weight]) batches up to `limit` rows in all, the
  last one cut (NumPy)."""
  left = limit
  for batch in batches:
    if left <= 0:
      return
    size = len(np.asarray(keras.utils.unpack_x_y_sample_weight(batch)[1])
               .reshape(-1))
    if size > left:
      batch = nest.map_structure(lambda value: np.asarray(value)[:left], batch)
    left -= size
    yield batch


@dataclasses.dataclass(frozen=True)
class OneHotRows:
  """The rows of a split as one-hot features.

  Attributes:
    matrix: [rows, sum of vocabulary sizes] CSR, one 1 per field and row.
    labels: [rows] 0/1.
    weights: [rows] sample weights (1 without negative sampling).
    offsets: per field (the model's order), its first column; the last
      entry is the number of columns.
  """
  matrix: sparse.csr_matrix
  labels: np.ndarray
  weights: np.ndarray
  offsets: np.ndarray


def one_hot_rows(batches: Iterable[Any], vocab_sizes: Mapping[str, int]
                ) -> OneHotRows:
  """The (features, label[, weight]) batches' rows, one-hot (CSR)."""
  fields = tuple(vocab_sizes)
  offsets = np.cumsum([0] + [vocab_sizes[f] for f in fields])
  sizes = offsets[1:] - offsets[:-1]
  columns, labels, weights = [], [], []
  for batch in batches:
    features, label, weight = keras.utils.unpack_x_y_sample_weight(batch)
    ids = np.stack([np.asarray(features[f]).reshape(-1) for f in fields],
                   axis=1).astype(np.int64)
    bad = (ids < 0) | (ids >= sizes)
    if bad.any():
      field = fields[int(np.argwhere(bad)[0][1])]
      raise ValueError(f"field {field!r} holds ids outside its vocabulary "
                       f"of {vocab_sizes[field]}")
    columns.append((ids + offsets[:-1]).astype(np.int32))
    labels.append(np.asarray(label, np.float64).reshape(-1))
    weights.append(np.ones(len(labels[-1])) if weight is None
                   else np.asarray(weight, np.float64).reshape(-1))
  indices = np.concatenate(columns).ravel()
  rows = len(indices) // len(fields)
  # float64: scikit-learn's Newton-CG computes in the data's precision, and
  # the float64 objective is the one every tolerance here was measured on.
  matrix = sparse.csr_matrix(
      (np.ones(len(indices)), indices,
       np.arange(0, len(indices) + 1, len(fields), dtype=np.int64)),
      shape=(rows, int(offsets[-1])))
  return OneHotRows(matrix, np.concatenate(labels), np.concatenate(weights),
                    offsets)


def weighted_logloss(labels: np.ndarray, logits: np.ndarray,
                     weights: np.ndarray) -> float:
  """The weighted mean log loss of logits (stable for large |logit|)."""
  losses = np.logaddexp(0.0, logits) - labels * logits
  return float(np.average(losses, weights=weights))


@dataclasses.dataclass(frozen=True)
class LinearFit:
  """A fitted logistic regression: one-hot weights, bias, and the solver's
  iterations (Newton steps) and conjugate-gradient steps in all."""
  coef: np.ndarray
  intercept: float
  iterations: int
  cg_steps: int


# Each Newton step's conjugate gradients stop when the residual is this
# share of the gradient. On 1.8M generated Criteo rows, the refit at C =
# 0.03 from the 500k-row path's fit: 0.1 took 3 Newton steps and 37 CG
# steps (19.5 s); 0.3, 5 and 91 (43.8 s); min(0.5, sqrt(max |gradient|)),
# scikit-learn's rule, 3 and 132 (54.2 s); the same optimum each time
# (docs/lr_baseline.md).
CG_FORCING = 0.1


def preconditioned_newton(matrix: sparse.csr_matrix, labels: np.ndarray,
                          weights: np.ndarray, c: float,
                          start: Optional[LinearFit], tol: float,
                          max_iterations: int = MAX_ITERATIONS) -> LinearFit:
  """scikit-learn's objective and stopping rule (the weighted mean log loss
  + |W|^2 / (2 C x the rows' weight), the bias free; stop when the largest
  gradient entry is at most `tol`), by Newton steps whose linear systems
  are solved by conjugate gradients preconditioned by the Hessian's
  diagonal.

  Why not scikit-learn's newton-cg: its conjugate gradients are not
  preconditioned, and one-hot columns' curvatures differ by as much as
  their ids' counts (1 to millions), so each Newton step took dozens of
  them; and each Hessian product formed the matrix scaled by the rows'
  curvatures, a copy of it. Here the diagonal of X^T D X is X^T d (the
  entries are 0/1), and no matrix is copied.
  """
  n_columns = matrix.shape[1]
  share = weights / weights.sum()
  alpha = 1.0 / (c * weights.sum())
  # X^T r through the CSC view of X (no copy): at 1.8M x 691k it took
  # 0.18 s where a transposed CSR copy took 1.5 s (random reads of r).
  transposed = matrix.T
  coef = np.zeros(n_columns) if start is None else start.coef.copy()
  intercept = 0.0 if start is None else start.intercept

  def objective(logits, coef):
    return (float(share @ (np.logaddexp(0.0, logits) - labels * logits)) +
            0.5 * alpha * float(coef @ coef))

  logits = matrix @ coef + intercept
  value = objective(logits, coef)
  cg_steps = 0
  for iteration in range(max_iterations):
    probabilities = 0.5 * (1.0 + np.tanh(0.5 * logits))  # Stable sigmoid.
    residual = share * (probabilities - labels)
    gradient = np.append(transposed @ residual + alpha * coef,
                         residual.sum())
    largest = np.abs(gradient).max()
    if largest <= tol:
      return LinearFit(coef, intercept, iteration, cg_steps)
    curvature = share * probabilities * (1.0 - probabilities)

    def hessian_product(vector, curvature=curvature):
      scaled = curvature * (matrix @ vector[:-1] + vector[-1])
      return np.append(transposed @ scaled + alpha * vector[:-1],
                       scaled.sum())

    diagonal = np.append(transposed @ curvature + alpha, curvature.sum())
    steps = [0]

    def count(_, steps=steps):
      steps[0] += 1

    size = n_columns + 1
    direction, _ = sparse_linalg.cg(
        sparse_linalg.LinearOperator((size, size), matvec=hessian_product),
        -gradient, rtol=CG_FORCING,
        M=sparse_linalg.LinearOperator((size, size),
                                       matvec=lambda v: v / diagonal),
        callback=count, maxiter=size)
    cg_steps += steps[0]
    # Backtracking on the objective (Armijo): the full Newton step first.
    slope = float(gradient @ direction)
    step_logits = matrix @ direction[:-1] + direction[-1]
    step = 1.0
    while True:
      new_coef = coef + step * direction[:-1]
      new_logits = logits + step * step_logits
      new_value = objective(new_logits, new_coef)
      if new_value <= value + 1e-4 * step * slope or step < 1e-10:
        break
      step *= 0.5
    coef, intercept = new_coef, intercept + step * direction[-1]
    logits, value = new_logits, new_value
  return LinearFit(coef, intercept, max_iterations, cg_steps)


def fit_path(rows: OneHotRows, validation_start: int,
             c_grid: Sequence[float], path_rows: int = PATH_ROWS
            ) -> Dict[str, Any]:
  """The L2 path, strongest first, then the refit on both parts.

  `rows` holds the training part, then the validation slice from row
  `validation_start` on: one matrix, not two copies. The path fits the
  training part's first `path_rows` rows (a view of them), the validation
  slice's log loss chooses C, and the refit fits both parts whole,
  continuing from the chosen fit (the validation slice is a tenth of the
  split, and a linear model on one-hot ids still gains from every row:
  docs/lr_baseline.md). Each C starts from the previous one's weights, and
  the path stops at the first C worse than the one before it (the
  validation loss along a ridge path is unimodal in practice).

  Returns:
    {"grid": [{"c", "iterations", "cg_steps", "val_logloss", "seconds"}],
    "c" (the
    kept one), "path_rows" (the rows the path fitted), "coef" [columns] and
    "intercept" (the refitted weights), "path_coef", "path_intercept" (the
    kept C's fit before the refit, what the validation slice measured),
    "refit": {"iterations", "cg_steps", "seconds"}.
  """
  path_rows = min(path_rows, validation_start)
  train = _leading_rows(rows.matrix, path_rows)
  validation = rows.matrix[validation_start:]
  labels, weights = rows.labels[validation_start:], rows.weights[
      validation_start:]
  grid: List[Dict[str, Any]] = []
  kept: Optional[Dict[str, Any]] = None
  fitted: Optional[LinearFit] = None
  for c in c_grid:
    start = time.perf_counter()
    fitted = solve(train, rows.labels[:path_rows], rows.weights[:path_rows],
                   c, fitted)
    logits = validation @ fitted.coef + fitted.intercept
    loss = weighted_logloss(labels, logits, weights)
    grid.append({"c": c, "iterations": fitted.iterations,
                 "cg_steps": fitted.cg_steps, "val_logloss": loss,
                 "seconds": time.perf_counter() - start})
    if kept is not None and loss >= kept["val_logloss"]:
      break
    kept = {"c": c, "val_logloss": loss, "fit": fitted}
  start = time.perf_counter()
  refit = solve(rows.matrix, rows.labels, rows.weights, kept["c"],
                kept["fit"])
  return {"grid": grid, "c": kept["c"], "path_rows": path_rows,
          "path_coef": kept["fit"].coef,
          "path_intercept": kept["fit"].intercept,
          "coef": refit.coef, "intercept": refit.intercept,
          "refit": {"iterations": refit.iterations,
                    "cg_steps": refit.cg_steps,
                    "seconds": time.perf_counter() - start}}


def solve(matrix: sparse.csr_matrix, labels: np.ndarray, weights: np.ndarray,
          c: float, start: Optional[LinearFit]) -> LinearFit:
  """The fit at C = `c`, from `start` (None: zeros), to the tolerance at
  that C (tolerance), by SOLVER: ours, or one of scikit-learn's (kept for
  docs/scripts/lr_solver_ab.py's comparison)."""
  tol = tolerance(c, weights.sum())
  if SOLVER == PRECONDITIONED_NEWTON:
    return preconditioned_newton(matrix, labels, weights, c, start, tol)
  solver = linear_model.LogisticRegression(
      solver=SOLVER, C=c, tol=tol, max_iter=MAX_ITERATIONS,
      warm_start=start is not None)
  if start is not None:
    solver.coef_ = start.coef.reshape(1, -1).copy()
    solver.intercept_ = np.array([start.intercept])
  solver.fit(matrix, labels, sample_weight=weights)
  return LinearFit(solver.coef_[0].copy(), float(solver.intercept_[0]),
                   int(solver.n_iter_[0]), 0)


def _leading_rows(matrix: sparse.csr_matrix, rows: int) -> sparse.csr_matrix:
  """The first `rows` rows of a CSR matrix, sharing its index arrays (a
  slice would copy them: GiBs at millions of rows)."""
  end = matrix.indptr[rows]
  return sparse.csr_matrix(
      (matrix.data[:end], matrix.indices[:end], matrix.indptr[:rows + 1]),
      shape=(rows, matrix.shape[1]), copy=False)


def set_linear_weights(model, coef: np.ndarray, intercept: float) -> None:
  """Writes one-hot weights (one_hot_rows' columns: the model's fields in
  order) into the "lr" model's wide tables and bias."""
  start = 0
  for _, _, table in model.embedding_tables():
    end = start + table.shape[0]
    table.assign(coef[start:end].reshape(-1, 1).astype(np.float32))
    start = end
  if start != len(coef):
    raise ValueError(f"{len(coef)} one-hot weights for {start} table rows")
  model.bias.assign(np.array([intercept], np.float32))
