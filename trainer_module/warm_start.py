"""Warm start from the served model: yesterday's weights, embedding rows
carried over by id into today's vocabularies.

Every export keeps what a warm start needs beside the SavedModel
(`save_state`: WARM_START_DIR holds each replica's weights and the
vocabulary of every field), so the pushed model is its own warm-start
source. `warm_start` then loads it into a freshly built model:

- an embedding row (deep and wide tables) follows its id's token: an id
  present in both vocabularies keeps its row exactly, a new id keeps its
  fresh initialisation, a dropped id's row is dropped; the OOV rows (rare
  and unseen ids) carry over as they are;
- every other weight (MLP, cross and FM layers, the dense features' linear
  weights, the bias) is copied, in the model's weight order, and must have
  the same shape: another architecture is refused by name.

What does not carry over, by rule: the optimizer state (its moments start
at zero; for new ids there are none, and after a day the old ones describe
yesterday's gradients) and the CowClip settings, which are today's
settings; the clip reads each row's norm, so carried rows are clipped as
yesterday's model left them. docs/daily.md says why.
"""

import dataclasses
import io
import json
import os
from typing import Dict, List, Mapping, Sequence, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_transform as tft

from trainer_module import contract
from trainer_module import features
from trainer_module import models

# Inside the exported (and pushed) model's directory.
WARM_START_DIR = "warm_start"
_STATE = "state.json"


@dataclasses.dataclass(frozen=True)
class CarriedRows:
  """How one table's rows moved: ids kept from yesterday, new today,
  dropped since."""
  carried: int
  new: int
  dropped: int


def carry_rows(old_tokens: Sequence[str], old_table: np.ndarray,
               new_tokens: Sequence[str], new_table: np.ndarray,
               oov_buckets: int = features.NUM_OOV_BUCKETS
              ) -> Tuple[np.ndarray, CarriedRows]:
  """`new_table` with the rows of the ids both vocabularies hold copied
  from `old_table`, by token, and the OOV rows (the last `oov_buckets`)
  copied as they are.

  Args:
    old_tokens, new_tokens: each vocabulary's tokens; token i has row i.
    old_table: [len(old_tokens) + oov_buckets, d] yesterday's rows.
    new_table: [len(new_tokens) + oov_buckets, d] today's initial rows.
  """
  for name, tokens, table in (("old", old_tokens, old_table),
                              ("new", new_tokens, new_table)):
    if table.shape[0] != len(tokens) + oov_buckets:
      raise ValueError(f"the {name} table has {table.shape[0]} rows for "
                       f"{len(tokens)} tokens and {oov_buckets} OOV rows")
  if old_table.shape[1:] != new_table.shape[1:]:
    raise ValueError(f"rows of width {old_table.shape[1:]} cannot carry "
                     f"into rows of width {new_table.shape[1:]}")
  old_index = {token: i for i, token in enumerate(old_tokens)}
  pairs = np.array([(i, old_index[t]) for i, t in enumerate(new_tokens)
                    if t in old_index], dtype=np.int64).reshape(-1, 2)
  table = np.array(new_table, copy=True)
  table[pairs[:, 0]] = old_table[pairs[:, 1]]
  if oov_buckets:
    table[-oov_buckets:] = old_table[-oov_buckets:]
  carried = len(pairs)
  return table, CarriedRows(carried, len(new_tokens) - carried,
                            len(old_tokens) - carried)


def vocabulary_tokens(path: str) -> List[str]:
  """The tokens of a Transform vocabulary file ('count token' lines; the
  line number is the id)."""
  with tf.io.gfile.GFile(path) as f:
    return [line.rstrip("\n").split(" ", 1)[1] for line in f]


def transform_vocabularies(tf_transform_output: tft.TFTransformOutput,
                           fields: Sequence[str]) -> Dict[str, str]:
  """The Transform vocabulary file of each field."""
  return {field: tf_transform_output.vocabulary_file_by_name(
      features.vocabulary_name(field)) for field in fields}


def transform_tokens(tf_transform_output: tft.TFTransformOutput,
                     fields: Sequence[str]) -> Dict[str, List[str]]:
  """The tokens of each field's Transform vocabulary, in id order."""
  return {field: vocabulary_tokens(path) for field, path in
          transform_vocabularies(tf_transform_output, fields).items()}


def save_state(replicas: Sequence[models.CTRModel],
               vocabulary_paths: Mapping[str, str], directory: str) -> None:
  """Writes the warm-start state of `replicas` into directory/WARM_START_DIR:
  each replica's weights (npz, in weight order), the vocabulary file of
  each of its fields, and what they are."""
  root = os.path.join(directory, WARM_START_DIR)
  tf.io.gfile.makedirs(root)
  model = replicas[0]
  for index, replica in enumerate(replicas):
    buffer = io.BytesIO()  # np.savez seeks: not on every file system.
    np.savez(buffer, *[np.asarray(w) for w in replica.get_weights()])
    with tf.io.gfile.GFile(os.path.join(root, f"replica-{index}.npz"),
                           "wb") as f:
      f.write(buffer.getvalue())
  for field in model.fields:
    tf.io.gfile.copy(vocabulary_paths[field],
                     os.path.join(root, f"vocabulary-{field}"),
                     overwrite=True)
  with tf.io.gfile.GFile(os.path.join(root, _STATE), "w") as f:
    json.dump({"architecture": model.architecture,
               "fields": list(model.fields),
               "replicas": len(replicas),
               "weights": [w.path for w in model.weights],
               "shapes": [list(w.shape) for w in model.weights]}, f,
              indent=1)


def has_state(directory: str) -> bool:
  """Whether a served model's directory holds a warm-start state."""
  return tf.io.gfile.exists(os.path.join(directory, WARM_START_DIR, _STATE))


def warm_start(model: models.CTRModel, directory: str,
               new_tokens: Mapping[str, Sequence[str]],
               replica: int = 0) -> Dict[str, object]:
  """Loads the state saved in `directory` (save_state) into `model`, whose
  vocabularies are `new_tokens`: its replica `replica`'s (replica 0's if
  the served model had fewer). Returns where from (the pushed version a
  copy names, else `directory`) and what was carried: per field and in
  total.

  Raises:
    ValueError: the served model is another architecture or has other
      fields or weight shapes (train it cold: --no-warm-start).
  """
  root = os.path.join(directory, WARM_START_DIR)
  with tf.io.gfile.GFile(os.path.join(root, _STATE)) as f:
    state = json.load(f)
  if (state["architecture"], state["fields"]) != (model.architecture,
                                                   list(model.fields)):
    raise ValueError(
        f"the served model in {directory} is a {state['architecture']} over "
        f"{len(state['fields'])} fields; this one is a {model.architecture} "
        f"over {len(model.fields)}: it cannot warm-start from it "
        "(--no-warm-start trains from scratch)")
  source = replica if replica < state["replicas"] else 0
  with tf.io.gfile.GFile(os.path.join(root, f"replica-{source}.npz"),
                         "rb") as f:
    with np.load(io.BytesIO(f.read())) as saved:
      old = [saved[f"arr_{i}"] for i in range(len(saved.files))]
  if len(old) != len(model.weights):
    raise ValueError(f"the served model in {directory} has {len(old)} "
                     f"weights, this one {len(model.weights)}: another "
                     "architecture (--no-warm-start trains from scratch)")
  tables = {}
  for field, deep, wide in model.embedding_tables():
    for table in (deep, wide):
      if table is not None:
        tables[id(table)] = field
  old_tokens = {field: vocabulary_tokens(os.path.join(
      root, f"vocabulary-{field}")) for field in model.fields}
  carried = {}
  weights = []
  for variable, old_value, path in zip(model.weights, old, state["weights"]):
    value = np.asarray(variable)
    field = tables.get(id(variable))
    if field is None:
      if old_value.shape != value.shape:
        raise ValueError(
            f"the served model's {path} has shape {old_value.shape}, this "
            f"one's {variable.path} {value.shape}: another architecture "
            "(--no-warm-start trains from scratch)")
      weights.append(old_value)
      continue
    table, rows = carry_rows(old_tokens[field], old_value,
                             new_tokens[field], value)
    weights.append(table)
    carried[field] = rows  # The deep and wide tables move alike.
  model.set_weights(weights)
  source = os.path.join(directory, contract.SERVED_FROM)
  if tf.io.gfile.exists(source):
    with tf.io.gfile.GFile(source) as f:
      directory = f.read().strip()
  return {"from": directory,
          "carried_ids": sum(r.carried for r in carried.values()),
          "new_ids": sum(r.new for r in carried.values()),
          "dropped_ids": sum(r.dropped for r in carried.values()),
          "by_field": {f: dataclasses.asdict(r) for f, r in carried.items()}}
