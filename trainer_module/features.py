"""The dataset specs: the single list of field names, types and defaults.

ExampleGen, the curated schemas (checked by a test), the preprocessing_fn,
the models and the pipeline config all read these specs, so a field is
named in exactly one place.

Transformed-feature contract (what Transform writes and the models read):
  * every name in ``DatasetSpec.categorical_features`` -> int64 [batch] ids
    in ``[0, vocabulary size + NUM_OOV_BUCKETS)``; missing and rare values
    land in the OOV bucket(s);
  * every name in ``DatasetSpec.dense`` -> float32 [batch], log1p of the
    count scaled to [0, 1] by its train-split range (0 when missing);
  * every name in ``DatasetSpec.bucket_features`` (one per dense feature)
    -> int64 [batch] ids of the count's log-squared bucket (see
    preprocessing.count_bucket_tokens), ids as for the categoricals: the
    logistic-regression baseline's view of the counts;
  * ``DatasetSpec.label`` -> float32 [batch] in {0, 1}.
"""

import dataclasses
from typing import Dict, Mapping, Optional, Tuple

from trainer_module import hparams

# Ids below the frequency threshold, unseen ids and missing values share these
# buckets. One bucket keeps "rare" a single learnable row per field.
NUM_OOV_BUCKETS = 1

# Share of malformed raw rows ExampleGen drops (and reports) before it
# fails the run: a few broken log lines are normal, many mean a wrong file.
DEFAULT_MAX_BAD_FRACTION = 0.001
# How ExampleGen assigns rows to the train and eval splits: a stable hash of
# each line, or by position (the last rows are eval).
SPLIT_MODES = ("hash", "sequential")

# Derived categorical features built from a YYMMDDHH time field (Avazu
# ``hour``): the raw value is a timestamp, useless as an id.
HOUR_OF_DAY = "hour_of_day"
WEEKDAY = "weekday"


def bucket_name(dense_feature: str) -> str:
  """Name of the bucketized (categorical) version of a dense count feature."""
  return f"{dense_feature}_bucket"


def vocabulary_name(feature: str) -> str:
  """Name of the tf.Transform vocabulary (with frequencies) of a feature."""
  return f"vocab_{feature}"


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
  """One CTR dataset: its raw layout, its features and its defaults.

  Attributes:
    name: 'criteo' or 'avazu'.
    columns: raw column names in file order (header-less files use these).
    delimiter: the raw layout's field separator.
    has_header: whether the raw layout starts with a header line.
    label: the click label column (0/1).
    dense: integer count features used as numbers (log1p transformed).
    int_categorical: categorical features stored as int64 in tf.Examples.
    str_categorical: categorical features stored as bytes in tf.Examples.
    time_field: YYMMDDHH int column turned into hour-of-day and weekday ids.
    dropped: columns read from the file but not features (row ids).
    eval_fraction: default share of rows in the eval split.
    min_frequency: vocabulary frequency threshold (train split) for
      ``reference_examples`` training rows; see auto_min_frequency.
    base_hparams: base hyperparameters (hparams.NAMES) at
      ``base_batch_size`` (reference implementation's values), tuned on
      ``reference_examples`` training rows (scaling.auto_base_hparams adapts
      them to fewer).
    base_batch_size: the batch size the base hyperparameters are for.
    reference_examples: training rows of the full public dataset, which
      the published min_frequency and base_hparams are for.
    slice_features: default categorical fields to slice evaluation by.
  """
  name: str
  columns: Tuple[str, ...]
  delimiter: str
  has_header: bool
  label: str
  dense: Tuple[str, ...]
  int_categorical: Tuple[str, ...]
  str_categorical: Tuple[str, ...]
  time_field: Optional[str]
  dropped: Tuple[str, ...]
  eval_fraction: float
  min_frequency: int
  base_hparams: Mapping[str, float]
  base_batch_size: int
  reference_examples: int
  slice_features: Tuple[str, ...]

  def auto_min_frequency(self, train_examples: int) -> int:
    """The vocabulary threshold for a train split of this many rows.

    An id is kept when its share of the rows is at least that of the
    published threshold on the full dataset (min_frequency /
    reference_examples), so the threshold shrinks with the data, but never
    below 2: ids seen once share the OOV row, which then learns what an
    unseen id at serving time is like (with 1 it would only learn missing
    values).
    """
    scaled = round(self.min_frequency * train_examples /
                   self.reference_examples)
    return max(2, min(self.min_frequency, scaled))

  @property
  def raw_features(self) -> Tuple[str, ...]:
    """Columns kept in the tf.Examples, in file order (label included)."""
    return tuple(c for c in self.columns if c not in self.dropped)

  @property
  def int_features(self) -> Tuple[str, ...]:
    """Raw features stored as int64 (label, counts, int ids, time)."""
    time = (self.time_field,) if self.time_field else ()
    keep = set((self.label,) + self.dense + self.int_categorical + time)
    return tuple(c for c in self.raw_features if c in keep)

  @property
  def categorical_features(self) -> Tuple[str, ...]:
    """Transformed id features, one embedding table each, in a fixed order."""
    derived = (HOUR_OF_DAY, WEEKDAY) if self.time_field else ()
    raw = set(self.int_categorical + self.str_categorical)
    return tuple(c for c in self.raw_features if c in raw) + derived

  @property
  def bucket_features(self) -> Tuple[str, ...]:
    """Transformed ids of the dense counts' log-squared buckets."""
    return tuple(bucket_name(name) for name in self.dense)

  @property
  def linear_features(self) -> Tuple[str, ...]:
    """The logistic regression's fields: every categorical and every count
    as its bucket's id (a linear model cannot bend one weight per log
    count into the count's non-monotone effect)."""
    return self.categorical_features + self.bucket_features

  def raw_dtype(self, feature: str) -> str:
    """'int' or 'string': how a raw feature is stored in tf.Examples."""
    if feature in self.int_features:
      return "int"
    if feature in self.str_categorical:
      return "string"
    raise KeyError(f"{feature!r} is not a raw feature of {self.name}")


_CRITEO_DENSE = tuple(f"I{i}" for i in range(1, 14))
_CRITEO_CATEGORICAL = tuple(f"C{i}" for i in range(1, 27))

CRITEO = DatasetSpec(
    name="criteo",
    columns=("label",) + _CRITEO_DENSE + _CRITEO_CATEGORICAL,
    delimiter="\t",
    has_header=False,
    label="label",
    dense=_CRITEO_DENSE,
    int_categorical=(),
    str_categorical=_CRITEO_CATEGORICAL,
    time_field=None,
    dropped=(),
    eval_fraction=0.1,
    # The common Criteo benchmark setting (DeepCTR/FuxiCTR): ids seen fewer
    # than 10 times in train share the OOV row.
    min_frequency=10,
    # The paper's Criteo values are the definition's defaults.
    base_hparams=hparams.published(),
    base_batch_size=1024,
    # Kaggle train.txt: 45,840,617 rows, 90% of them in train.
    reference_examples=41_256_555,
    slice_features=("C6", "C9", "C17", "C20"),
)

_AVAZU_INT_CATEGORICAL = ("C1", "banner_pos", "device_type",
                          "device_conn_type") + tuple(
                              f"C{i}" for i in range(14, 22))
_AVAZU_STR_CATEGORICAL = ("site_id", "site_domain", "site_category", "app_id",
                          "app_domain", "app_category", "device_id",
                          "device_ip", "device_model")

AVAZU = DatasetSpec(
    name="avazu",
    columns=("id", "click", "hour", "C1", "banner_pos", "site_id",
             "site_domain", "site_category", "app_id", "app_domain",
             "app_category", "device_id", "device_ip", "device_model",
             "device_type", "device_conn_type") + tuple(
                 f"C{i}" for i in range(14, 22)),
    delimiter=",",
    has_header=True,
    label="click",
    dense=(),
    int_categorical=_AVAZU_INT_CATEGORICAL,
    str_categorical=_AVAZU_STR_CATEGORICAL,
    time_field="hour",
    dropped=("id",),
    eval_fraction=0.2,
    # Avazu benchmark setting (FuxiCTR avazu_x4): ids seen once are OOV.
    min_frequency=2,
    base_hparams=hparams.published(dense_lr=1e-4, zeta=1e-4),
    base_batch_size=1024,
    # Kaggle train: 40,428,967 rows, 80% of them in train.
    reference_examples=32_343_174,
    slice_features=("banner_pos", "device_type", "site_category"),
)

DATASETS: Dict[str, DatasetSpec] = {s.name: s for s in (CRITEO, AVAZU)}


def get_spec(name: str) -> DatasetSpec:
  """The spec of a dataset by name, with a clear error for unknown names."""
  try:
    return DATASETS[name]
  except KeyError:
    raise ValueError(f"unknown dataset {name!r}; choose one of "
                     f"{sorted(DATASETS)}") from None
