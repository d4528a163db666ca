"""Test-wide setup: Keras 3, as every entry point decides (keras_version);
fixtures several rooms' tests share."""

import json
import os

import pytest

from trainer_module import keras_version

keras_version.pin_keras3()

CRITEO_EXAMPLE_ROWS = 3000

# How `make test` spreads the files over its workers (pytest-xdist, `--dist
# loadfile`, with the scheduler below): a file's tests run on one worker,
# so its module fixtures run once; files that share a session fixture run
# on one worker too, so that it is built once (it is built once per worker
# that uses it). xdist orders the units by their number of tests, so the
# few-test pipeline files run beside the many-test unit files: started
# longest first instead, the pipeline tests ran beside each other and the
# suite took 17% longer (docs/tests.md, fifth round).
SHARED_FIXTURE_GROUPS = {
    "tests/commands/experiments/test_study.py": "criteo_study_dir",
    "tests/commands/experiments/test_benchmark.py": "criteo_study_dir",
    "tests/components/test_statistics_gen.py": "criteo_examples",
    "tests/components/test_tf_example_reader.py": "criteo_examples",
    "tests/components/test_transform.py": "criteo_examples",
    "tests/trainer_module/test_determinism.py": "criteo_examples",
}


@pytest.hookimpl(optionalhook=True)  # An xdist hook: pytest -p no:xdist too.
def pytest_xdist_make_scheduler(config, log):
  """`--dist loadfile`, a unit of work being a file or a group of files
  (SHARED_FIXTURE_GROUPS). xdist's own groups (`--dist loadgroup`) rename
  the tests, which pytest 9 no longer allows."""
  if config.getvalue("dist") != "loadfile":
    return None
  # pylint: disable=g-import-not-at-top
  from xdist.scheduler import LoadFileScheduling
  # pylint: enable=g-import-not-at-top

  class WorkerGroupScheduling(LoadFileScheduling):

    def _split_scope(self, nodeid: str) -> str:
      path = nodeid.split("::")[0]
      return SHARED_FIXTURE_GROUPS.get(path, path)

  return WorkerGroupScheduling(config, log)


@pytest.fixture(autouse=True)
def float32_on_every_machine(monkeypatch):
  """`--precision auto` resolves to float32 in every test: a test's numbers
  must not depend on the machine's cores (auto picks mixed_bfloat16 where
  bf16 matmuls are fast). test_precision tests the real probe
  (precision.measure); the scripts tests run in their own processes set
  their precision."""
  # pylint: disable=g-import-not-at-top
  from trainer_module import precision
  # pylint: enable=g-import-not-at-top
  monkeypatch.setattr(precision, "probe", lambda: {
      "float32_gflops": 1.0, "bfloat16_gflops": 1.0, "bf16_speedup": 1.0,
      "probe_seconds": 0.0})


def generated_examples(root, rows: int, seed: int):
  """RawCtrExampleGen's output (an Examples artifact under `root`) for
  `rows` generated Criteo rows of `seed`."""
  # After pin_keras3: these import TensorFlow.
  # pylint: disable=g-import-not-at-top
  from tfx.types import standard_artifacts
  from commands.synthetic import generate
  from components.raw_example_gen import component as example_gen
  from components.raw_example_gen import executor as example_gen_executor
  # pylint: enable=g-import-not-at-top
  generate.write_synthetic("criteo", rows, seed,
                           str(root / "in" / "train.txt"))
  gen = example_gen.RawCtrExampleGen(input_base=str(root / "in"),
                                     dataset="criteo")
  artifact = standard_artifacts.Examples()
  artifact.uri = str(root / "examples")
  example_gen_executor.Executor().Do({}, {"examples": [artifact]},
                                     dict(gen.exec_properties))
  return artifact


@pytest.fixture(scope="session")
def criteo_examples(tmp_path_factory):
  """RawCtrExampleGen's output for CRITEO_EXAMPLE_ROWS generated Criteo
  rows: one ExampleGen run for every test that reads it (none writes)."""
  return generated_examples(tmp_path_factory.mktemp("criteo_examples"),
                            CRITEO_EXAMPLE_ROWS, 5)


@pytest.fixture(scope="session")
def criteo_transform(criteo_examples, tmp_path_factory):
  """The directory of our Transform executor's output (run_transform) of
  criteo_examples: one run for every test that reads it (none writes)."""
  # pylint: disable=g-import-not-at-top
  from components import transform
  # pylint: enable=g-import-not-at-top
  directory = tmp_path_factory.mktemp("criteo_transform")
  run_transform(transform.Executor, criteo_examples, directory)
  return str(directory)


# The study and benchmark tests' data: generated Criteo rows of seed 1,
# ingested and transformed at this vocabulary threshold.
STUDY_ROWS = 3000
STUDY_MIN_FREQUENCY = 3


@pytest.fixture(scope="session")
def criteo_study_dir(tmp_path_factory):
  """(data DIR, work DIR): STUDY_ROWS generated Criteo rows, and a work DIR
  whose pipeline DIR, work/pipeline (`benchmark --work-dir`'s layout),
  holds their ExampleGen and Transform, run once as `study` and
  `benchmark` run them (commands.experiments.study_data.transform_once). A study given
  `--data` and `--output work/pipeline`, or a benchmark given `--data` and
  `--work-dir work`, finds them in the cache instead of re-running them.
  The study tests keep their results apart (`study --results`), so none
  sees another's."""
  # pylint: disable=g-import-not-at-top
  from commands.synthetic import generate
  from commands.experiments import study_data
  from pipeline.config import PipelineConfig
  # pylint: enable=g-import-not-at-top
  root = tmp_path_factory.mktemp("criteo_study")
  data = root / "data"
  generate.write_synthetic("criteo", STUDY_ROWS, 1, str(data / "train.txt"))
  study_data.transform_once(PipelineConfig.from_fields(
      dataset="criteo", data=str(data), output=str(root / "pipeline"),
      min_frequency=STUDY_MIN_FREQUENCY))
  return data, root


CRITEO_SCHEMA_DIR = os.path.join(os.path.dirname(__file__), "..", "schema",
                                 "criteo")


def run_transform(executor_class, examples, out_dir):
  """A Transform executor's Do on Criteo `examples` with the pipeline's
  Transform settings (vocabulary threshold 2); returns the graph's
  TFTransformOutput."""
  # pylint: disable=g-import-not-at-top
  import tensorflow_transform as tft
  from tfx.types import standard_artifacts
  from tfx.types import standard_component_specs as specs
  # pylint: enable=g-import-not-at-top
  schema = standard_artifacts.Schema()
  schema.uri = CRITEO_SCHEMA_DIR
  graph = standard_artifacts.TransformGraph()
  graph.uri = str(out_dir)
  executor_class().Do(
      {specs.EXAMPLES_KEY: [examples], specs.SCHEMA_KEY: [schema]},
      {specs.TRANSFORM_GRAPH_KEY: [graph]},
      {specs.PREPROCESSING_FN_KEY:
           "trainer_module.preprocessing.preprocessing_fn",
       specs.CUSTOM_CONFIG_KEY: json.dumps({"dataset": "criteo",
                                            "min_frequency": 2}),
       specs.DISABLE_STATISTICS_KEY: 1})
  return tft.TFTransformOutput(graph.uri)


def split_records(examples, split: str) -> list:
  """The serialized records of one split of an Examples artifact."""
  import glob  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  files = sorted(glob.glob(os.path.join(examples.uri, f"Split-{split}",
                                        "*.gz")))
  return [r.numpy() for r in tf.data.TFRecordDataset(
      files, compression_type="GZIP")]


def run_command(*args) -> tuple:
  """`python -m pipeline ARGS` in a subprocess, as a user runs it:
  (exit code, stdout, stderr)."""
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  done = subprocess.run(
      [sys.executable, "-m", "pipeline", *map(str, args)],
      capture_output=True, text=True, check=False,
      cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  return done.returncode, done.stdout, done.stderr
