"""A real KerasTuner search small enough for a unit test (shared helper)."""

import keras
import keras_tuner
import numpy as np

from trainer_module import tuner


class TinyHyperModel(keras_tuner.HyperModel):
  """A logistic regression on a searched learning rate; fails on demand."""

  def __init__(self, space, fail_trials):
    super().__init__()
    self.space = space
    self.fail_trials = fail_trials
    self.fits = 0

  def declare_hyperparameters(self, hp):
    for dimension in self.space.values():
      dimension.declare(hp)

  def build(self, hp):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(hp.get("dense_lr")),
                  loss=keras.losses.BinaryCrossentropy(from_logits=True),
                  metrics=[keras.metrics.AUC(from_logits=True, name="auc")])
    return model

  def fit(self, hp, model, *args, **kwargs):
    self.fits += 1
    if self.fits in self.fail_trials:
      raise FloatingPointError("loss became nan at epoch 1 step 3")
    return tuner.best_epoch_metrics(model.fit(*args, **kwargs).history)


def search(tmp_path, trials, fail_trials, epochs=3):
  """A real KerasTuner random search on separable data."""
  rng = np.random.default_rng(0)
  x = rng.normal(size=(256, 4)).astype("float32")
  noise = rng.normal(size=256)
  y = (x[:, 0] + 0.5 * x[:, 1] + noise > 0).astype("float32")
  space = tuner.search_space("criteo", {"embed_lr": 1e-4})
  search = tuner.make_tuner(
      "random", TinyHyperModel(space, fail_trials), trials, epochs,
      str(tmp_path / "keras_tuner"))
  search.search(x[:192], y[:192], validation_data=(x[192:], y[192:]),
                epochs=epochs, batch_size=64, verbose=0,
                callbacks=[keras.callbacks.EarlyStopping(
                    monitor="val_loss", patience=1)])
  return search, space
