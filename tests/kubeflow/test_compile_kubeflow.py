"""compile-kubeflow: the KFP v2 spec it writes, and kubeflow/Dockerfile.

The spec is compiled offline through the CLI handler and read back as YAML,
the way the KFP API server reads it.
"""

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
from typing import Dict, List, Tuple

import pytest
import yaml

from commands.cli import beam_flags
from commands.cli import kubeflow_flags
from commands.runs import kfp
from kubeflow import compiler
from kubeflow import run_compiled
from pipeline import config as config_lib
from pipeline import pipeline as pipeline_lib

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
IMAGE = "europe-docker.pkg.dev/proj/ml/cowclip-ctr:1.0"
ROOT = "gs://bucket/cowclip"
DATAFLOW = ["--beam-runner", "dataflow", "--project", "proj",
            "--region", "europe-west4"]
ARGS = ["--dataset", "criteo", "--data", "gs://bucket/criteo/",
        "--pipeline-root", ROOT, "--image", IMAGE, "--gpus", "1",
        "--beam-arg=--max_num_workers=8", *DATAFLOW]
# latest_pushed_model: the Evaluator's baseline, a container task too.
CONTAINERS = {"RawCtrExampleGen", "StatisticsGen", "ImportSchemaGen",
              "StrictExampleValidator", "Transform", "Trainer",
              pipeline_lib.BASELINE_ID, pipeline_lib.WARM_START_ID,
              "Evaluator", "Pusher"}
COMPONENTS = CONTAINERS
BEAM_COMPONENTS = ("RawCtrExampleGen", "StatisticsGen", "Transform",
                   "Evaluator")


def parse(argv: List[str]) -> argparse.Namespace:
  parser = argparse.ArgumentParser()
  kubeflow_flags.add_compile_parser(parser.add_subparsers(dest="command"))
  return parser.parse_args(["compile-kubeflow", *argv])


def compile_to(path: str, argv: List[str]) -> Dict:
  args = parse(["--output", path, *argv])
  assert kfp.compile_spec(args) == 0
  with open(path, encoding="utf-8") as spec_file:
    return yaml.safe_load(spec_file)


@pytest.fixture(scope="module")
def spec_path(tmp_path_factory) -> str:
  path = str(tmp_path_factory.mktemp("spec") / "cowclip.yaml")
  compile_to(path, ARGS)
  return path


@pytest.fixture(scope="module")
def spec(spec_path) -> Dict:
  with open(spec_path, encoding="utf-8") as spec_file:
    return yaml.safe_load(spec_file)


def tasks(spec: Dict) -> Dict:
  return spec["root"]["dag"]["tasks"]


def container(spec: Dict, task: str) -> Dict:
  return spec["deploymentSpec"]["executors"][f"{task}_executor"]["container"]


def parameter(spec: Dict, task: str, name: str) -> str:
  return (tasks(spec)[task]["inputs"]["parameters"][name]["runtimeValue"]
          ["constant"])


def test_spec_is_what_the_kfp_api_server_accepts(spec):
  assert spec["schemaVersion"] == "2.1.0"
  assert spec["pipelineInfo"]["name"] == "cowclip-criteo"
  assert spec["defaultPipelineRoot"] == f"{ROOT}/pipeline"
  # Compile-time parameters only: nothing for a run to fill in.
  assert "inputDefinitions" not in spec["root"]
  for task in tasks(spec).values():
    for value in task.get("inputs", {}).get("parameters", {}).values():
      assert set(value) == {"runtimeValue"}
      assert "constant" in value["runtimeValue"]  # Not 2.0.0's constantValue.


def test_every_component_is_a_task_with_its_executor(spec):
  assert set(tasks(spec)) == COMPONENTS
  for name, task in tasks(spec).items():
    assert task["componentRef"]["name"] == name
    assert spec["components"][name]["executorLabel"] == f"{name}_executor"
  assert (container(spec, "RawCtrExampleGen")["args"][1] ==
          "components.raw_example_gen.executor.Executor")
  assert (container(spec, "StrictExampleValidator")["args"][1] ==
          "components.strict_example_validator.Executor")
  assert container(spec, "Pusher")["args"][1] == "components.pusher.Executor"


def test_every_executor_is_one_open_source_kfp_runs(spec):
  """KFP's compiler refuses anything but container and importer executors
  (TFX compiles resolvers to Vertex-only resolver executors)."""
  executors = spec["deploymentSpec"]["executors"]
  for name in tasks(spec):
    kind, _ = run_compiled.executor_of(spec, name)
    assert kind in ("container", "importer"), (name, kind)
  assert all(set(executor) <= {"container", "importer"}
             for executor in executors.values()), executors
  run_compiled.check_executors(spec)
  assert "resolver" not in yaml.safe_dump(executors)


def test_the_baseline_is_the_served_model_and_never_cached(spec):
  assert (container(spec, pipeline_lib.BASELINE_ID)["args"][1] ==
          "components.baseline.Executor")
  assert (container(spec, "Evaluator")["args"][1] ==
          "components.evaluator.EvaluatorExecutor")
  assert tasks(spec)["Evaluator"]["inputs"]["artifacts"]["baseline_model"] == {
      "taskOutputArtifact": {"producerTask": pipeline_lib.BASELINE_ID,
                             "outputArtifactKey": "model"}}
  # Reads the serving directory, where the Pusher writes.
  assert parameter(spec, pipeline_lib.BASELINE_ID, "push_destination") == (
      parameter(spec, "Pusher", "push_destination"))
  for name, task in tasks(spec).items():
    assert task["cachingOptions"] == {
        "enableCache": name not in pipeline_lib.UNCACHED_NODES}, name


def test_dependency_edges(spec):
  deps = {name: set(task.get("dependentTasks", ()))
          for name, task in tasks(spec).items()}
  assert "StrictExampleValidator" in deps["Transform"]
  assert "Transform" in deps["Trainer"]
  assert "Trainer" in deps["Evaluator"]
  assert {"Trainer", "Evaluator"} <= deps["Pusher"]
  order = []  # Any order the DAG allows.
  while len(order) < len(deps):
    ready = sorted(n for n in deps if n not in order and deps[n] <= set(order))
    assert ready, f"cycle among {set(deps) - set(order)}"
    order += ready[:1]
  chain = ["Transform", "Trainer", "Evaluator", "Pusher"]
  assert [n for n in order if n in chain] == chain


def test_pusher_is_guarded_by_the_evaluator_blessing(spec):
  inputs = tasks(spec)["Pusher"]["inputs"]["artifacts"]
  assert inputs["model_blessing"]["taskOutputArtifact"] == {
      "producerTask": "Evaluator", "outputArtifactKey": "blessing"}
  assert inputs["model"]["taskOutputArtifact"] == {
      "producerTask": "Trainer", "outputArtifactKey": "model"}
  assert f"{ROOT}/serving" in parameter(spec, "Pusher", "push_destination")


def test_every_task_runs_the_image(spec):
  for name in CONTAINERS:
    assert container(spec, name)["image"] == IMAGE
    assert container(spec, name)["command"] == [
        "python", "-m",
        "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor"]


def pod_limits(spec: Dict, task: str) -> Dict[str, int]:
  """The accelerator limits KFP v2's driver puts on ``task``'s pod
  (backend/src/v2/driver/driver.go, 2.0 to 2.17: resourceType and
  resourceCount if set, else type and a positive count)."""
  accelerator = container(spec, task).get("resources", {}).get(
      "accelerator", {})
  kind = accelerator.get("resourceType") or accelerator.get("type")
  count = int(accelerator.get("resourceCount") or accelerator.get("count")
              or 0)
  return {kind: count} if kind and count > 0 else {}


def test_trainer_requests_the_gpus(spec):
  assert pod_limits(spec, "Trainer") == {config_lib.DEFAULT_ACCELERATOR: 1}
  assert all("resources" not in container(spec, name)
             for name in CONTAINERS - {"Trainer"})


def test_gpus_n_requests_n_gpus_on_the_trainer_and_the_tuner_only(tmp_path):
  """The Tuner's trials train the same model as the Trainer, which uses
  every GPU it sees (--distribution auto, the default)."""
  spec = compile_to(str(tmp_path / "s.yaml"),
                    [*ARGS, "--gpus", "4", "--tune", "--trials", "2"])
  assert pod_limits(spec, "Trainer") == {"nvidia.com/gpu": 4}
  assert json.loads(parameter(spec, "Trainer", "custom_config"))[
      "distribution"] == "auto"
  assert pod_limits(spec, "CtrTuner") == {"nvidia.com/gpu": 4}
  for name in set(tasks(spec)) - {"Trainer", "CtrTuner"}:
    assert "resources" not in container(spec, name), name


def test_beam_components_get_the_runner_arguments(spec):
  expected = [*config_lib.beam_pipeline_args(
      "dataflow", image=IMAGE, project="proj", region="europe-west4",
      temp_location=f"{ROOT}/beam-temp"), "--max_num_workers=8"]
  assert expected[0] == "--runner=DataflowRunner"
  for name in BEAM_COMPONENTS:
    assert container(spec, name)["args"][-len(expected):] == expected
  assert "--direct_num_workers=1" not in str(spec)


def test_paths_are_the_pods_not_this_checkouts(spec_path, spec):
  assert parameter(spec, "ImportSchemaGen", "schema_file") == (
      compiler.CONTAINER_SCHEMA_ROOT + "/criteo/schema.pbtxt")
  assert parameter(spec, "RawCtrExampleGen", "input_base") == (
      "gs://bucket/criteo")
  with open(spec_path, encoding="utf-8") as spec_file:
    text = spec_file.read()
  assert REPO not in text
  assert "sqlite" not in text  # ML Metadata is the cluster's.


def test_compiling_twice_gives_the_same_file(spec_path, tmp_path):
  again = str(tmp_path / "again.yaml")
  compile_to(again, ARGS)
  with open(spec_path, "rb") as first, open(again, "rb") as second:
    assert first.read() == second.read()


def test_another_process_gives_the_same_file(spec_path, tmp_path):
  """Other hash seed, other working directory: still byte-identical."""
  out = str(tmp_path / "other.yaml")
  code = ("import sys; from commands.cli import kubeflow_flags; "
          "from commands.runs import kfp; "
          "import argparse; p = argparse.ArgumentParser(); "
          "kubeflow_flags.add_compile_parser(p.add_subparsers()); "
          "a = p.parse_args(sys.argv[1:]); sys.exit(kfp.compile_spec(a))")
  env = {**os.environ, "PYTHONHASHSEED": "12345", "TF_USE_LEGACY_KERAS": "0"}
  subprocess.run([sys.executable, "-c", code, "compile-kubeflow", "--output",
                  out, *ARGS], check=True, cwd=str(tmp_path), env=env,
                 capture_output=True)
  with open(spec_path, "rb") as first, open(out, "rb") as second:
    assert first.read() == second.read()


def test_compiling_writes_only_the_spec(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  compile_to("spec.yaml", ARGS)
  assert os.listdir(tmp_path) == ["spec.yaml"]


def test_without_gpus_the_trainer_requests_none(tmp_path):
  spec = compile_to(str(tmp_path / "s.yaml"),
                    [a for a in ARGS if a not in ("--gpus", "1")])
  assert "resources" not in container(spec, "Trainer")


@pytest.mark.parametrize("argv,message", [
    (["--output", "spec.json"], ".yaml"),
    (["--output", "missing-dir/spec.yaml"], "does not exist"),
    (["--data", "data/criteo.txt"], "--data"),
    (["--pipeline-root", "runs/kfp"], "--pipeline-root"),
    (["--gpus", "-1"], "gpus must be >= 0"),
    (["--project", ""], "needs project"),
])
def test_bad_input_is_named(argv, message, tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  args = parse(["--output", "spec.yaml", *ARGS, *argv])
  with pytest.raises(ValueError, match=re.escape(message)):
    kfp.compile_spec(args)
  assert os.listdir(tmp_path) == []


def test_output_is_the_spec_file_and_no_run_flag_is_silently_replaced():
  """compile-kubeflow declares its own input flags next to run's others
  (no conflict_handler="resolve": a clash would fail, not hide a flag)."""
  args = parse(["--output", "spec.yaml", *ARGS])
  assert (args.spec_file, args.output) == ("spec.yaml", ROOT)
  assert beam_flags.config_from_args(args, args.image).runner.dag_runner == "beam"
  with pytest.raises(SystemExit):
    parse(["--output", "spec.yaml", "--runner", "local", *ARGS])


def test_beam_args_per_runner():
  assert config_lib.beam_pipeline_args("direct") == config_lib.DIRECT_BEAM_ARGS
  assert config_lib.PipelineConfig.from_fields(
      dataset="criteo", data="d", output="o").runner.beam_args == (
          config_lib.DIRECT_BEAM_ARGS)
  for runner in ("flink", "spark"):
    assert config_lib.beam_pipeline_args(
        runner, image=IMAGE, job_endpoint="beam-job-server:8099") == (
            "--runner=PortableRunner", "--job_endpoint=beam-job-server:8099",
            "--environment_type=DOCKER", f"--environment_config={IMAGE}")
  assert config_lib.beam_pipeline_args(
      "flink", job_endpoint="js:8099", environment_type="EXTERNAL",
      environment_config="localhost:50000")[-1] == (
          "--environment_config=localhost:50000")
  with pytest.raises(ValueError, match="needs environment_config"):
    config_lib.beam_pipeline_args("spark", job_endpoint="js:8099",
                                  environment_type="EXTERNAL")
  with pytest.raises(ValueError, match="needs job_endpoint"):
    config_lib.beam_pipeline_args("flink", image=IMAGE)
  with pytest.raises(ValueError, match="unknown Beam runner"):
    config_lib.beam_pipeline_args("samza")


@pytest.mark.parametrize("uri,expected", [
    ("gs://b/criteo/", ("gs://b/criteo", "*")),
    ("gs://b", ("gs://b", "*")),
    ("gs://b/criteo/day_*.txt", ("gs://b/criteo", "day_*.txt")),
    ("s3://b/train.txt", ("s3://b", "train.txt")),
    # Daily data: the folder above the span's, the span's files.
    ("gs://b/logs/day-{SPAN}/", ("gs://b/logs", "day-{SPAN}/*")),
    ("gs://b/logs/{SPAN}/part-*.txt", ("gs://b/logs", "{SPAN}/part-*.txt")),
])
def test_split_input_of_uris(uri, expected):
  assert pipeline_lib.split_input(uri) == expected


def test_split_input_of_a_local_span_path_is_absolute(tmp_path,
                                                      monkeypatch):
  monkeypatch.chdir(tmp_path)
  assert pipeline_lib.split_input("logs/day-{SPAN}/train.txt") == (
      str(tmp_path / "logs"), "day-{SPAN}/train.txt")


# --- kubeflow/Dockerfile: what can be checked without building it ---


def dockerfile() -> List[Tuple[str, str]]:
  """(INSTRUCTION, arguments) pairs, continuation lines joined."""
  with open(os.path.join(REPO, "kubeflow", "Dockerfile"),
            encoding="utf-8") as docker_file:
    text = re.sub(r"\\\n", " ", docker_file.read())
  lines = [line.strip() for line in text.splitlines()]
  return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1])
          for line in lines if line and not line.startswith("#")]


def pinned(package: str) -> str:
  with open(os.path.join(REPO, "constraints.txt"),
            encoding="utf-8") as constraints:
    for line in constraints:
      name, _, version = line.strip().partition("==")
      if name.lower().replace("_", "-") == package:
        return version
  raise AssertionError(f"{package} is not pinned in constraints.txt")


def test_dockerfile_base_image_is_the_pinned_tfx():
  froms = [args.split()[0] for op, args in dockerfile() if op == "FROM"]
  assert froms[-1] == f"gcr.io/tfx-oss-public/tfx:{pinned('tfx')}"


def test_dockerfile_beam_boot_matches_the_pinned_beam():
  instructions = dockerfile()
  beam_version = next(args.split("=", 1)[1] for op, args in instructions
                      if op == "ARG" and args.startswith("BEAM_VERSION="))
  assert beam_version == pinned("apache-beam")
  assert ("FROM", "apache/beam_python3.10_sdk:${BEAM_VERSION} AS beam"
         ) in instructions
  assert ("COPY", "--from=beam /opt/apache/beam /opt/apache/beam"
         ) in instructions
  with open(os.path.join(REPO, "pyproject.toml"),
            encoding="utf-8") as pyproject:
    assert 'requires-python = ">=3.10,<3.11"' in pyproject.read()


def test_dockerfile_installs_the_project_with_the_constraints():
  instructions = dockerfile()
  workdir = [args for op, args in instructions if op == "WORKDIR"][-1]
  assert workdir == compiler.CONTAINER_REPO_ROOT
  copied = {}
  for op, args in instructions:
    if op == "COPY" and not args.startswith("--from"):
      *sources, destination = shlex.split(args)
      for source in sources:
        copied[source] = os.path.normpath(os.path.join(
            workdir, destination, source if destination.endswith("/")
            else ""))
  for source in ("pyproject.toml", "constraints.txt", "README.md"):
    assert copied[source] == f"{workdir}/{source}"
  # Every package pyproject.toml installs, and the schemas at the path the
  # compiled spec reads.
  for package in ("pipeline", "commands", "components", "trainer_module",
                  "kubeflow"):
    assert copied[package] == f"{workdir}/{package}"
    assert os.path.isdir(os.path.join(REPO, package))
  assert copied["schema"] == compiler.CONTAINER_SCHEMA_ROOT
  runs = " && ".join(args for op, args in instructions if op == "RUN")
  assert re.search(r"pip install .*--constraint constraints\.txt \.(\s|$)",
                   runs)
  assert "pip uninstall --yes kfp" in runs


def test_dockerfile_pins_keras_3():
  assert ("ENV", "TF_USE_LEGACY_KERAS=0") in dockerfile()


def test_a_spec_for_a_local_run_is_the_clusters_but_for_paths(spec_path,
                                                             tmp_path):
  """`--for-local-run` (what run-compiled tests run) changes only paths."""
  data, root = str(tmp_path / "criteo"), str(tmp_path / "root")
  local_args = [a for a in ARGS]
  local_args[local_args.index("gs://bucket/criteo/")] = data + "/"
  local_args[local_args.index(ROOT)] = root
  local = str(tmp_path / "local.yaml")
  os.makedirs(data)
  compile_to(local, [*local_args, "--for-local-run"])
  with open(local, encoding="utf-8") as local_file:
    text = local_file.read()
  assert compiler.CONTAINER_SCHEMA_ROOT not in text
  text = (text.replace(root, ROOT).replace(data, "gs://bucket/criteo")
          .replace(os.path.join(REPO, "schema"),
                   compiler.CONTAINER_SCHEMA_ROOT))
  with open(spec_path, encoding="utf-8") as spec_file:
    assert yaml.safe_load(text) == yaml.safe_load(spec_file)
