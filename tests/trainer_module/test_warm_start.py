"""Warm start by id: embedding rows follow their ids' tokens from
yesterday's vocabularies into today's; a model warm-started from the
served one scores an example whose ids all survived exactly as the served
one did, before any training."""

import numpy as np
import pytest

from trainer_module import features
from trainer_module import models
from trainer_module import warm_start

_OPTIONS = models.ModelOptions(embedding_dim=3, hidden_units=(8, 4),
                               precision="float32")


def test_carry_rows_matches_a_loop_over_tokens():
  rng = np.random.default_rng(0)
  old_tokens = ["a", "b", "c", "d"]
  new_tokens = ["c", "e", "a", "f", "g"]  # b, d dropped; e, f, g new.
  old = rng.normal(size=(5, 2))  # 4 ids and the OOV row.
  new = rng.normal(size=(6, 2))
  table, rows = warm_start.carry_rows(old_tokens, old, new_tokens, new)
  expected = new.copy()
  for i, token in enumerate(new_tokens):
    if token in old_tokens:
      expected[i] = old[old_tokens.index(token)]
  expected[-1] = old[-1]
  np.testing.assert_array_equal(table, expected)
  assert rows == warm_start.CarriedRows(carried=2, new=3, dropped=2)
  np.testing.assert_array_equal(new[1], table[1])  # A new id: untouched.
  with pytest.raises(ValueError, match="5 rows for 3 tokens"):
    warm_start.carry_rows(old_tokens[:3], old, new_tokens, new)
  with pytest.raises(ValueError, match="width"):
    warm_start.carry_rows(old_tokens, old, new_tokens, new[:, :1])


def _vocabulary(path, tokens):
  path.write_text("".join(f"{100 - i} {t}\n" for i, t in enumerate(tokens)))
  return str(path)


@pytest.mark.parametrize("architecture", ["deepfm", "dcnv2"])
def test_a_warm_started_model_scores_surviving_ids_as_the_served_one(
    tmp_path, architecture):
  """Yesterday's model (random weights) saved as an export saves it; today's
  vocabularies reorder, drop and add ids; the warm-started model, fed
  today's ids of the tokens that survived, gives yesterday's logits to the
  last bit."""
  old_vocab = {"f1": ["a", "b", "c", "d"], "f2": ["x", "y", "z"]}
  new_vocab = {"f1": ["d", "new1", "b", "a"], "f2": ["z", "y", "new2", "w"]}
  dense = ("n1", "n2")
  old = models.build_model(architecture, {
      f: len(t) + features.NUM_OOV_BUCKETS for f, t in old_vocab.items()},
                           dense, _OPTIONS)
  rng = np.random.default_rng(1)
  old.set_weights([rng.normal(size=w.shape).astype(np.float32)
                   for w in old.get_weights()])
  paths = {f: _vocabulary(tmp_path / f"old-{f}", t)
           for f, t in old_vocab.items()}
  served = tmp_path / "served"
  warm_start.save_state([old], paths, str(served))
  assert warm_start.has_state(str(served))

  new = models.build_model(architecture, {
      f: len(t) + features.NUM_OOV_BUCKETS for f, t in new_vocab.items()},
                           dense, _OPTIONS)
  fresh = [w.copy() for w in new.get_weights()]
  record = warm_start.warm_start(new, str(served), new_vocab)
  assert record["carried_ids"] == 3 + 2
  assert record["new_ids"] == 1 + 2 and record["dropped_ids"] == 1 + 1
  assert record["by_field"]["f1"] == {"carried": 3, "new": 1, "dropped": 1}

  # Surviving tokens, with an OOV id, in yesterday's and today's ids.
  survivors = [("a", "z"), ("d", "y"), ("b", None)]
  def ids(vocab, column):
    out = []
    for row in survivors:
      token = row[column]
      out.append(len(vocab[("f1", "f2")[column]]) if token is None
                 else vocab[("f1", "f2")[column]].index(token))
    return np.array(out, np.int64)
  values = rng.uniform(size=(3, 2)).astype(np.float32)
  def batch(vocab):
    return {"f1": ids(vocab, 0), "f2": ids(vocab, 1),
            "n1": values[:, 0], "n2": values[:, 1]}
  np.testing.assert_array_equal(np.asarray(new(batch(new_vocab))),
                                np.asarray(old(batch(old_vocab))))
  # A new id keeps its fresh row; the wide table of a new id too.
  (deep, wide), = [(d, w) for f, d, w in new.embedding_tables() if f == "f1"]
  index = [w.path for w in new.weights].index(deep.path)
  np.testing.assert_array_equal(np.asarray(deep)[1], fresh[index][1])


def test_another_architecture_is_refused_by_name(tmp_path):
  vocab = {"f1": ["a", "b"]}
  sizes = {"f1": 2 + features.NUM_OOV_BUCKETS}
  old = models.build_model("deepfm", sizes, ("n1",), _OPTIONS)
  served = tmp_path / "served"
  warm_start.save_state([old], {"f1": _vocabulary(tmp_path / "v", ["a", "b"])},
                        str(served))
  for other in (models.build_model("wdl", sizes, ("n1",), _OPTIONS),
                models.build_model("deepfm", sizes, ("n1",), models.ModelOptions(
                    embedding_dim=3, hidden_units=(8, 5),
                    precision="float32"))):
    with pytest.raises(ValueError, match="--no-warm-start"):
      warm_start.warm_start(other, str(served), vocab)
