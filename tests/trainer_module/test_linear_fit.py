"""The baseline's fit (linear_fit) against NumPy: the one-hot rows, the
optimum of our objective, the path's choice and the weights written back."""

import numpy as np
import pytest
import tensorflow as tf

from trainer_module import linear_fit
from trainer_module import models
from trainer_module.model_building import l2_of_c

VOCAB = {"a": 5, "b": 3}


def _rows(seed, rows, weighted=False):
  """(features, labels, weights) with a learnable signal in field a."""
  rng = np.random.default_rng(seed)
  features = {"a": rng.integers(0, VOCAB["a"], rows),
              "b": rng.integers(0, VOCAB["b"], rows)}
  p = 1 / (1 + np.exp(-(features["a"] - 2.0 + 0.5 * features["b"] - 0.5)))
  labels = (rng.random(rows) < p).astype(np.float32)
  weights = (np.where(labels > 0, 1.0, 3.0) if weighted
             else np.ones(rows)).astype(np.float32)
  return features, labels, weights


def _one_hot(features, labels, weights, batch=64):
  data = tf.data.Dataset.from_tensor_slices(
      (features, labels, weights)).batch(batch)
  return linear_fit.one_hot_rows(data, VOCAB)


def _parts(train, validation):
  """(both parts' one-hot rows, the first validation row)."""
  joined = {k: np.concatenate([train[0][k], validation[0][k]])
            for k in VOCAB}
  return (_one_hot(joined, *(np.concatenate([t, v]) for t, v in
                             zip(train[1:], validation[1:]))),
          len(train[1]))


def test_one_hot_rows_offsets_every_field_by_the_tables_before_it():
  features, labels, weights = _rows(0, 100)
  rows = _one_hot(features, labels, weights, batch=7)
  dense = rows.matrix.toarray()
  assert dense.shape == (100, 8)
  np.testing.assert_array_equal(dense[np.arange(100), features["a"]], 1)
  np.testing.assert_array_equal(dense[np.arange(100), 5 + features["b"]], 1)
  assert dense.sum() == 200
  np.testing.assert_array_equal(rows.labels, labels)
  np.testing.assert_array_equal(rows.weights, weights)
  np.testing.assert_array_equal(rows.offsets, [0, 5, 8])


def test_an_id_outside_its_vocabulary_is_named():
  features, labels, weights = _rows(0, 10)
  features["b"][3] = 3
  with pytest.raises(ValueError, match="field 'b'.*vocabulary of 3"):
    _one_hot(features, labels, weights)


@pytest.mark.parametrize("weighted", [False, True])
def test_the_refit_is_the_optimum_of_our_objective(weighted):
  """At the refit's weights the gradient of the weighted mean log loss +
  l2 |W|^2 (our objective, l2 = l2_of_c(C, rows)) over both parts is ~0,
  and, the bias being free, the mean prediction is the click rate."""
  rows, start = _parts(_rows(1, 400, weighted), _rows(2, 100, weighted))
  fitted = linear_fit.fit_path(rows, start, (0.01, 0.1, 1.0))
  x, y, w = rows.matrix.toarray(), rows.labels, rows.weights
  coef, intercept = fitted["coef"], fitted["intercept"]
  p = 1 / (1 + np.exp(-(x @ coef + intercept)))
  # scikit-learn's C over weighted rows is our l2 over their weight sum.
  l2 = l2_of_c(fitted["c"], w.sum())
  gradient = x.T @ (w * (p - y)) / w.sum() + 2 * l2 * coef
  assert np.abs(gradient).max() < 1e-4
  assert np.average(p, weights=w) == pytest.approx(np.average(y, weights=w),
                                                   abs=1e-4)
  assert fitted["refit"]["iterations"] > 0


def test_the_path_fits_the_training_part_and_chooses_by_the_slice():
  """The path's fits do not see the validation labels (flipping them changes
  no path weight), each C's validation log loss is the slice's, and the
  kept C has the lowest; the path stops at the first worse C."""
  train = _rows(3, 300)
  features, labels, weights = _rows(4, 200)
  rows, start = _parts(train, (features, labels, weights))
  flipped, _ = _parts(train, (features, 1 - labels, weights))
  grid = (0.001, 0.01, 0.1, 1.0, 10.0)
  fitted = linear_fit.fit_path(rows, start, grid)
  losses = [g["val_logloss"] for g in fitted["grid"]]
  assert [g["c"] for g in fitted["grid"]] == list(grid[:len(losses)])
  kept = losses.index(min(losses))
  assert fitted["c"] == grid[kept]
  assert len(losses) == len(grid) or losses[-1] >= losses[-2]
  x = rows.matrix.toarray()[start:]
  z = x @ fitted["path_coef"] + fitted["path_intercept"]
  assert losses[kept] == pytest.approx(np.mean(
      np.log1p(np.exp(z)) - labels * z), rel=1e-9)
  other = linear_fit.fit_path(flipped, start, grid[:1])
  first = linear_fit.fit_path(rows, start, grid[:1])
  np.testing.assert_allclose(other["path_coef"], first["path_coef"])


def test_the_path_fits_its_first_rows_and_the_refit_all_of_them():
  """path_rows: each C of the path is scikit-learn's fit of the training
  part's first rows alone (the rest change no path weight); the refit is
  still the optimum over every row of both parts."""
  train = _rows(7, 400)
  changed = (train[0], np.where(np.arange(400) < 150, train[1],
                                1 - train[1]), train[2])
  rows, start = _parts(train, _rows(8, 100))
  other, _ = _parts(changed, _rows(8, 100))
  grid = (0.01, 0.1)
  fitted = linear_fit.fit_path(rows, start, grid, path_rows=150)
  assert fitted["path_rows"] == 150
  np.testing.assert_allclose(
      linear_fit.fit_path(other, start, grid, path_rows=150)["path_coef"],
      fitted["path_coef"])
  whole = linear_fit.fit_path(rows, start, grid[:len(fitted["grid"])],
                              path_rows=start)
  assert whole["path_rows"] == start
  assert not np.allclose(whole["path_coef"], fitted["path_coef"])
  x, y = rows.matrix.toarray(), rows.labels
  p = 1 / (1 + np.exp(-(x @ fitted["coef"] + fitted["intercept"])))
  gradient = (x.T @ (p - y) / len(y) +
              2 * l2_of_c(fitted["c"], len(y)) * fitted["coef"])
  assert np.abs(gradient).max() < 1e-4


@pytest.mark.parametrize("weighted", [False, True])
def test_the_preconditioned_newton_fit_is_scikit_learns(weighted):
  """Our solver and scikit-learn's LogisticRegression (lbfgs, to 1e-10) at
  the same C reach the same weights, from zeros and from another C's fit;
  a start at the optimum takes no step."""
  rng = np.random.default_rng(9)
  rows = _one_hot(*_rows(10, 600, weighted))
  # Rare columns beside frequent ones: the curvatures differ widely.
  matrix = linear_fit.sparse.hstack(
      [rows.matrix, linear_fit.sparse.csr_matrix(
          (np.ones(600), rng.integers(0, 200, 600), np.arange(601)),
          shape=(600, 200))]).tocsr()
  labels, weights = rows.labels, rows.weights
  for c, start in ((0.1, None), (1.0, "previous")):
    reference = linear_fit.linear_model.LogisticRegression(
        C=c, tol=1e-10, max_iter=10_000).fit(matrix, labels,
                                             sample_weight=weights)
    begin = (linear_fit.preconditioned_newton(matrix, labels, weights, 0.1,
                                              None, 1e-8)
             if start else None)
    ours = linear_fit.preconditioned_newton(matrix, labels, weights, c,
                                            begin, 1e-8)
    np.testing.assert_allclose(ours.coef, reference.coef_[0], atol=1e-5)
    assert ours.intercept == pytest.approx(reference.intercept_[0], abs=1e-5)
    assert ours.iterations > 0 and ours.cg_steps >= ours.iterations
  again = linear_fit.preconditioned_newton(matrix, labels, weights, 1.0,
                                           ours, 1e-8)
  assert again.iterations == 0
  np.testing.assert_array_equal(again.coef, ours.coef)


def test_the_weights_written_back_give_the_model_the_linear_scores():
  model = models.build_model(models.LOGISTIC_REGRESSION, VOCAB, ())
  features, labels, weights = _rows(5, 50)
  rows = _one_hot(features, labels, weights)
  coef = np.linspace(-1, 1, 8)
  linear_fit.set_linear_weights(model, coef, 0.25)
  logits = np.asarray(model(features)).reshape(-1)
  np.testing.assert_allclose(logits, rows.matrix @ coef + 0.25, atol=1e-6)
  with pytest.raises(ValueError, match="9 one-hot weights for 8"):
    linear_fit.set_linear_weights(model, np.zeros(9), 0.0)


def test_first_rows_cuts_the_batches_at_the_limit():
  features, labels, weights = _rows(6, 100)
  data = tf.data.Dataset.from_tensor_slices(
      (features, labels, weights)).batch(30)
  kept = list(linear_fit.first_rows(data, 45))
  assert [len(np.asarray(batch[1])) for batch in kept] == [30, 15]
  np.testing.assert_array_equal(np.asarray(kept[1][0]["a"]),
                                features["a"][30:45])
  assert len(list(linear_fit.first_rows(data, 1000))) == 4


def test_rows_that_fit_counts_the_matrix_and_the_solvers_vectors():
  """39 fields: 39 x 12 bytes of matrix + 96 of vectors a row."""
  assert linear_fit.rows_that_fit(39, 564 * 1000) == int(
      linear_fit.MEMORY_SHARE * 1000)
