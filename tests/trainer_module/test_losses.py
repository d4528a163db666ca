"""The extra losses against NumPy double loops and finite differences."""

import numpy as np
import pytest
import tensorflow as tf

from trainer_module import losses


def reference_rank_loss(labels, logits, weights):
  """The docstring's sum over (click, non-click) pairs, float64."""
  total = weighted = 0.0
  for i in range(len(labels)):
    for j in range(len(labels)):
      if labels[i] == 1 and labels[j] == 0:
        pair = weights[i] * weights[j]
        total += pair * np.log1p(np.exp(-(logits[i] - logits[j])))
        weighted += pair
  return total / weighted if weighted else 0.0


def batch(rng, size=13):
  labels = (rng.uniform(size=size) < 0.4).astype(np.float32)
  labels[:2] = [1, 0]  # At least one pair.
  logits = rng.normal(0.0, 2.0, size).astype(np.float32)
  weights = rng.integers(1, 4, size).astype(np.float32)
  return labels, logits, weights


@pytest.mark.parametrize("weighted", [False, True])
def test_rank_loss_is_the_double_loop(weighted):
  labels, logits, weights = batch(np.random.default_rng(0))
  got = losses.pairwise_rank_loss(labels[:, None], logits[:, None],
                                  weights[:, None] if weighted else None)
  expected = reference_rank_loss(labels, logits.astype(np.float64),
                                 weights if weighted else np.ones(13))
  assert float(got) == pytest.approx(expected, rel=1e-6)


def test_integer_weights_count_as_copies():
  """Weight 2 on an example: the loss of the batch with it twice."""
  labels = np.array([1, 0, 0, 1], np.float32)
  logits = np.array([0.3, -0.2, 1.5, -1.0], np.float32)
  weights = np.array([2, 1, 1, 1], np.float32)
  copied = losses.pairwise_rank_loss(np.r_[labels, 1], np.r_[logits, 0.3])
  assert float(losses.pairwise_rank_loss(labels, logits, weights)) == (
      pytest.approx(float(copied), rel=1e-6))


def test_rank_loss_gradient_is_the_finite_difference():
  labels, logits, weights = batch(np.random.default_rng(1))
  x = tf.Variable(logits.astype(np.float64))
  with tf.GradientTape() as tape:
    loss = losses.pairwise_rank_loss(labels, x, weights)
  gradient = tape.gradient(loss, x).numpy()
  h = 1e-4
  for k in range(len(logits)):
    up, down = logits.astype(np.float64), logits.astype(np.float64)
    up[k] += h
    down[k] -= h
    numeric = (reference_rank_loss(labels, up, weights) -
               reference_rank_loss(labels, down, weights)) / (2 * h)
    assert gradient[k] == pytest.approx(numeric, rel=1e-3, abs=1e-6)


@pytest.mark.parametrize("labels", [np.ones(5, np.float32),
                                    np.zeros(5, np.float32)])
def test_a_batch_without_pairs_gives_zero_and_finite_gradients(labels):
  logits = tf.Variable(np.linspace(-1, 1, 5).astype(np.float32))
  with tf.GradientTape(persistent=True) as tape:
    exact = losses.pairwise_rank_loss(labels, logits)
    sampled = losses.sampled_pairwise_rank_loss(labels, logits, seed=[1, 2])
  for loss in (exact, sampled):
    assert float(loss) == 0.0
    gradient = tape.gradient(loss, logits)
    assert gradient is not None
    np.testing.assert_array_equal(gradient.numpy(), np.zeros(5))


def test_sampled_rank_loss_is_unbiased_and_seeded():
  """The mean over 400 draws (k = 8) is within 2% of the exact weighted
  loss; one seed, one value, also inside tf.function."""
  labels, logits, weights = batch(np.random.default_rng(2), size=40)
  exact = float(losses.pairwise_rank_loss(labels, logits, weights))
  sample = tf.function(lambda seed: losses.sampled_pairwise_rank_loss(
      labels, logits, seed, weights, negatives_per_click=8))
  draws = [float(sample(tf.constant([s, 7]))) for s in range(400)]
  assert np.mean(draws) == pytest.approx(exact, rel=0.02)
  assert np.std(draws) > 0  # The draws do differ.
  assert float(sample(tf.constant([3, 7]))) == draws[3]


def test_sampled_rank_loss_pairs_only_clicks_with_non_clicks():
  """One click and one non-click of positive weight: every draw is that
  pair, so the estimate is exact; zero-weight non-clicks are never drawn."""
  labels = np.array([1, 0, 0, 0], np.float32)
  logits = np.array([0.5, 2.0, -9.0, 9.0], np.float32)
  weights = np.array([1, 1, 0, 0], np.float32)
  got = losses.sampled_pairwise_rank_loss(labels, logits, [0, 1], weights)
  assert float(got) == pytest.approx(np.log1p(np.exp(1.5)), rel=1e-6)


def test_distillation_is_the_cross_entropy_with_the_mixed_target():
  rng = np.random.default_rng(3)
  labels = (rng.uniform(size=(9, 1)) < 0.3).astype(np.float32)
  logits = rng.normal(0, 2, (9, 1))
  teacher = rng.uniform(size=(9, 1))
  for label_weight in (0.0, 0.3, 1.0):
    target = label_weight * labels.astype(np.float64) + (
        1 - label_weight) * teacher
    p = 1 / (1 + np.exp(-logits))
    expected = -(target * np.log(p) + (1 - target) * np.log(1 - p))
    x = tf.Variable(logits)
    with tf.GradientTape() as tape:
      got = losses.distillation_loss(labels, x, teacher, label_weight)
    assert got.shape == (9, 1)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-10)
    np.testing.assert_allclose(tape.gradient(got, x).numpy(), p - target,
                               rtol=1e-10, atol=1e-12)


def test_distillation_refuses_a_label_weight_outside_0_1():
  with pytest.raises(ValueError, match=r"label_weight must be in \[0, 1\]"):
    losses.distillation_loss([1.0], [0.0], [0.5], 1.5)
