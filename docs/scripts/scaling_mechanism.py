"""The scaling rules' mechanism per id-frequency bucket (issue #59), for
docs/study.md's "Why square-root scaling holds".

The paper's argument (its section 3, equation 1): a frequent id is in every
batch and a rare one in b * p of them, so as the batch grows the frequent
ids' gradient rows grow with it while the rare ones' do not; a rule that
scales the embedding rate with the batch then over-moves the frequent ids
(or under-moves the rare ones), and CowClip's per-id clip fixes that. This
measures each step of the argument on the study's data, per bucket of the
ids' training counts (the Transform's vocabulary frequencies):

gradients  one batch of 1024 and one of 32768 (the seeded order's first
           rows): each deep-table row's data gradient of the summed loss
           (the paper's g_k, L2 left out) and its occurrences, at the
           weights the base run (`none` at 1024) reaches; and the share of
           rows CowClip scales down, at the weights each CowClip run reaches
           and its own batch (its scaled L2, the dataset's r and zeta)
updates    from the same initial weights over the same EXAMPLES training
           examples (seeded order), `none` at 1024 against `cowclip` and
           `sqrt` at 32768 (and `none`, `cowclip` at the other size): each
           row's movement ||W_after - W_before||, every row of the bucket
           (a row the examples never show still decays with the dense
           update's L2)

  PYTHONPATH=. .venv/bin/python docs/scripts/scaling_mechanism.py RAW WORK OUT [EXAMPLES]
  PYTHONPATH=. .venv/bin/python docs/scripts/scaling_mechanism.py figure OUT

RAW, WORK as `python -m pipeline benchmark --data RAW --work-dir WORK`: the
pipeline's ingestion and Transform of RAW, with the vocabulary threshold
`run` and `study` resolve for its size, run once in WORK (about 20 minutes
at 10M rows on 2 cores) and reused from it. OUT gets
OUT-gradients.csv, OUT-updates.csv and their figure OUT.png (`figure`
draws it again from the two files). Base hyperparameters: the paper's
Criteo values (docs/study_paper_regime.sh); precision float32.
"""

import csv
import dataclasses
import sys
from typing import Dict, List, Mapping, Sequence

import keras
import numpy as np
import tensorflow as tf

from commands.experiments import benchmark
from trainer_module import cowclip
from trainer_module import features
from trainer_module import gradient_chain
from trainer_module import input_pipeline
from trainer_module import plan as plan_lib
from trainer_module import preprocessing
from trainer_module import trainer
from trainer_module.settings import StepOptions
from trainer_module.settings import TrainerSettings

PAPER_HPARAMS = {"dense_lr": 8e-4, "embed_lr": 1e-4, "l2": 1e-5}
BASE, LARGE = 1024, 32768
SEED = 1
# Training counts' bucket edges (decades) and names.
EDGES = (1, 10, 100, 1_000, 10_000, 100_000)
RUNS = (("none", BASE), ("cowclip", BASE), ("none", LARGE), ("sqrt", LARGE),
        ("cowclip", LARGE))


def bucket_names() -> List[str]:
  names = [f"{low:,}-{high - 1:,}" for low, high in zip(EDGES, EDGES[1:])]
  return names + [f">={EDGES[-1]:,}"]


def row_buckets(data: benchmark.TransformedData, spec, sizes: Mapping[str, int]
               ) -> Dict[str, np.ndarray]:
  """Each field's table rows' bucket index (-1: OOV rows and ids of count
  0, kept out)."""
  out = {}
  for field in spec.categorical_features:
    counts = preprocessing.vocabulary_frequencies(data.tf_transform_output,
                                                  field)
    bucket = np.full(sizes[field], -1, np.int64)
    bucket[:len(counts)] = np.where(
        counts >= 1, np.searchsorted(EDGES, counts, side="right") - 1, -1)
    out[field] = bucket
  return out


def run_settings(rule: str, batch: int) -> TrainerSettings:
  return TrainerSettings(
      dataset="criteo", batch_size=batch, epochs=1, scaling_rule=rule,
      hparams=PAPER_HPARAMS, auto_hparams=False,
      step=StepOptions(cowclip=rule == "cowclip"),
      model_options=dataclasses.replace(TrainerSettings(
          dataset="criteo").model_options, precision="float32"))


class TableSnapshots(keras.callbacks.Callback):
  """The deep tables' weights when the fit starts and ends."""

  def on_train_begin(self, logs=None):
    self.before = [np.array(t) for _, t, _ in self.model.embedding_tables()]

  def on_train_end(self, logs=None):
    self.after = [np.array(t) for _, t, _ in self.model.embedding_tables()]


def train(data, spec, held, rule: str, batch: int, examples: int):
  """(model, plan, snapshots) after `examples` seeded examples of one run."""
  plan = plan_lib.resolve(run_settings(rule, batch), {}, held.train_examples)
  split = input_pipeline.training_data(
      list(data.train_files), data.tf_transform_output, spec.label,
      plan.batch_size, seed=SEED, held=held)
  snapshots = TableSnapshots()
  model, _ = trainer.train(
      plan, dataclasses.replace(split, train=split.train.repeat()),
      data.tf_transform_output, seed=SEED,
      epoch_steps=max(1, examples // batch), callbacks=[snapshots],
      verbose=0)
  return model, plan, snapshots


def first_batch(data, spec, held, batch: int):
  """The seeded training order's first batch of `batch` rows."""
  split = input_pipeline.training_data(
      list(data.train_files), data.tf_transform_output, spec.label, batch,
      seed=SEED, held=held)
  return next(iter(split.train))[:2]


def gradient_rows(model, plan, batch_features, labels, clip):
  """Per deep table: (distinct ids, occurrences, data-gradient row norms of
  the summed loss, clipped flags under `clip` with the plan's L2)."""
  tables, _ = model.split_variables()
  with tf.GradientTape() as tape:
    logits = model(batch_features, training=True)
    summed = tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(
        labels=tf.reshape(tf.cast(labels, tf.float32), [-1, 1]),
        logits=logits))
  grads = tape.gradient(summed, tables)
  state = gradient_chain.batch_rows(gradient_chain.start(
      model.training_step.tables,
      [model.field_ids(batch_features, f) for f in model.fields], grads))
  # The step's gradient is of the batch mean: CowClip clips that one.
  size = float(tf.shape(labels)[0])
  out = []
  for table, rows in zip(state.tables, state.rows):
    if not table.deep:
      continue
    ids = state.distinct[table.field]
    counts = tf.math.unsorted_segment_sum(
        tf.ones_like(ids.position, tf.float32), ids.position,
        tf.size(ids.ids))
    mean_rows = cowclip.add_l2(rows._replace(rows=rows.rows / size),
                               plan.scaled["l2"])
    clipped = cowclip.clip_gradient_rows(mean_rows, ids, clip).gradient
    flags = (tf.norm(clipped, axis=-1) <
             tf.norm(mean_rows.rows, axis=-1) * (1 - 1e-6))
    out.append((table.field, ids.ids.numpy(), counts.numpy(),
                tf.norm(rows.rows, axis=-1).numpy(), flags.numpy()))
  return out


def main(argv: Sequence[str]) -> int:
  raw, work, out = argv[:3]
  examples = int(argv[3]) if len(argv) > 3 else 2_000_000
  spec = features.get_spec("criteo")
  # The vocabulary threshold `run` and `study` resolve for the data's size.
  data = benchmark.transform(spec, raw, None, work)
  held = input_pipeline.hold_split(list(data.train_files),
                                   data.tf_transform_output, spec.label)
  names = bucket_names()
  # Every run's tables have the Transform's vocabulary sizes.
  buckets = row_buckets(data, spec, preprocessing.vocabulary_sizes(
      data.tf_transform_output, spec))

  updates, trained = [], {}
  for rule, batch in RUNS:
    model, plan, snap = train(data, spec, held, rule, batch, examples)
    moved = [np.linalg.norm(a - b, axis=-1)
             for a, b in zip(snap.after, snap.before)]
    row = {"rule": rule, "batch_size": batch, "examples": examples,
           "steps": max(1, examples // batch),
           "embed_lr": plan.scaled["embed_lr"], "l2": plan.scaled["l2"]}
    for index, name in enumerate(names):
      values = np.concatenate([m[buckets[f] == index] for m, f in
                               zip(moved, model.fields)])
      row[f"rows {name}"] = values.size
      row[f"moved {name}"] = float(values.mean()) if values.size else ""
    updates.append(row)
    print(row, flush=True)
    trained[(rule, batch)] = (model, plan)

  # Equation 1 at the base run's weights (both batch sizes, the clip with
  # CowClip's L2 at each), and each CowClip run's clip at its own weights.
  gradients = []
  batches = {b: first_batch(data, spec, held, b) for b in (BASE, LARGE)}
  for state, batch in ((("none", BASE), BASE), (("none", BASE), LARGE),
                       (("cowclip", BASE), BASE),
                       (("cowclip", LARGE), LARGE)):
    model, _ = trained[state]
    plan = trained[("cowclip", batch)][1]
    clip = cowclip.ClipSettings(plan.scaled["r"], plan.scaled["zeta"])
    rows = gradient_rows(model, plan, *batches[batch], clip)
    for index, name in enumerate(names):
      keep = [buckets[model.fields[field]][ids] == index
              for field, ids, *_ in rows]
      counts, norms, flags = (
          np.concatenate([r[k][m] for r, m in zip(rows, keep)])
          for k in (2, 3, 4))
      gradients.append({
          "weights_of": f"{state[0]} at {state[1]}", "batch_size": batch,
          "bucket": name, "rows": norms.size,
          "mean_occurrences": float(counts.mean()) if norms.size else "",
          "mean_gradient_norm": float(norms.mean()) if norms.size else "",
          "clipped_share": float(flags.mean()) if norms.size else ""})
      print(gradients[-1], flush=True)
  for suffix, rows in (("updates", updates), ("gradients", gradients)):
    with open(f"{out}-{suffix}.csv", "w", newline="") as f:
      writer = csv.DictWriter(f, fieldnames=list(rows[0]))
      writer.writeheader()
      writer.writerows(rows)
  plot(out)
  return 0


def plot(out: str) -> None:
  """OUT.png: each rule's row movement over the base run's, and the data
  gradient's growth from 1024 to 32768, by bucket."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  names = bucket_names()
  with open(f"{out}-updates.csv") as f:
    updates = list(csv.DictReader(f))
  with open(f"{out}-gradients.csv") as f:
    gradients = list(csv.DictReader(f))
  figure, (moved, grown) = plt.subplots(1, 2, figsize=(11, 4))
  base = next(u for u in updates
              if (u["rule"], int(u["batch_size"])) == ("none", BASE))
  for update in updates:
    ratios = [float(update[f"moved {n}"]) / float(base[f"moved {n}"])
              for n in names]
    moved.plot(names, ratios, marker="o",
               label=f"{update['rule']} at {update['batch_size']}")
  moved.set_yscale("log")
  moved.set_xlabel("id's training count")
  moved.set_ylabel("row movement / none at 1024's")
  moved.set_title(f"over the same {int(base['examples']):,} examples")
  moved.legend(fontsize=8)
  base_state = [g for g in gradients if g["weights_of"] == f"none at {BASE}"]
  by_batch = {b: {g["bucket"]: g for g in base_state
                  if int(g["batch_size"]) == b} for b in (BASE, LARGE)}
  for key, label in (("mean_gradient_norm", "gradient row norm"),
                     ("mean_occurrences", "occurrences")):
    grown.plot(names, [float(by_batch[LARGE][n][key]) /
                       float(by_batch[BASE][n][key]) for n in names],
               marker="o", label=label)
  grown.axhline(LARGE / BASE, color="grey", linestyle=":",
                label="the batch's growth")
  grown.set_yscale("log")
  grown.set_xlabel("id's training count")
  grown.set_ylabel(f"at {LARGE} / at {BASE}")
  grown.set_title("summed-loss gradient of a present row")
  grown.legend(fontsize=8)
  for axes in (moved, grown):
    axes.tick_params(axis="x", labelrotation=30, labelsize=8)
  figure.tight_layout()
  figure.savefig(f"{out}.png", dpi=110)


if __name__ == "__main__":
  if len(sys.argv) == 3 and sys.argv[1] == "figure":
    plot(sys.argv[2])
    sys.exit(0)
  sys.exit(main(sys.argv[1:]))
