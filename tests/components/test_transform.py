"""Transform reading with TensorFlow gives what TFX's Transform gives."""

import inspect
import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_transform as tft
from tfx.components.transform import executor as tfx_executor
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils

from components import transform
from components.tf_example_reader import TensorFlowExampleRecord
from conftest import CRITEO_SCHEMA_DIR as _SCHEMA_DIR
from conftest import run_transform as _run
from conftest import split_records
from trainer_module import features

@pytest.fixture(name="outputs", scope="module")
def _outputs(criteo_examples, criteo_transform, tmp_path_factory):
  root = tmp_path_factory.mktemp("transform")
  return (_run(tfx_executor.Executor, criteo_examples, root / "tfx"),
          tft.TFTransformOutput(criteo_transform))


@pytest.mark.slow
def test_vocabulary_files_are_tfx_transforms_byte_for_byte(outputs):
  tfx_output, ours = outputs
  tfx_assets = sorted(os.listdir(os.path.join(
      tfx_output.transform_savedmodel_dir, "assets")))
  # A vocabulary per categorical field and per count's bucket ids.
  assert len(tfx_assets) == len(features.CRITEO.linear_features) == 39
  assert sorted(os.listdir(os.path.join(
      ours.transform_savedmodel_dir, "assets"))) == tfx_assets
  for name in tfx_assets:
    with open(tfx_output.vocabulary_file_by_name(name), "rb") as a, \
        open(ours.vocabulary_file_by_name(name), "rb") as b:
      assert a.read() == b.read(), name


@pytest.mark.slow
def test_graphs_transform_every_example_alike(outputs, criteo_examples):
  """Both graphs map every record of both splits to the same features
  (the dense features' analysed ranges included)."""
  tfx_output, ours = outputs
  assert ours.raw_feature_spec() == tfx_output.raw_feature_spec()
  for split in ("train", "eval"):
    raw = tf.io.parse_example(split_records(criteo_examples, split),
                              tfx_output.raw_feature_spec())
    expected = tfx_output.transform_raw_features(raw,
                                                 drop_unused_features=True)
    got = ours.transform_raw_features(raw, drop_unused_features=True)
    assert sorted(got) == sorted(expected)
    for name, tensor in expected.items():
      np.testing.assert_array_equal(got[name].numpy(), tensor.numpy(),
                                    err_msg=name)


def test_tfx_do_creates_the_processor_the_executor_swaps():
  # The executor's only hook: TFX's Do creating TransformProcessor by the
  # module's name. If an upgrade changed that, the swap would be silently
  # ignored and only the benchmark would notice.
  assert "TransformProcessor().Transform(" in inspect.getsource(
      tfx_executor.Executor.Do)


@pytest.mark.slow
def test_the_processor_reads_with_tensorflow_and_is_swapped_back(
    criteo_examples, tmp_path):
  dataset = tfx_executor._Dataset(  # pylint: disable=protected-access
      os.path.join(artifact_utils.get_split_uri([criteo_examples], "train"),
                   "*"),
      "tfrecords_gzip", example_gen_pb2.FORMAT_TF_EXAMPLE,
      None, None)
  schema = transform.TensorFlowReadProcessor()._GetSchema(
      os.path.join(_SCHEMA_DIR, "schema.pbtxt"))  # pylint: disable=protected-access
  assert isinstance(
      transform.TensorFlowReadProcessor()._CreateTFXIO(dataset, schema),  # pylint: disable=protected-access
      TensorFlowExampleRecord)
  # TFX's own name is back after a Do, even one that fails.
  with pytest.raises(Exception):
    transform.Executor().Do({}, {}, {})
  assert tfx_executor.TransformProcessor is not \
      transform.TensorFlowReadProcessor
