"""A/B timing of one data-path executor, CPU seconds around its Do() only.

Run it with the code under test first on PYTHONPATH, e.g.:
  PYTHONPATH=/work/main .venv/bin/python docs/scripts/data_ab.py examplegen RAW OUT
  PYTHONPATH=. .venv/bin/python docs/scripts/data_ab.py examplegen RAW OUT
  PYTHONPATH=. .venv/bin/python docs/scripts/data_ab.py transform EXAMPLEGEN_OUT OUT \
      [MIN_FREQUENCY [stats|analyze-only [tfx]]]
  PYTHONPATH=. .venv/bin/python docs/scripts/data_ab.py statistics EXAMPLEGEN_OUT OUT \
      [STATS_OPTIONS_JSON [tfx]]
On a shared machine CPU seconds compare; wall seconds mostly measure the queue.
"""

import json
import os
import resource
import shutil
import sys
import time

from tfx.types import artifact_utils
from tfx.types import standard_artifacts
from tfx.types import standard_component_specs as specs

# DATA_AB_BEAM_ARGS (space-separated) replaces them, e.g. to try another
# direct_running_mode.
_BEAM_ARGS = os.environ.get("DATA_AB_BEAM_ARGS", "").split() or [
    "--runner=FnApiRunner", "--direct_running_mode=in_memory",
    "--direct_num_workers=1"]
_SCHEMA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                           "..", "schema", "criteo")


def cpu_seconds() -> float:
  own = resource.getrusage(resource.RUSAGE_SELF)
  children = resource.getrusage(resource.RUSAGE_CHILDREN)
  return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _examplegen(raw: str, out: str):
  from components.raw_example_gen import component, executor  # pylint: disable=g-import-not-at-top
  gen = component.RawCtrExampleGen(
      input_base=os.path.dirname(os.path.abspath(raw)),
      input_pattern=os.path.basename(raw), dataset="criteo")
  examples = standard_artifacts.Examples()
  examples.uri = out
  run = executor.Executor(executor.Executor.Context(
      beam_pipeline_args=_BEAM_ARGS, tmp_dir=os.path.join(out, ".tmp"),
      unique_id="ab"))
  return (lambda: run.Do({}, {"examples": [examples]},
                         dict(gen.exec_properties)),
          lambda: examples.get_int_custom_property("rows_read"))


def _split_examples(uri: str):
  """ExampleGen's output at `uri`, as an Examples artifact."""
  examples = standard_artifacts.Examples()
  examples.uri = uri
  examples.split_names = artifact_utils.encode_split_names(["train", "eval"])
  return examples


def _transform(examples_uri: str, out: str, min_frequency: str = "10",
               mode: str = "", executor_of: str = "pipeline"):
  """The pipeline's Transform executor ('tfx': TFX's own, which reads with
  Beam and tfx_bsl), with disable_statistics as the pipeline sets it.
  mode 'stats': TFX's pre- and post-transform statistics too (the component's
  default); 'analyze-only': no transformed examples, as
  Transform(materialize=False)."""
  # pylint: disable=g-import-not-at-top
  if executor_of == "tfx":
    from tfx.components.transform import executor
  else:
    from components import transform as executor  # pylint: disable=reimported
  examples = _split_examples(examples_uri)
  schema = standard_artifacts.Schema()
  schema.uri = _SCHEMA_DIR
  graph = standard_artifacts.TransformGraph()
  graph.uri = os.path.join(out, "graph")
  transformed = standard_artifacts.Examples()
  transformed.uri = os.path.join(out, "examples")
  outputs = {specs.TRANSFORM_GRAPH_KEY: [graph]}
  if mode != "analyze-only":
    outputs[specs.TRANSFORMED_EXAMPLES_KEY] = [transformed]
  if mode == "stats":
    for key, kind in (
        (specs.PRE_TRANSFORM_STATS_KEY, standard_artifacts.ExampleStatistics),
        (specs.PRE_TRANSFORM_SCHEMA_KEY, standard_artifacts.Schema),
        (specs.POST_TRANSFORM_ANOMALIES_KEY,
         standard_artifacts.ExampleAnomalies),
        (specs.POST_TRANSFORM_STATS_KEY, standard_artifacts.ExampleStatistics),
        (specs.POST_TRANSFORM_SCHEMA_KEY, standard_artifacts.Schema)):
      artifact = kind()
      artifact.uri = os.path.join(out, key)
      outputs[key] = [artifact]
  run = executor.Executor(executor.Executor.Context(
      beam_pipeline_args=_BEAM_ARGS, tmp_dir=os.path.join(out, ".tmp"),
      unique_id="ab"))
  with open(os.path.join(examples_uri, "raw_example_gen_summary.json")) as f:
    rows = json.load(f)["rows_read"]
  return (lambda: run.Do(
      {specs.EXAMPLES_KEY: [examples], specs.SCHEMA_KEY: [schema]},
      outputs,
      {specs.PREPROCESSING_FN_KEY:
           "trainer_module.preprocessing.preprocessing_fn",
       specs.CUSTOM_CONFIG_KEY: json.dumps({"dataset": "criteo",
                                            "min_frequency":
                                                int(min_frequency)}),
       specs.DISABLE_STATISTICS_KEY: int(mode != "stats")}),
          lambda: rows)


def _statistics(examples_uri: str, out: str, options_json: str = "",
                executor_of: str = "pipeline"):
  """The pipeline's StatisticsGen executor ('tfx': TFX's own, which samples
  after decoding); options_json: a tfdv.StatsOptions as JSON (empty: TFDV's
  defaults)."""
  # pylint: disable=g-import-not-at-top
  import tensorflow_data_validation as tfdv
  if executor_of == "tfx":
    from tfx.components.statistics_gen.executor import Executor
  else:
    from components.statistics_gen import Executor  # pylint: disable=reimported
  examples = _split_examples(examples_uri)
  statistics = standard_artifacts.ExampleStatistics()
  statistics.uri = out
  run = Executor(Executor.Context(
      beam_pipeline_args=_BEAM_ARGS, tmp_dir=os.path.join(out, ".tmp"),
      unique_id="ab"))
  with open(os.path.join(examples_uri, "raw_example_gen_summary.json")) as f:
    rows = json.load(f)["rows_read"]
  properties = {specs.EXCLUDE_SPLITS_KEY: "[]",
                specs.STATS_OPTIONS_JSON_KEY: options_json or
                tfdv.StatsOptions().to_json()}
  return (lambda: run.Do({specs.EXAMPLES_KEY: [examples]},
                         {specs.STATISTICS_KEY: [statistics]}, properties),
          lambda: rows)


def main(stage: str, source: str, out: str, *options: str) -> None:
  shutil.rmtree(out, ignore_errors=True)
  do, rows = {"examplegen": _examplegen, "transform": _transform,
              "statistics": _statistics}[stage](source, out, *options)
  cpu, wall = cpu_seconds(), time.time()
  do()
  cpu, wall = cpu_seconds() - cpu, time.time() - wall
  print(f"{stage}: rows {rows()} cpu_s {cpu:.1f} rows_per_cpu_s "
        f"{rows() / cpu:.0f} wall_s {wall:.1f} max_rss_MB "
        f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f}")


if __name__ == "__main__":
  main(*sys.argv[1:])
