"""The names the rest of the project reads from a trained model: no TensorFlow.

The serving signature's outputs, the slicing signature the Evaluator slices
by, the record written next to the exported model, the tuned keys that size
the model, and the tuning objective. trainer.py and tuner.py write them;
pipeline/, components/ and commands/ read them from here, so defining the
DAG or reading a report does not import Keras or KerasTuner for a string.
Also the Prediction Difference (Anil et al. 2022, section 5), which the
Evaluator reports (components.prediction_difference) and the Trainer
records for a distilled model. And where a component's interrupted
execution leaves its work for the next one on the same inputs
(resume_directory).
"""

import hashlib
import itertools
import json
import os
from typing import TYPE_CHECKING, Any, Optional, Sequence

if TYPE_CHECKING:  # Imported where PD is computed: the CLI's parser reads
  import numpy as np  # these names and should not wait for numpy.

# Name of the serving signature's output (the Evaluator reads it).
PREDICTION_KEY = "probability"
# The signature's second output: the click probability of the
# logistic-regression baseline trained beside the model (the Evaluator
# reports it and the gate checks the model beats it).
LR_OUTPUT = "logistic_regression"
# The Evaluator slices by this feature of the SLICING_SIGNATURE's output.
SLICING_SIGNATURE = "slicing_features"
ID_FREQUENCY = "id_frequency"
FREQUENCY_BUCKETS = ("rare", "medium", "frequent")
# Written next to the exported model: how this model was trained.
TRAINING_RECORD = "training.json"
# In a copy of a served model (components/baseline.py): the pushed version
# it was copied from, one line (the warm start's record names it).
SERVED_FROM = "served_from.txt"
# Tuned values that size the model (trainer_module.tuner searches them when
# asked): a DNN of dnn_layers x dnn_units. Other tuned keys are base
# hyperparameters.
MODEL_SIZE_KEYS = ("embedding_dim", "dnn_units", "dnn_layers")
# The tuning objective: the best epoch's validation AUC (the models log
# ``auc``, Keras prefixes validation metrics).
OBJECTIVE = "val_auc"
# With replicas (TrainerSettings.replicas > 1) the signature also returns
# each replica's click probability under replica_output(i), so the
# Evaluator computes their Prediction Difference and AUC per slice; the
# PREDICTION_KEY output is then their mean (the self-ensemble) or replica 0.
REPLICA_OUTPUT_PREFIX = "replica_"


def replica_output(index: int) -> str:
  """The serving output of replica `index` (0-based)."""
  return f"{REPLICA_OUTPUT_PREFIX}{index}"


# TFMA metric names of components.prediction_difference: between the
# replicas of one model (the gate's optional --max-pd check), and between
# the candidate's and the latest pushed model's served predictions (churn).
REPLICA_PD = "replica_prediction_difference"
BASELINE_PD = "prediction_difference_vs_baseline"


def relative_differences(first: "np.ndarray", second: "np.ndarray"
                        ) -> "np.ndarray":
  """Per example |y1 - y2| / ((y1 + y2) / 2); 0 where both are 0 (the same
  prediction)."""
  import numpy as np  # pylint: disable=g-import-not-at-top,redefined-outer-name
  first = np.asarray(first, np.float64)
  second = np.asarray(second, np.float64)
  mean = (first + second) / 2
  return np.divide(np.abs(first - second), mean,
                   out=np.zeros_like(mean), where=mean > 0)


def prediction_difference(predictions: Sequence["np.ndarray"],
                          weights: Optional["np.ndarray"] = None) -> float:
  """PD of two or more models' predictions of the same examples: the
  (weighted) mean relative difference, averaged over all model pairs."""
  import numpy as np  # pylint: disable=g-import-not-at-top,redefined-outer-name
  if len(predictions) < 2:
    raise ValueError("PD compares at least two models' predictions, got "
                     f"{len(predictions)}")
  return float(np.mean([
      np.average(relative_differences(a, b), weights=weights)
      for a, b in itertools.combinations(predictions, 2)]))


def component_directory(output_uri: str, folder: str) -> str:
  """<root>/<component>/`folder`: beside a component's outputs, where its
  executions keep what outlives one of them; `output_uri` is one of its
  outputs, <root>/<component>/<output>/<execution id>."""
  return os.path.join(os.path.dirname(os.path.dirname(output_uri)), folder)


def pipeline_directory(output_uri: str, folder: str) -> str:
  """<root>/`folder`: what every component's executions share;
  `output_uri` as for component_directory, or a directory at its depth
  (the Tuner's search directory, <root>/Tuner/search/<key>)."""
  return os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
      output_uri))), folder)


# Under the pipeline root: --precision auto's first choice, one file per
# kind of machine (precision.resolve), which the Tuner's trials and the
# Trainer both take, so tuned values are found in the precision served.
PRECISION_DIR = "precision"


def resume_directory(output_uri: str, folder: str,
                     key_parts: Sequence[Any]) -> str:
  """A directory that every execution of a component on the same inputs
  and settings (`key_parts`, hashed as JSON) finds, and no other: an
  interrupted execution's work, resumed by the next (the Trainer's
  backups, the Tuner's finished trials).
  component_directory(`output_uri`, `folder`)/<key>."""
  key = hashlib.sha256(json.dumps(list(key_parts), sort_keys=True,
                                  default=str).encode()).hexdigest()[:16]
  return os.path.join(component_directory(output_uri, folder), key)
