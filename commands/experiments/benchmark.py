"""Training-speed benchmark: examples/s of the real step, and where it goes.

`python -m pipeline benchmark` times the training step the Trainer runs
(trainer.train: the Trainer's model, CowClip step and tf.data input on the
Transform output) for every batch size, precision (ModelOptions.precision),
embedding update ('dense', 'sparse') and CowClip on/off, and again with
every vocabulary 10x larger at the first batch size (the dense update's
cost grows with the table size, the sparse update's should not).

Inputs: a raw file in the dataset's layout (generated with commands.synthetic.generate
when none is given) goes once through the pipeline's own ingestion and
Transform (commands.experiments.study_data.transform_once, in ``--work-dir`` or a
temporary directory): the benchmark trains on what the Trainer would read,
with the vocabulary threshold ``min_frequency``. Transform itself is not
timed: it runs once per dataset, and a kept work directory lets the next
benchmark of the same file reuse it (TFX's cache).

Timing: one epoch of ``warmup_steps + steps`` steps (the training part
repeated as needed); callbacks.ThroughputLogger, the Trainer's step timer,
starts at the end of the last warm-up step, so tracing and graph building
(the first step) are excluded, and stops at the end of the last step. The
hyperparameters are the dataset's published base ones scaled to the batch
by the CowClip rule (they do not change the cost of a step).

Where the step goes: after the fit, the parts of the step are timed alone
on one batch of the same model (component_seconds): the MLP (DNN + output
layer, forward and backward), the embedding lookups (forward and backward),
the optimizer (the tables' gradients from the lookups' slices, L2, both
Adams) and CowClip (id counts, row norms, clipping). Shares are of CPU
time (the process's, all threads), the part's over the measured step's:
the work, which a loaded machine stretches less than wall time, so parts
timed minutes apart still compare. They do not add up to 1: the rest is
FM, loss, metrics, the gradient tape's glue and per-step dispatch.

The input: the Trainer's own (``--inputs pipeline``: the training part as
input_pipeline.training_data gives it, held in memory when it fits) or
FIXED_BATCHES of its batches repeated (``fixed``: the step alone); its
share is the CPU time per batch of the input iterated alone, without the
step, over the measured step's (input_seconds).

Arithmetic rate: the matrix products of the MLP and cross layers cost
6 * (weights of each kernel) FLOP per example (forward, and the two
products of the backward pass); at the measured examples/s that is the
step's achieved GFLOP/s, reported next to the machine's peak, measured in
the same run with a plain square matmul in the case's precision.
"""

import argparse
import csv
import dataclasses
import functools
import os
import tempfile
import time
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_transform as tft

from commands.cli import flags
from commands.cli.benchmark_flags import DEFAULT_ROWS
from commands.cli.benchmark_flags import DEFAULT_VOCAB_SCALE
from commands.cli.benchmark_flags import FIXED_BATCHES
from commands.cli.benchmark_flags import INPUTS
from commands.experiments import data_benchmark
from commands.experiments import study_data
from commands.synthetic import generate
from pipeline import config as config_lib
from pipeline.config import PipelineConfig
from trainer_module import callbacks as callbacks_lib
from trainer_module import cowclip
from trainer_module import distribution
from trainer_module import features
from trainer_module import gradient_chain
from trainer_module import input_pipeline
from trainer_module import models
from trainer_module import plan as plan_lib
from trainer_module import precision as precision_lib
from trainer_module import settings
from trainer_module import trainer

COLUMNS = ("model", "batch_size", "precision", "embedding_update", "cowclip",
           "vocab_scale", "vocab_rows", "distribution", "replicas", "steps",
           "seconds_per_step", "cpu_seconds_per_step", "examples_per_second",
           "gflops_per_second", "matmul_peak_gflops", "mlp_share",
           "embedding_share", "optimizer_share", "cowclip_share",
           "collective_share", "input", "input_share")
COMPONENTS = ("mlp", "embedding", "optimizer", "cowclip")


@dataclasses.dataclass(frozen=True)
class TransformedData:
  """The benchmark's input: the real Transform output of its raw rows.

  Attributes:
    tf_transform_output: the Transform graph (its vocabularies).
    train_files: the train split's record files (ExampleGen's).
  """
  tf_transform_output: tft.TFTransformOutput
  train_files: Tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class BenchmarkCase:
  """One timed configuration of the training step."""
  batch_size: int
  embedding_update: str
  cowclip: bool
  vocab_scale: int = 1
  precision: str = precision_lib.AUTO
  distribution: str = "none"
  input: str = "pipeline"


def transform(spec: features.DatasetSpec, path: str,
              min_frequency: Optional[int], work_dir: str) -> TransformedData:
  """The adapter: the pipeline's ingestion and Transform of the raw file
  ``path``, run once in ``work_dir`` (as the study runs them).

  Raises:
    the pipeline's errors: a file without the dataset's layout fails in
    ExampleGen, which names it.
  """
  config = PipelineConfig.from_fields(dataset=spec.name, data=path,
                                      output=work_dir,
                                      min_frequency=min_frequency)
  inputs = study_data.transform_once(config)
  return TransformedData(
      tft.TFTransformOutput(inputs.transform_graph),
      tuple(study_data.split_files(inputs.raw_examples, "train")))


def benchmark_cases(batch_sizes: Sequence[int],
                    vocab_scale: int = DEFAULT_VOCAB_SCALE,
                    precisions: Sequence[str] = (precision_lib.AUTO,),
                    distribution_: str = "none",
                    inputs: Sequence[str] = ("pipeline",)
                   ) -> List[BenchmarkCase]:
  """Every batch x precision x update x CowClip (with a `distribution_`,
  each on one device and then distributed, side by side; with several
  `inputs`, each input side by side), then the larger vocabulary at the
  first batch size on one device (vocab_scale 1 skips those)."""
  kinds = ("none",) if distribution_ == "none" else ("none", distribution_)
  cases = [BenchmarkCase(b, update, clip, precision=p, distribution=kind,
                         input=source)
           for b in batch_sizes for p in precisions
           for update in settings.EMBEDDING_UPDATES
           for clip in (True, False) for kind in kinds for source in inputs]
  if vocab_scale > 1:
    cases += [BenchmarkCase(batch_sizes[0], update, clip, vocab_scale, p)
              for p in precisions for update in settings.EMBEDDING_UPDATES
              for clip in (True, False)]
  return cases


def matmul_peak_gflops(precision: str) -> float:
  """This machine's matrix-product rate now in the precision's compute
  dtype (auto: the one it resolves to): precision_lib.matmul_gflops on
  [2048, 2048] matrices, 5 products a round, best of 3 rounds."""
  chosen, _ = precision_lib.resolve(precision)
  dtype = tf.bfloat16 if chosen == precision_lib.MIXED_BFLOAT16 else (
      tf.float32)
  return precision_lib.matmul_gflops([dtype], size=2048, repeats=5,
                                    rounds=3)[0]


def mlp_flops_per_example(model: models.CTRModel) -> int:
  """FLOP of the MLP's and cross layers' matrix products per training
  example: 2 per weight forward, 4 backward (input and weight gradients)."""
  kernels = [v for layer in (model.dnn, model.interaction, model.deep_logit)
             if layer is not None for v in layer.trainable_variables
             if len(v.shape) == 2]
  return 6 * sum(int(np.prod(v.shape)) for v in kernels)


def _seconds_per_call(function, repeats: int) -> float:
  """Mean CPU seconds (the process's) of ``function()`` after one untimed
  (tracing) call."""
  function()
  start = time.process_time()
  for _ in range(repeats):
    result = function()
  tf.nest.map_structure(
      lambda t: t.numpy() if hasattr(t, "numpy") else t, result)
  return (time.process_time() - start) / repeats


def component_seconds(model: models.CTRModel, features: Mapping[str, object],
                      repeats: int) -> Dict[str, float]:
  """Seconds of each part of a compiled model's training step, timed alone
  on the batch ``features`` (see the module doc). Runs the optimizers:
  the model's weights change."""
  step = model.training_step
  config = step.config
  tables, dense = model.split_variables()
  ids = [model.field_ids(features, field) for field in model.fields]
  batch = int(ids[0].shape[0])
  deep_input = tf.random.uniform([batch, model.deep_input_dim], seed=3)
  mlp_layers = [model.dnn, model.deep_logit]
  mlp_weights = [v for layer in mlp_layers for v in layer.trainable_variables]

  @tf.function
  def mlp():
    with tf.GradientTape() as tape:
      tape.watch(deep_input)
      out = tf.reduce_sum(tf.cast(
          model.deep_logit(model.dnn(deep_input)), tf.float32))
    return tape.gradient(out, [deep_input] + mlp_weights)

  @tf.function
  def embeddings():
    with tf.GradientTape() as tape:
      total = tf.add_n([
          tf.reduce_sum(table(i)) for layers in
          (model.deep_embeddings, model.wide_embeddings)
          for table, i in zip(layers, ids)])
    return tape.gradient(total, tables)

  data_gradients = embeddings()
  # The step's chain up to CowClip (one device: no gather), and its end.
  unclipped = gradient_chain.chain(
      gradient_chain.batch_rows, gradient_chain.add_l2(
          config.l2, config.step.embedding_update == "dense"))
  zero_dense = [tf.zeros_like(v) for v in dense]

  @tf.function
  def optimizer():
    state = unclipped(gradient_chain.start(step.tables, ids, data_gradients))
    model.embedding_optimizer.apply(step.table_gradients(state), tables)
    model.optimizer.apply(zero_dense, dense)
    return model.optimizer.iterations

  seconds = {"mlp": _seconds_per_call(mlp, repeats),
             "embedding": _seconds_per_call(embeddings, repeats),
             "optimizer": _seconds_per_call(optimizer, repeats),
             "cowclip": 0.0}
  if config.step.cowclip:
    # CowClip's own work on each deep table's batch rows (the chain's
    # clip_deep_rows), after the chain's rows and L2.
    clip_deep_rows = gradient_chain.clip_deep_rows(cowclip.ClipSettings(
        config.r, config.zeta, config.step.cowclip_variant))
    state = unclipped(gradient_chain.start(step.tables, ids, data_gradients))

    @tf.function
    def clip():
      return clip_deep_rows(state).rows

    seconds["cowclip"] = _seconds_per_call(clip, repeats)
  return seconds


def collective_seconds(model: models.CTRModel, batch_size: int,
                       repeats: int) -> float:
  """CPU seconds of the step's cross-replica sums and gathers, timed alone
  on tensors of the step's shapes (the model's strategy; its own code:
  the chain's gather_replicas, the summed dense gradients, the gathered
  labels and logits of the metrics)."""
  strategy = model.distribute_strategy
  rows = batch_size // strategy.num_replicas_in_sync
  tables, dense = model.split_variables()
  fields = len(model.fields)

  def replica():
    ids = [tf.zeros([rows], tf.int64)] * fields
    slices = [tf.IndexedSlices(tf.zeros([rows, table.shape[1]]),
                               tf.zeros([rows], tf.int64),
                               tf.shape(table, out_type=tf.int64))
              for table in tables]
    gradients = gradient_chain.gather_replicas(gradient_chain.start(
        model.training_step.tables, ids, slices)).gradients
    summed = distribution.global_sum([tf.zeros_like(v) for v in dense] +
                                     [tf.zeros([]), tf.zeros([])])
    labels_and_logits = distribution.gather_columns([tf.zeros([rows, 1])] * 2)
    return ([g.values for g in gradients], summed, labels_and_logits)

  @tf.function
  def collectives():
    return strategy.run(replica)

  return _seconds_per_call(collectives, repeats)


@functools.lru_cache(maxsize=1)
def _training_data(data: TransformedData, label: str,
                   batch_size: int) -> input_pipeline.TrainingData:
  """The Trainer's input at this batch size, loaded once for the cases of
  one batch size (they come in a row), not for each."""
  return input_pipeline.training_data(list(data.train_files),
                                      data.tf_transform_output, label,
                                      batch_size)


def input_seconds(dataset: tf.data.Dataset, batches: int) -> float:
  """CPU seconds (the process's) per batch of the training input alone (no
  step running), over `batches` batches after the first (which fills the
  shuffle)."""
  iterator = iter(dataset.repeat())
  next(iterator)
  start = time.process_time()
  for _ in range(batches):
    next(iterator)
  return (time.process_time() - start) / batches


def time_training_step(model_name: str, spec: features.DatasetSpec,
                       data: TransformedData, case: BenchmarkCase,
                       options: models.ModelOptions, warmup_steps: int,
                       steps: int, matmul_peak: Optional[float] = None,
                       components: bool = True,
                       callbacks: Sequence[object] = ()) -> Dict[str, object]:
  """Times ``steps`` training steps of one case after ``warmup_steps``,
  through trainer.train (see the module doc).

  With ``components``, the step's parts are then timed alone (min(steps,
  10) repeats each) and reported as shares of the step. ``callbacks`` join
  the fit's step timer (docs/scripts/step_profile.py traces a few steps).
  """
  if warmup_steps < 1 or steps < 1:
    raise ValueError(f"warmup_steps and steps must be >= 1, got "
                     f"{warmup_steps} and {steps}")
  trainer_settings = settings.TrainerSettings(
      dataset=spec.name, model=model_name, batch_size=case.batch_size,
      epochs=1, step=settings.StepOptions(
          cowclip=case.cowclip, embedding_update=case.embedding_update),
      model_options=dataclasses.replace(options, precision=case.precision),
      auto_hparams=False, distribution=case.distribution,
      cpu_devices=len(tf.config.list_logical_devices("CPU")))
  split = _training_data(data, spec.label, case.batch_size)
  if case.batch_size > split.train_examples:
    raise ValueError(f"batch size {case.batch_size} is larger than the "
                     f"{split.train_examples} benchmark training rows; use "
                     "more --rows")
  train = split.train
  if case.input == "fixed":
    train = train.take(FIXED_BATCHES).cache()
  clock = callbacks_lib.ThroughputLogger(case.batch_size,
                                    warmup_steps=warmup_steps)
  model, record = trainer.train(
      plan_lib.resolve(trainer_settings, {}, split.train_examples),
      dataclasses.replace(split, train=train.repeat()),
      data.tf_transform_output, seed=0, epoch_steps=warmup_steps + steps,
      vocab_scale=case.vocab_scale, callbacks=[clock, *callbacks], verbose=0)
  step = clock.timed_seconds / clock.timed_steps
  cpu_step = clock.timed_cpu_seconds / clock.timed_steps
  rate = clock.timed_steps * case.batch_size / clock.timed_seconds
  result = {"model": model_name, "batch_size": case.batch_size,
            "precision": record["model_options"]["precision"],
            "embedding_update": case.embedding_update,
            "cowclip": case.cowclip, "vocab_scale": case.vocab_scale,
            "vocab_rows": sum(record["vocab_sizes"].values()),
            "distribution": record["distribution"]["strategy"],
            "replicas": record["distribution"]["replicas"],
            "steps": clock.timed_steps,
            "seconds_per_step": step, "cpu_seconds_per_step": cpu_step,
            "examples_per_second": rate,
            "gflops_per_second": mlp_flops_per_example(model) * rate / 1e9,
            "matmul_peak_gflops": matmul_peak, "input": case.input,
            "input_share": input_seconds(split.train, steps) / cpu_step}
  if result["replicas"] > 1:
    # The parts below are timed on one device; here the collectives are.
    result["collective_share"] = collective_seconds(
        model, case.batch_size, min(steps, 10)) / cpu_step
  elif components:
    batch_features, _ = next(iter(split.train))
    parts = component_seconds(model, batch_features, min(steps, 10))
    result.update({f"{name}_share": parts[name] / cpu_step
                   for name in COMPONENTS})
  return result


def run_benchmark(dataset: str, model_name: str, batch_sizes: Sequence[int],
                  data_path: Optional[str] = None, rows: int = DEFAULT_ROWS,
                  min_frequency: Optional[int] = None,
                  vocab_scale: int = DEFAULT_VOCAB_SCALE,
                  options: models.ModelOptions = models.ModelOptions(),
                  warmup_steps: int = 3, steps: int = 20,
                  seed: int = 1,
                  precisions: Sequence[str] = (precision_lib.AUTO,),
                  components: bool = True,
                  work_dir: Optional[str] = None,
                  distribution_: str = "none",
                  inputs: Sequence[str] = ("pipeline",)
                 ) -> List[Dict[str, object]]:
  """Times every case of benchmark_cases; one result dict per case.

  Args:
    dataset: 'criteo' or 'avazu'.
    model_name: one of models.MODELS.
    batch_sizes: batch sizes to time.
    data_path: raw file of the dataset's layout; None: generate ``rows``
      rows with ``seed`` into a temporary directory.
    rows: rows to generate when no data_path is given.
    min_frequency: vocabulary threshold (None: the dataset's for the data's
      size, as `run` and `study` resolve it, so that a benchmark of a
      study's data trains on the study's vocabulary and reuses its
      Transform).
    vocab_scale: factor of the larger-vocabulary cases (1: none).
    options: model architecture (its precision is each case's).
    warmup_steps: untimed steps first (>= 1: the first step traces).
    steps: timed steps per case.
    seed: seed of the generated rows.
    precisions: models.PRECISIONS to time.
    components: also time the parts of each step (component_seconds).
    work_dir: where ingestion and Transform write (kept: a re-run on the
      same file and threshold reuses them); None: a temporary directory.
    distribution_: settings.DISTRIBUTIONS: also time each case this way
      (its collectives' share instead of the parts).
    inputs: some of INPUTS: each case with each input.
  """
  spec = features.get_spec(dataset)
  if not batch_sizes or any(b <= 0 for b in batch_sizes):
    raise ValueError(f"batch sizes must be positive, got {batch_sizes}")
  if vocab_scale < 1:
    raise ValueError(f"vocab_scale must be >= 1, got {vocab_scale}")
  if not inputs or set(inputs) - set(INPUTS):
    raise ValueError(f"inputs must be some of {INPUTS}, got {list(inputs)}")
  unknown = sorted(set(precisions) - set(models.PRECISIONS))
  if not precisions or unknown:
    raise ValueError(f"precisions must be some of {models.PRECISIONS}, got "
                     f"{list(precisions)}")
  distribution_ = distribution.resolve(distribution_)
  with tempfile.TemporaryDirectory() as tmp:
    work = work_dir or tmp
    path = data_path
    if path is None:
      path = os.path.join(work, "raw", f"{spec.name}.txt")
      os.makedirs(os.path.dirname(path), exist_ok=True)
      generate.write_synthetic(spec.name, rows, seed, path)
    data = transform(spec, path, min_frequency,
                     os.path.join(work, "pipeline"))
    peaks = {p: matmul_peak_gflops(p) for p in precisions}
    return [time_training_step(model_name, spec, data, case, options,
                               warmup_steps, steps, peaks[case.precision],
                               components)
            for case in benchmark_cases(batch_sizes, vocab_scale,
                                        precisions, distribution_, inputs)]


def format_table(results: Sequence[Mapping[str, object]]) -> str:
  """A fixed-width text table of benchmark results (shares in %)."""
  header = ("model", "batch", "precision", "update", "cowclip", "vocab",
            "vocab rows", "devices", "input", "s/step", "examples/s",
            "GFLOP/s", "peak", "mlp%", "emb%", "opt%", "clip%", "coll%",
            "in%")
  row = ("{:<7} {:>6} {:<14} {:<7} {:<7} {:>5} {:>10} {:>12} {:<8} {:>8} "
         "{:>11} {:>7} {:>5} {:>4} {:>4} {:>4} {:>5} {:>5} {:>4}")
  lines = [row.format(*header)]
  for r in results:
    shares = [f"{100 * r[f'{name}_share']:.0f}" if f"{name}_share" in r
              else "-" for name in COMPONENTS + ("collective", "input")]
    lines.append(row.format(
        r["model"], r["batch_size"], r["precision"], r["embedding_update"],
        "on" if r["cowclip"] else "off", f"x{r['vocab_scale']}",
        f"{r['vocab_rows']:,}", f"{r['distribution']} x{r['replicas']}",
        r["input"], f"{r['seconds_per_step']:.4f}",
        f"{r['examples_per_second']:,.0f}", f"{r['gflops_per_second']:.1f}",
        "-" if r["matmul_peak_gflops"] is None else
        f"{r['matmul_peak_gflops']:.0f}", *shares))
  return "\n".join(lines)


def write_csv(results: Sequence[Mapping[str, object]], path: str) -> None:
  """Writes the results with the COLUMNS header."""
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  with open(path, "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=COLUMNS, restval="")
    writer.writeheader()
    writer.writerows(results)


def main(args: argparse.Namespace) -> int:
  """Runs the benchmark from parsed flags, prints the table, writes the CSV."""
  if args.stage == "data":
    return data_benchmark.main(args)
  trainer_settings = flags.settings_from_args(
      args, settings.TrainerSettings, dataset=args.dataset)
  ingestion = flags.settings_from_args(args, config_lib.IngestionSettings)
  results = run_benchmark(
      args.dataset, trainer_settings.model, args.batch_sizes,
      data_path=args.data, rows=args.rows,
      min_frequency=ingestion.min_frequency, vocab_scale=args.vocab_scale,
      options=trainer_settings.model_options,
      warmup_steps=args.warmup_steps, steps=args.steps,
      precisions=args.precisions, components=args.components,
      work_dir=args.work_dir, distribution_=trainer_settings.distribution,
      inputs=args.inputs)
  print(format_table(results))
  if args.output:
    write_csv(results, args.output)
    print(f"wrote {args.output}")
  return 0
