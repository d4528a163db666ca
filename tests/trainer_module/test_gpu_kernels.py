"""The train and test steps on a GPU, checked on a machine without one.

The installed TensorFlow is the CUDA build: it registers its GPU kernels
(and, once XLA has compiled something, its XLA_GPU_JIT kernels) with or
without a GPU. These tests trace the real steps (Keras' train and test
functions over training.Step.train_step/test_step; on one device, and
mirrored over two with NCCL all-reduces, as MirroredStrategy builds it over
GPUs: mirrored_gpu_kernels.py) and look every op of the graph up in the
kernel registry, inside nested functions, gradient functions
and loop bodies too, the way the runtime does (the node's dtypes must match
a kernel's type constraints; a DEVICE_DEFAULT kernel serves any device). An
op without a GPU kernel would run on the host, with a copy each way per step,
and fail outright with soft placement off.

Found with TensorFlow 2.16.2: every op of every step below has a GPU kernel,
and every op of the XLA steps an XLA_GPU_JIT kernel. The GPU kernels that
compute on the host are int32 shape arithmetic (StridedSlice, Range, Pack,
ConcatV2, AddN, Fill, Maximum, Sub, FloorDiv, FloorMod, GreaterEqual, Const),
and the tests hold them to int32: TensorFlow keeps int32 tensors in host
memory on a GPU, so they cost no copy.
Unique's GPU kernel (one per field and step) copies its output size to the
host before it allocates its output, as an op with a data-dependent shape
must.
What a registry cannot tell: whether the kernels compile and run on a real
GPU, and how fast (kubeflow/README.md, section 4).
"""

import dataclasses
import os
from typing import Dict, Iterator, List, Set, Tuple

import keras
import numpy as np
import pytest
import tensorflow as tf
# The registry lookup the runtime's placer does, with type constraints.
from tensorflow.python.util import _pywrap_kernel_registry

import script_output
# The small model and config of the training step's own tests.
from test_training import CONFIG, DENSE, OPTIONS, VOCAB
from trainer_module import models
from trainer_module import settings
from trainer_module import training

pytestmark = pytest.mark.skipif(
    not tf.test.is_built_with_cuda(),
    reason="needs TensorFlow's CUDA build, which registers the GPU kernels")

# Node attributes that name the functions a node calls (calls, loops, ifs).
FUNCTION_ATTRS = ("f", "body", "cond", "then_branch", "else_branch",
                  "branches")
DEEP_MODELS = tuple(m for m in models.MODELS
                    if m != models.LOGISTIC_REGRESSION)
HERE = os.path.dirname(os.path.abspath(__file__))


def nodes(function) -> Tuple[List[Tuple[str, tf.compat.v1.NodeDef]],
                              Dict[str, object]]:
  """(every (function name, node) of a concrete function's graph and its
  function library, the library by name); the graph's own nodes are
  named "<graph>"."""
  graph = function.graph.as_graph_def()
  library = {f.signature.name: f for f in graph.library.function}
  return ([("<graph>", node) for node in graph.node] +
          [(name, node) for name, f in library.items()
           for node in f.node_def]), library


def _called(node) -> Iterator[str]:
  """The names of the functions ``node`` calls."""
  for attr in FUNCTION_ATTRS:
    if attr in node.attr:
      value = node.attr[attr]
      if value.HasField("func"):
        yield value.func.name
      else:
        yield from (f.name for f in value.list.func)


def kernel(node, device: str) -> str:
  """The class of the kernel ``node`` gets on ``device`` ('' if none)."""
  placed = tf.compat.v1.NodeDef()
  placed.CopyFrom(node)
  placed.device = f"/device:{device}:0"
  return _pywrap_kernel_registry.TryFindKernelClass(
      placed.SerializeToString()).decode()


def without_gpu_kernel(function) -> Dict[str, Set[str]]:
  """op type -> the functions in which it has no GPU kernel."""
  graph_nodes, library = nodes(function)
  missing = {}
  for name, node in graph_nodes:
    if node.op not in library and not kernel(node, "GPU"):
      missing.setdefault(node.op, set()).add(name)
  return missing


def on_the_host(function) -> Dict[str, Set[str]]:
  """op type -> the dtypes of its nodes whose GPU kernel computes on the
  host (a CPUDevice kernel registered for GPU, or a host constant)."""
  graph_nodes, library = nodes(function)
  host = {}
  for _, node in graph_nodes:
    if node.op in library:
      continue
    found = kernel(node, "GPU")
    if "CPUDevice" in found or found.startswith("_Host"):
      attr = next(a for a in ("T", "dtype", "Tidx") if a in node.attr)
      host.setdefault(node.op, set()).add(
          tf.as_dtype(node.attr[attr].type).name)
  return host


def without_xla_gpu_kernel(function) -> Dict[str, Set[str]]:
  """op type -> the XLA-compiled functions in which it has no XLA_GPU_JIT
  kernel. Raises if the graph compiles nothing with XLA."""
  graph_nodes, library = nodes(function)
  compiled = []
  for _, node in graph_nodes:
    if node.attr["_XlaMustCompile"].b:
      compiled.extend(_called(node))
  if not compiled:
    raise AssertionError("no function of the graph is XLA-compiled")
  seen = set()
  while compiled:
    name = compiled.pop()
    if name in seen:
      continue
    seen.add(name)
    for node in library[name].node_def:
      compiled.extend(_called(node))
  missing = {}
  for name in seen:
    for node in library[name].node_def:
      if node.op not in library and not kernel(node, "XLA_GPU_JIT"):
        missing.setdefault(node.op, set()).add(name)
  return missing


@pytest.fixture(scope="module", autouse=True)
def xla_kernels_registered():
  """XLA registers its JIT kernels the first time it compiles."""
  tf.function(lambda x: x + 1, jit_compile=True)(tf.constant(1.0))


def _data(weighted: bool) -> tf.data.Dataset:
  """One batch as the input pipeline gives it: int64 ids, float dense
  features, float labels (and importance weights)."""
  rng = np.random.default_rng(0)
  features = {"a": rng.integers(0, VOCAB["a"], 8),
              "b": rng.integers(0, VOCAB["b"], 8),
              "x": rng.normal(size=8).astype(np.float32)}
  batch = (features, (features["a"] % 2).astype(np.float32))
  if weighted:
    batch += (rng.uniform(1, 3, 8).astype(np.float32),)
  return tf.data.Dataset.from_tensors(batch)


def steps(name: str, options=OPTIONS, weighted: bool = False,
          strategy=None, **config):
  """The concrete train and test functions Keras' fit and evaluate run for
  model ``name`` compiled with CONFIG updated by ``config`` (its step's
  options among them; in ``strategy``'s scope, on its distributed input, if
  given)."""
  strategy = strategy or tf.distribute.get_strategy()
  with strategy.scope():
    keras.utils.set_random_seed(0)
    model = models.build_model(name, VOCAB, DENSE, options)
    step = {k: config.pop(k) for k in list(config)
            if k in settings.StepOptions.__dataclass_fields__}
    training.compile_model(model, dataclasses.replace(
        CONFIG, step=dataclasses.replace(CONFIG.step, **step), **config))
  model.make_train_function()
  model.make_test_function()
  iterator = iter(strategy.experimental_distribute_dataset(_data(weighted)))
  return (model.train_function.get_concrete_function(iterator),
          model.test_function.get_concrete_function(iterator))


# The logistic regression has no deep tables to clip.
@pytest.mark.parametrize("name,cowclip", [
    (name, cowclip) for name in models.MODELS for cowclip in (True, False)
    if name in DEEP_MODELS or not cowclip])
@pytest.mark.parametrize("update", settings.EMBEDDING_UPDATES)
def test_every_op_of_the_steps_has_a_gpu_kernel(name, update, cowclip):
  for function in steps(name, embedding_update=update, cowclip=cowclip):
    assert without_gpu_kernel(function) == {}
    # TensorFlow keeps int32 tensors on the host: they need no copy.
    assert set().union(*on_the_host(function).values()) <= {"int32"}


@pytest.mark.parametrize("update", settings.EMBEDDING_UPDATES)
@pytest.mark.parametrize("name", DEEP_MODELS)
def test_every_option_of_the_step_has_a_gpu_kernel(name, update):
  """Importance weights, bfloat16, SmeLU, the reference CowClip: each adds
  ops of its own."""
  options = dataclasses.replace(OPTIONS, precision="mixed_bfloat16",
                                activation="smelu")
  for function in steps(
      name, options, weighted=True, embedding_update=update,
      cowclip_variant="reference"):
    assert without_gpu_kernel(function) == {}
    assert set().union(*on_the_host(function).values()) <= {"int32"}


@pytest.mark.parametrize("name", DEEP_MODELS)
def test_every_op_of_the_xla_steps_has_an_xla_gpu_kernel(name):
  for function in steps(name, embedding_update="dense", jit_compile=True):
    assert without_xla_gpu_kernel(function) == {}
    assert without_gpu_kernel(function) == {}  # The input, outside XLA.


@pytest.fixture(scope="module")
def mirrored():
  """mirrored_gpu_kernels.py's results (its own process)."""
  return script_output.json_of(os.path.join(HERE, "mirrored_gpu_kernels.py"))


@pytest.mark.parametrize("case", ["dense", "sparse", "sparse-weighted"])
def test_every_op_of_the_mirrored_steps_has_a_gpu_kernel(mirrored, case):
  """The graph MirroredStrategy builds over GPUs: its sums and gathers are
  NCCL all-reduces."""
  for function in ("train", "test"):
    result = mirrored[case][function]
    assert result["collectives"] == ["NcclAllReduce"]
    assert result["without_gpu_kernel"] == {}
    assert set(result["on_the_host"]) <= {"int32"}


def test_a_gpu_does_not_turn_xla_on(monkeypatch):
  """The default step on a GPU is the kernel-checked one above."""
  gpu = tf.config.PhysicalDevice("/physical_device:GPU:0", "GPU")
  monkeypatch.setattr(tf.config, "list_physical_devices",
                      lambda kind=None: [gpu])
  for update in settings.EMBEDDING_UPDATES:
    model = models.build_model("deepfm", VOCAB, DENSE, OPTIONS)
    training.compile_model(model, dataclasses.replace(
        CONFIG, step=settings.StepOptions(embedding_update=update)))
    assert model.jit_compile is False


def _host_only_ops():
  """A step with three ops that have no GPU kernel: a string hash, an int64
  matmul (GPU MatMul is float only) and a Python function, inside a nested
  function and a while loop's body."""

  @tf.function
  def inner(ids):
    return tf.matmul(ids, ids)

  @tf.function(jit_compile=True)
  def step(words, ids):
    hashed = tf.strings.to_hash_bucket_fast(words, 10)
    total = tf.while_loop(
        lambda i, t: i < 3,
        lambda i, t: (i + 1, t + tf.reshape(tf.numpy_function(
            lambda v: v, [tf.reduce_sum(inner(ids))], tf.int64), [])),
        (tf.constant(0), tf.constant(0, tf.int64)))[1]
    return total + tf.reduce_sum(hashed)

  return tf.function(step).get_concrete_function(
      tf.TensorSpec([None], tf.string), tf.TensorSpec([2, 2], tf.int64))


def test_the_check_finds_ops_without_a_gpu_kernel():
  missing = without_gpu_kernel(_host_only_ops())
  assert set(missing) == {"StringToHashBucketFast", "MatMul", "PyFunc"}
  # Each in its own function: the body of the loop, the nested function.
  assert len(set().union(*missing.values())) == 3
  # The loop counter's int32 add has a GPU kernel that runs on the host.
  assert on_the_host(_host_only_ops())["AddV2"] == {"int32"}


def test_the_xla_check_finds_ops_without_an_xla_gpu_kernel():
  missing = without_xla_gpu_kernel(_host_only_ops())
  assert {"StringToHashBucketFast", "PyFunc"} <= set(missing)
  with pytest.raises(AssertionError, match="XLA-compiled"):
    without_xla_gpu_kernel(steps("deepfm", jit_compile=False)[0])
