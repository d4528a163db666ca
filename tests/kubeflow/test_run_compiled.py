"""run-compiled on small hand-written KFP v2 specs: each rule of the backend.

The containers are `python -c` programs that check what they were given
(exit 1 otherwise) and write files and an ExecutorOutput, so every test runs
real subprocesses in a second or two.
"""

import json
import os

import pytest
import yaml

from commands.cli import main as cli
from kubeflow import run_compiled
from pipeline import progress

ARTIFACT = {"schemaTitle": "system.Dataset"}

# Writes the input parameter into its output artifact and reports rows=3 in
# its ExecutorOutput metadata.
PRODUCE = """
import json, os, sys
executor_input = json.loads(sys.argv[1])
out = executor_input["outputs"]
uri = out["artifacts"]["data"]["artifacts"][0]["uri"]
assert sys.argv[2] == uri, (sys.argv[2], uri)
with open(os.path.join(uri, "value.txt"), "w") as f:
  f.write(sys.argv[3])
with open(out["outputFile"], "w") as f:
  json.dump({"artifacts": {"data": {"artifacts": [
      {"metadata": {"rows": 3}}]}}}, f)
"""

# Reads its input artifact through the uri placeholder and checks the
# metadata the producer reported reached it; copies the value downstream.
CONSUME = """
import json, os, sys
executor_input = json.loads(sys.argv[1])
data = executor_input["inputs"]["artifacts"]["data"]["artifacts"][0]
assert data["metadata"]["rows"] == 3, data
assert data["type"] == {"schemaTitle": "system.Dataset"}, data
with open(os.path.join(sys.argv[2], "value.txt")) as f:
  value = f.read()
out = executor_input["outputs"]["artifacts"]["copy"]["artifacts"][0]["uri"]
with open(os.path.join(out, "value.txt"), "w") as f:
  f.write(value + "!")
"""


def container(code, *args):
  return {"container": {"image": "local/test:1",
                        "command": ["python", "-c", code],
                        "args": ["{{$}}", *args]}}


def component(label, inputs=(), outputs=(), parameters=()):
  spec = {"executorLabel": label}
  if inputs or parameters:
    spec["inputDefinitions"] = {}
    if inputs:
      spec["inputDefinitions"]["artifacts"] = {
          k: {"artifactType": ARTIFACT} for k in inputs}
    if parameters:
      spec["inputDefinitions"]["parameters"] = {
          k: {"parameterType": "STRING"} for k in parameters}
  if outputs:
    spec["outputDefinitions"] = {"artifacts": {
        k: {"artifactType": ARTIFACT} for k in outputs}}
  return spec


def from_task(producer, key):
  return {"taskOutputArtifact": {"producerTask": producer,
                                 "outputArtifactKey": key}}


def pipeline_spec(condition=None, extra_tasks=None, extra_executors=None):
  """produce -> consume (with `condition`); importer -> check_import."""
  consume_task = {
      "componentRef": {"name": "consume"},
      "inputs": {"artifacts": {"data": from_task("produce", "data")}},
      "cachingOptions": {"enableCache": True}}
  if condition:
    consume_task["triggerPolicy"] = {"condition": condition}
  spec = {
      "pipelineInfo": {"name": "test"},
      "schemaVersion": "2.1.0",
      "root": {"dag": {"tasks": {
          # Names sort against the dependency order: the order is the DAG's.
          "consume": consume_task,
          "produce": {
              "componentRef": {"name": "produce"},
              "inputs": {"parameters": {"text": {
                  "runtimeValue": {"constant": "hello"}}}},
              "cachingOptions": {"enableCache": True}},
          "imported": {"componentRef": {"name": "imported"}},
          "check_import": {
              "componentRef": {"name": "consume"},
              "inputs": {"artifacts": {"data": from_task("imported",
                                                         "artifact")}}},
          "after_consume": {
              "componentRef": {"name": "after_consume"},
              "dependentTasks": ["consume"]},
      }}},
      "components": {
          "produce": component("produce_executor", outputs=["data"],
                               parameters=["text"]),
          "consume": component("consume_executor", inputs=["data"],
                               outputs=["copy"]),
          "imported": component("imported_executor", outputs=["artifact"]),
          "after_consume": component("after_executor"),
      },
      "deploymentSpec": {"executors": {
          "produce_executor": container(
              PRODUCE, "{{$.outputs.artifacts['data'].uri}}",
              "{{$.inputs.parameters['text']}}"),
          "consume_executor": container(
              CONSUME, "{{$.inputs.artifacts['data'].uri}}"),
          "imported_executor": {"importer": {
              "artifactUri": {"constant": "IMPORTED"},
              "typeSchema": ARTIFACT,
              "metadata": {"rows": 3}}},
          "after_executor": container("pass"),
      }},
  }
  spec["root"]["dag"]["tasks"].update(extra_tasks or {})
  spec["deploymentSpec"]["executors"].update(extra_executors or {})
  return spec


def write(spec, tmp_path):
  imported = tmp_path / "imported"
  imported.mkdir(exist_ok=True)
  (imported / "value.txt").write_text("from the importer")
  text = yaml.safe_dump(spec).replace("IMPORTED", str(imported))
  path = tmp_path / "spec.yaml"
  path.write_text(text)
  return str(path)


def read_value(result, task, key="copy"):
  with open(os.path.join(result.tasks[task].artifacts[key]["uri"],
                         "value.txt")) as f:
    return f.read()


def test_tasks_run_in_dependency_order_and_pass_outputs_on(tmp_path):
  result = run_compiled.run_spec(write(pipeline_spec(), tmp_path),
                                 str(tmp_path / "root"), run_id="r1")
  assert list(result.tasks) == ["imported", "check_import", "produce",
                                "consume", "after_consume"]
  assert {t.state for t in result.tasks.values()} == {run_compiled.SUCCEEDED}
  assert read_value(result, "consume") == "hello!"
  assert read_value(result, "check_import") == "from the importer!"
  produced = result.tasks["produce"].artifacts["data"]
  # The ExecutorOutput's metadata, merged into the recorded artifact.
  assert produced["metadata"] == {"rows": 3}
  assert produced["uri"].startswith(str(tmp_path / "root" / "r1" / "produce"))
  assert result.tasks["imported"].artifacts["artifact"]["uri"] == str(
      tmp_path / "imported")


@pytest.mark.parametrize("condition,runs", [
    ("inputs.artifacts['data'].artifacts[0].metadata['rows'] == 3.0", True),
    ("(inputs.artifacts['data'].artifacts[0].metadata['rows'] > 5.0)", False),
    ("!(inputs.artifacts['data'].artifacts[0].metadata['rows'] == 3.0)",
     False),
    ("(inputs.artifacts['data'].artifacts[0].metadata['rows'] < 5.0 && "
     "inputs.artifacts['data'].artifacts[0].uri != '')", True),
])
def test_trigger_conditions_run_or_skip_a_task(tmp_path, condition, runs):
  result = run_compiled.run_spec(write(pipeline_spec(condition), tmp_path),
                                 str(tmp_path / "root"))
  expected = run_compiled.SUCCEEDED if runs else run_compiled.SKIPPED
  assert result.tasks["consume"].state == expected
  # Nor does KFP run a task that waits for a skipped one (Argo's
  # `consume.Succeeded` depends).
  assert result.tasks["after_consume"].state == expected


def test_a_second_run_reuses_cached_tasks_with_the_same_inputs(tmp_path):
  path = write(pipeline_spec(), tmp_path)
  root = str(tmp_path / "root")
  first = run_compiled.run_spec(path, root)
  second = run_compiled.run_spec(path, root)
  assert second.tasks["produce"].state == run_compiled.CACHED
  assert second.tasks["consume"].state == run_compiled.CACHED
  assert (second.tasks["consume"].artifacts ==
          first.tasks["consume"].artifacts)
  # Caching off in the spec: runs again, with new artifact ids.
  assert second.tasks["check_import"].state == run_compiled.SUCCEEDED
  assert (second.tasks["check_import"].artifacts["copy"]["name"] !=
          first.tasks["check_import"].artifacts["copy"]["name"])
  third = run_compiled.run_spec(path, root, enable_cache=False)
  assert third.tasks["produce"].state == run_compiled.SUCCEEDED


def test_other_executors_are_refused_before_anything_runs(tmp_path):
  spec = pipeline_spec(
      extra_tasks={"latest_blessed_model": {
          "componentRef": {"name": "resolver"}}},
      extra_executors={"resolver_executor": {"resolver": {
          "outputArtifactQueries": {}}}})
  spec["components"]["resolver"] = component("resolver_executor")
  with pytest.raises(run_compiled.SpecError,
                     match="non-container and non-importer executor not "
                     "implemented") as error:
    run_compiled.run_spec(write(spec, tmp_path), str(tmp_path / "root"))
  assert "latest_blessed_model" in str(error.value)
  assert not os.path.exists(tmp_path / "root")


def test_a_failing_container_stops_the_run_with_its_log(tmp_path):
  spec = pipeline_spec()
  spec["deploymentSpec"]["executors"]["consume_executor"] = container(
      "import sys; print('bad input in row 7'); sys.exit(2)")
  with pytest.raises(run_compiled.TaskFailed,
                     match=r"(?s)task 'check_import' failed \(exit 2\).*"
                     "bad input in row 7"):
    run_compiled.run_spec(write(spec, tmp_path), str(tmp_path / "root"))


def test_a_cycle_is_named(tmp_path):
  spec = pipeline_spec()
  spec["root"]["dag"]["tasks"]["produce"]["dependentTasks"] = [
      "after_consume"]
  with pytest.raises(run_compiled.SpecError, match="cycle among tasks"):
    run_compiled.run_spec(write(spec, tmp_path), str(tmp_path / "root"))


def test_placeholders_are_the_launchers():
  executor_input = {
      "inputs": {"parameterValues": {"n": 3, "s": "x"},
                 "artifacts": {"a": {"artifacts": [{"uri": "gs://b/a"}]}}},
      "outputs": {"parameters": {"p": {"outputFile": "/tmp/p"}},
                  "artifacts": {"o": {"artifacts": [{"uri": "s3://b/o"}]}}}}
  substitute = lambda text: run_compiled._substitute(  # pylint: disable=protected-access
      text, executor_input, "JSON")
  assert substitute("{{$}}") == "JSON"
  assert substitute("--n={{$.inputs.parameters['n']}}") == "--n=3"
  assert substitute("{{$.inputs.parameters['s']}}") == "x"
  assert substitute("{{$.inputs.artifacts['a'].uri}}") == "gs://b/a"
  assert substitute("{{$.inputs.artifacts['a'].path}}") == "/gcs/b/a"
  assert substitute("{{$.outputs.artifacts['o'].path}}") == "/s3/b/o"
  assert substitute("{{$.outputs.parameters['p'].output_file}}") == "/tmp/p"
  with pytest.raises(run_compiled.SpecError, match="unsupported placeholder"):
    substitute("{{$.pipeline_job_name}}")


def test_only_schema_2_1_0_runs(tmp_path):
  spec = pipeline_spec()
  spec["schemaVersion"] = "2.0.0"
  with pytest.raises(run_compiled.SpecError, match="schema version 2.1.0"):
    run_compiled.run_spec(write(spec, tmp_path), str(tmp_path / "root"))


def test_bad_specs_are_named(tmp_path):
  path = tmp_path / "job.yaml"
  path.write_text(json.dumps({"pipelineSpec": {}, "root": {}}))
  with pytest.raises(run_compiled.SpecError, match="PipelineJob"):
    run_compiled.load_spec(str(path))
  path.write_text("a: [")
  with pytest.raises(run_compiled.SpecError, match="cannot read"):
    run_compiled.load_spec(str(path))


def test_cli_reports_the_tasks(tmp_path, capsys):
  path = write(pipeline_spec(), tmp_path)
  assert cli.main(["run-compiled", path, "--root",
                   str(tmp_path / "root"), "--run-id", "cli"]) == 0
  out = capsys.readouterr().out
  assert "consume" in out and "succeeded" in out and "rows=3" in out
  assert cli.main(["run-compiled", str(tmp_path / "missing.yaml"), "--root",
                   str(tmp_path / "root")]) == progress.EXIT_FAILED
