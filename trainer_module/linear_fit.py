"""The logistic-regression baseline's fit: scikit-learn's Newton-CG on one-hot ids.

Why not the model's own minibatch step: the baseline is a convex problem
(mean log loss + l2 |W|^2 over a few hundred thousand one-hot weights), and
fitted by Adam to convergence, one L2 after another, it took as long as the
DeepFM it guards (882 of the Trainer's 1,645 s at 2M rows, docs/
lr_baseline.md). A full-batch second-order solver needs a few dozen
passes in all for the whole L2 path, each two sparse products (X w and
X^T r) of one index per field and row: seconds at millions of rows.

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
from sklearn import linear_model

# scikit-learn's solver and its stopping point: the largest gradient entry
# of its objective (the mean log loss + the penalty). On 200k generated
# Criteo rows, the whole path and refit, same process, two rounds on a
# loaded machine: Newton-CG (conjugate-gradient steps) at 1e-4 in 14-16 s,
# at 1e-5 18-24 s, at 1e-6 30-33 s; L-BFGS at 1e-4 15-20 s, at 1e-5
# 35-37 s; the refitted baseline's eval AUC 0.7258 in every case (docs/
# lr_baseline.md, "The fit's solver").
SOLVER = "newton-cg"
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
# of the one-hot matrix, twice (scikit-learn's Hessian product builds the
# matrix scaled by each row's curvature); and per row about ten float64
# vectors of the solver. 39 fields (Criteo): ~1 KB a row, 9 GB at 9M rows.
_FIELD_BYTES = 2 * (8 + 4)
_ROW_BYTES = 10 * 8
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
    {"grid": [{"c", "iterations", "val_logloss", "seconds"}], "c" (the
    kept one), "path_rows" (the rows the path fitted), "coef" [columns] and
    "intercept" (the refitted weights), "path_coef", "path_intercept" (the
    kept C's fit before the refit, what the validation slice measured),
    "refit": {"iterations", "seconds"}.
  """
  path_rows = min(path_rows, validation_start)
  train = _leading_rows(rows.matrix, path_rows)
  validation = rows.matrix[validation_start:]
  labels, weights = rows.labels[validation_start:], rows.weights[
      validation_start:]
  solver = linear_model.LogisticRegression(
      solver=SOLVER, max_iter=MAX_ITERATIONS, warm_start=True)
  grid: List[Dict[str, Any]] = []
  kept: Optional[Dict[str, Any]] = None
  for c in c_grid:
    start = time.perf_counter()
    solver.set_params(C=c, tol=tolerance(c, rows.weights[:path_rows].sum()))
    solver.fit(train, rows.labels[:path_rows],
               sample_weight=rows.weights[:path_rows])
    logits = validation @ solver.coef_[0] + solver.intercept_[0]
    loss = weighted_logloss(labels, logits, weights)
    grid.append({"c": c, "iterations": int(solver.n_iter_[0]),
                 "val_logloss": loss,
                 "seconds": time.perf_counter() - start})
    if kept is not None and loss >= kept["val_logloss"]:
      break
    kept = {"c": c, "val_logloss": loss, "coef": solver.coef_[0].copy(),
            "intercept": float(solver.intercept_[0])}
  start = time.perf_counter()
  solver.set_params(C=kept["c"], tol=tolerance(kept["c"],
                                                rows.weights.sum()))
  solver.coef_[0], solver.intercept_[0] = kept["coef"], kept["intercept"]
  solver.fit(rows.matrix, rows.labels, sample_weight=rows.weights)
  return {"grid": grid, "c": kept["c"], "path_rows": path_rows,
          "path_coef": kept["coef"],
          "path_intercept": kept["intercept"],
          "coef": solver.coef_[0].copy(),
          "intercept": float(solver.intercept_[0]),
          "refit": {"iterations": int(solver.n_iter_[0]),
                    "seconds": time.perf_counter() - start}}


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
