"""Measurements of docs/production_calibration.md's "Recentring on the
validation slice's noise" (issue #42).

On the Transform output of a finished `python -m pipeline run` DIR, trains
the run's default model once per seed (trainer.train, which ends with
training.recalibrate_bias), then recentres the same model two ways and
scores the eval split each time:
* slice: the bias set so the mean prediction on the validation slice equals
  the slice's own click rate (the recentring before issue #42);
* training: equal to the training part's click rate (after it).
It prints, per seed, the slice's and the training part's click rates, and
the eval split's mean prediction and mean label under each: which target
the served level follows, and by how much.

  PYTHONPATH=. python docs/scripts/recentring_noise.py --dataset avazu \
      --run DIR --seeds 1,2,3,4,5
"""

import argparse
import glob
import os

from trainer_module import keras_version

keras_version.pin_keras3()

# pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np
import tensorflow as tf
import tensorflow_transform as tft

from commands.experiments import study_data
from pipeline.config import PipelineConfig
from trainer_module import input_pipeline
from trainer_module import plan
from trainer_module import trainer
from trainer_module import training
from trainer_module.settings import TrainerSettings


def _weighted_rate(data: tf.data.Dataset) -> float:
  labels = np.concatenate([np.asarray(batch[1]).reshape(-1) for batch in data])
  return float(labels.mean())


def _eval_mean(model, records, output: tft.TFTransformOutput, label: str):
  """(mean prediction, mean label) of the eval split's raw records."""
  predictions, labels = [], []
  for batch in tf.data.Dataset.from_tensor_slices(records).batch(4096):
    raw = tf.io.parse_example(batch, output.raw_feature_spec())
    features = output.transform_features_layer()(raw)
    predictions.append(tf.sigmoid(model(features, training=False)).numpy()
                       .reshape(-1))
    labels.append(features[label].numpy().reshape(-1))
  return (float(np.concatenate(predictions).mean()),
          float(np.concatenate(labels).mean()))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument("--dataset", required=True)
  parser.add_argument("--run", required=True, help="a pipeline run's DIR")
  parser.add_argument("--seeds", default="1,2,3,4,5")
  args = parser.parse_args()
  config = PipelineConfig.from_fields(dataset=args.dataset, data="-",
                                      output=args.run)
  inputs = study_data.transform_artifacts(config)
  output = tft.TFTransformOutput(inputs.transform_graph)
  examples = inputs.raw_examples
  train_files = sorted(glob.glob(os.path.join(examples, "Split-train", "*")))
  eval_records = [r.numpy() for r in tf.data.TFRecordDataset(
      sorted(glob.glob(os.path.join(examples, "Split-eval", "*"))),
      compression_type="GZIP")]
  settings = TrainerSettings(dataset=args.dataset, batch_size=1024)
  label = settings.spec.label
  print("seed | validation rows | slice click rate | training click rate | "
        "eval label | eval prediction, slice target | eval prediction, "
        "training target")
  for seed in (int(s) for s in args.seeds.split(",")):
    data = input_pipeline.training_data(train_files, output, label,
                                        settings.batch_size, seed=seed)
    model, _ = trainer.train(plan.resolve(settings, {}, data.train_examples),
                             data, output, seed=seed, verbose=0)
    slice_rate = _weighted_rate(data.validation)
    means = {}
    for name, rate in (("slice", slice_rate), ("training", data.click_rate)):
      training.recalibrate_bias(model, data.validation, rate)
      means[name] = _eval_mean(model, eval_records, output, label)
    print(f"{seed} | {data.validation_examples} | {slice_rate:.4f} | "
          f"{data.click_rate:.4f} | {means['slice'][1]:.4f} | "
          f"{means['slice'][0]:.4f} | {means['training'][0]:.4f}",
          flush=True)


if __name__ == "__main__":
  main()
