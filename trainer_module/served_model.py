"""Which model the export serves: the CTR model or its logistic-regression
baseline, by a paired test on the validation slice (issue #60).

A comparison of two validation AUCs as scalars decides on noise at a few
hundred rows; choose_served asks whether the model is better beyond it,
with the gate's statistics (paired_statistics). docs/gate.md, "The served
model", has the rule's measurements.
"""

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import keras
import numpy as np
import tensorflow as tf

from trainer_module import contract
from trainer_module import paired_statistics
from trainer_module.settings import TrainerSettings


def validation_scores(scored: Sequence[keras.Model], validation
                     ) -> Tuple[np.ndarray, np.ndarray, List[np.ndarray]]:
  """(labels, weights, each model's probabilities) of the validation slice,
  row by row, in one pass over it."""
  labels, weights = [], []
  predictions = [[] for _ in scored]
  for batch in validation:
    features, label, weight = keras.utils.unpack_x_y_sample_weight(batch)
    labels.append(np.asarray(label).reshape(-1))
    weights.append(np.ones_like(labels[-1], np.float64) if weight is None
                   else np.asarray(weight).reshape(-1))
    for model, out in zip(scored, predictions):
      out.append(tf.sigmoid(model(features, training=False)).numpy()
                 .reshape(-1).astype(np.float64))
  return (np.concatenate(labels), np.concatenate(weights),
          [np.concatenate(p) for p in predictions])


def served_probabilities(settings: TrainerSettings,
                          replicas: Sequence[keras.Model],
                          validation) -> Tuple[np.ndarray, np.ndarray]:
  """(labels, probabilities) of the validation slice as the export serves
  the model (serving.py): the replicas' mean with push "ensemble", else
  replica 0's (or the distilled student's: train_replicas hands it over
  as the only replica)."""
  served = replicas if settings.push == "ensemble" else replicas[:1]
  labels, _, probabilities = validation_scores(served, validation)
  return labels, np.mean(probabilities, axis=0)


def choose_served(settings: TrainerSettings, labels: np.ndarray,
                  model_probabilities: np.ndarray,
                  baseline_validation: Optional[Mapping[str, np.ndarray]]
                 ) -> Dict[str, Any]:
  """Which of the model and its logistic-regression baseline the export
  serves (settings.serve), by a paired test on the validation slice.

  With "best" the model is served only when its AUC is above the
  baseline's beyond the noise of those rows: the one-sided 95% lower bound
  of the paired difference (paired_statistics.auc_difference, DeLong) is
  above zero. Otherwise the simpler model is served. One-sided, because
  the question is whether the model is better, not whether they differ:
  the two-sided bound (1.96 SE) kept the logistic regression in four of
  five runs at 100k Avazu rows where the DeepFM was 0.002 better on the
  eval split; the scalar comparison it replaces served the DeepFM on
  noise at 5k-20k rows, 0.002 below the regression (issue #60; docs/
  gate.md, "The served model", has both). The baseline's
  probabilities are its L2 path fit's, before the refit on the validation
  slice itself. A baseline kept by an older version without them
  (keep_baseline) leaves the model served. The eval split is left to the
  Evaluator, whose gate then judges what is served.

  The validation rows are unweighted: negative down-sampling drops
  non-clicks at random, which leaves the AUC's expectation as it is.

  Returns:
    {"served": "model" or contract.LR_OUTPUT, "serve": settings.serve,
     "model": settings.model, "model_validation_auc", "lr_validation_auc",
     "difference", "interval" [low, high] (two-sided, the gate's),
     "lower_bound" (one-sided, the rule's), "rows", "reason"}.
  """
  if baseline_validation is None:
    return {"served": "model", "serve": settings.serve,
            "model": settings.model, "reason": "the kept baseline has no "
            "validation predictions (fitted by an older version)"}
  if not np.array_equal(labels, baseline_validation["labels"]):
    raise ValueError("the baseline's validation rows differ from the "
                     "model's: the validation slice was read in another "
                     "order")
  aucs, difference = paired_statistics.paired_aucs(
      labels, model_probabilities, baseline_validation["predictions"])
  low, high = difference.interval()
  beyond_noise = bool(difference.lower_bound() > 0)
  lr_served = settings.serve == "best" and not beyond_noise
  if settings.serve == "model":
    reason = "--serve model"
  elif beyond_noise:
    reason = "its validation AUC is above the baseline's beyond noise"
  else:
    reason = ("the model's validation AUC is not above the baseline's "
              "beyond noise: the simpler model is served")
  return {"served": contract.LR_OUTPUT if lr_served else "model",
          "serve": settings.serve, "model": settings.model,
          "model_validation_auc": float(aucs[0]),
          "lr_validation_auc": float(aucs[1]),
          "difference": difference.value, "interval": [low, high],
          "lower_bound": difference.lower_bound(),
          "rows": int(labels.size), "reason": reason}
