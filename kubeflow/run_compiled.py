"""`run-compiled`: run a compiled KFP v2 pipeline spec here, as KFP's backend.

A user checks a spec before uploading it, and our tests check ours, without
Docker or a cluster. It follows the open-source KFP v2 backend
(kubeflow/pipelines backend/src/v2: compiler, driver, launcher):

- every executor must be a container or an importer; anything else is
  refused before a task runs, with the compiler's message;
- tasks run in topological order of `dependentTasks` and data edges;
- a task's `triggerPolicy.condition` (a `tfx.dsl.Cond`, for one) is
  evaluated on its ExecutorInput; false: the task is skipped;
- a container task runs its own command and args in a subprocess (a
  `python -m MODULE` one in a fork of a process that imported TFX's KFP
  entrypoint: preloaded_python), with the launcher's placeholders
  substituted (`{{$}}` is the ExecutorInput JSON);
  output artifacts are provisioned under ROOT/<run id>/<task>/, and the
  ExecutorOutput the task writes is merged into them (URI, metadata) and
  handed to the tasks downstream, as the launcher records it in ML Metadata;
- an importer task makes an artifact of its URI, type and metadata;
- a task whose `cachingOptions.enableCache` is set reuses the outputs of an
  earlier run under the same root with the same cache key (KFP's: input
  artifact ids, parameter values, output specs, image, command and args).

The differences with a cluster are listed in kubeflow/README.md.
"""

import ast
import dataclasses
import hashlib
import json
import os
import re
import subprocess
import sys
import time
import uuid
from typing import Any, Dict, List, Optional, Tuple

import yaml

from kubeflow import preloaded_python

SUCCEEDED = "succeeded"
CACHED = "cached"
SKIPPED = "skipped"
DONE = (SUCCEEDED, CACHED)

# Under --root: what KFP keeps in ML Metadata and its cache table, for runs
# that share the root: the next artifact id and each cache key's outputs.
STATE_FILE = "kfp_local_state.json"

# Imported once per run, not once per task (preloaded_python): what our
# compiled spec's every task runs, TFX's KFP entrypoint (8.5 s of imports).
PRELOADED_MODULES = (
    "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor",)

# KFP's compiler (backend/src/v2/compiler/visitor.go) stops on any other.
SUPPORTED_EXECUTORS = ("container", "importer")

_PLACEHOLDER = re.compile(
    r"\{\{\$\.(inputs|outputs)\.(artifacts|parameters)\['([^']+)'\]"
    r"(?:\.(uri|path|output_file))?\}\}")


class SpecError(ValueError):
  """The spec cannot run on open-source KFP v2 (or is malformed)."""


class TaskFailed(RuntimeError):
  """A task's container exited non-zero."""


@dataclasses.dataclass
class TaskResult:
  """What one task did: its state and its outputs as downstream sees them."""
  name: str
  state: str
  artifacts: Dict[str, Dict[str, Any]] = dataclasses.field(
      default_factory=dict)
  parameters: Dict[str, Any] = dataclasses.field(default_factory=dict)
  log: Optional[str] = None
  seconds: float = 0.0


@dataclasses.dataclass
class RunResult:
  run_id: str
  run_root: str
  tasks: Dict[str, TaskResult]

  def describe(self) -> str:
    """One line per task, then its output artifacts and their metadata."""
    lines = [f"run {self.run_id}: {self.run_root}"]
    for task in self.tasks.values():
      lines.append(f"{task.name:32s} {task.state:9s} {task.seconds:6.1f} s")
      for key, artifact in sorted(task.artifacts.items()):
        metadata = ", ".join(f"{k}={v}" for k, v in sorted(
            artifact.get("metadata", {}).items()))
        lines.append(f"    {key}: {artifact['uri']}"
                     + (f" ({metadata})" if metadata else ""))
    return "\n".join(lines)


def load_spec(path: str) -> Dict[str, Any]:
  """The PipelineSpec in `path` (IR YAML or JSON), or a message naming it."""
  try:
    with open(path, encoding="utf-8") as spec_file:
      spec = yaml.safe_load(spec_file)
  except (OSError, yaml.YAMLError) as error:
    raise SpecError(f"{path}: cannot read the pipeline spec: {error}") from (
        error)
  if not isinstance(spec, dict) or "root" not in spec:
    raise SpecError(f"{path}: not a KFP v2 pipeline spec (no 'root')")
  if "pipelineSpec" in spec:  # A Vertex PipelineJob wraps it.
    raise SpecError(f"{path}: a PipelineJob, not a pipeline spec: compile "
                    "to .yaml")
  return spec


def executor_of(spec: Dict[str, Any], task_name: str) -> Tuple[str, Dict]:
  """(kind, body) of a root task's executor: 'container', 'importer', ..."""
  task = spec["root"]["dag"]["tasks"][task_name]
  component = spec["components"][task["componentRef"]["name"]]
  if "dag" in component:
    raise SpecError(f"task {task_name!r}: sub-DAG components are not "
                    "supported by this executor")
  label = component["executorLabel"]
  executor = spec["deploymentSpec"]["executors"][label]
  kinds = sorted(executor)
  if len(kinds) != 1:
    raise SpecError(f"executor {label!r}: expected one implementation, got "
                    f"{kinds}")
  return kinds[0], executor[kinds[0]]


def check_executors(spec: Dict[str, Any]) -> None:
  """Refuses what KFP's API server and compiler refuse: another schema than
  2.1.0, executors other than container/importer, conditional importers."""
  if spec.get("schemaVersion") != "2.1.0":
    raise SpecError(f"schemaVersion {spec.get('schemaVersion')!r}: KFP only "
                    "supports schema version 2.1.0")
  for name, task in spec["root"]["dag"]["tasks"].items():
    kind, _ = executor_of(spec, name)
    if kind == "importer" and task.get("triggerPolicy", {}).get("condition"):
      raise SpecError(f"importer task {name!r}: triggerPolicy.condition on "
                      "importer task is not supported")
    if kind not in SUPPORTED_EXECUTORS:
      label = spec["components"][spec["root"]["dag"]["tasks"][name][
          "componentRef"]["name"]]["executorLabel"]
      raise SpecError(
          f"task {name!r}: executor(label={label!r}) is a {kind!r}: "
          "non-container and non-importer executor not implemented (open-"
          "source KFP v2 runs only container and importer executors)")


def upstream_tasks(task: Dict[str, Any]) -> set:
  """`dependentTasks` plus every producer of the task's inputs."""
  upstream = set(task.get("dependentTasks", ()))
  inputs = task.get("inputs", {})
  for value in inputs.get("artifacts", {}).values():
    if "taskOutputArtifact" in value:
      upstream.add(value["taskOutputArtifact"]["producerTask"])
  for value in inputs.get("parameters", {}).values():
    if "taskOutputParameter" in value:
      upstream.add(value["taskOutputParameter"]["producerTask"])
  return upstream


def topological_order(tasks: Dict[str, Dict[str, Any]]) -> List[str]:
  """Task names, each after its upstream tasks (ties: by name)."""
  upstream = {name: upstream_tasks(task) for name, task in tasks.items()}
  for name, names in upstream.items():
    unknown = names - set(tasks)
    if unknown:
      raise SpecError(f"task {name!r} depends on unknown tasks "
                      f"{sorted(unknown)}")
  order: List[str] = []
  while len(order) < len(tasks):
    ready = sorted(n for n in tasks if n not in order and
                   upstream[n] <= set(order))
    if not ready:
      raise SpecError(f"cycle among tasks {sorted(set(tasks) - set(order))}")
    order.append(ready[0])
  return order


# --- trigger conditions: the CEL subset KFP's driver evaluates here ---

_CEL_TOKENS = ((r"&&", " and "), (r"\|\|", " or "), (r"!(?!=)", " not "),
               (r"\btrue\b", "True"), (r"\bfalse\b", "False"),
               (r"\bnull\b", "None"))
_CEL_FUNCTIONS = {"int": int, "double": float, "string": str,
                  "bool": bool, "size": len}


def _eval_node(node: ast.AST, variables: Dict[str, Any]) -> Any:
  """A whitelisted Python AST (translated CEL) evaluated on `variables`."""
  if isinstance(node, ast.Expression):
    return _eval_node(node.body, variables)
  if isinstance(node, ast.Constant):
    return node.value
  if isinstance(node, ast.Name) and node.id in variables:
    return variables[node.id]
  if isinstance(node, ast.Attribute):
    return _eval_node(node.value, variables)[node.attr]
  if isinstance(node, ast.Subscript):
    return _eval_node(node.value, variables)[_eval_node(node.slice,
                                                        variables)]
  if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
    return (_eval_node(node.left, variables) +
            _eval_node(node.right, variables))
  if isinstance(node, ast.BoolOp):
    values = [_eval_node(v, variables) for v in node.values]
    return all(values) if isinstance(node.op, ast.And) else any(values)
  if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not,
                                                            ast.USub)):
    value = _eval_node(node.operand, variables)
    return (not value) if isinstance(node.op, ast.Not) else -value
  if isinstance(node, ast.Compare):
    operators = {ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b,
                 ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b,
                 ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b,
                 ast.In: lambda a, b: a in b}
    left = _eval_node(node.left, variables)
    for op, right_node in zip(node.ops, node.comparators):
      right = _eval_node(right_node, variables)
      if type(op) not in operators or not operators[type(op)](left, right):
        return False
      left = right
    return True
  if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and
      node.func.id in _CEL_FUNCTIONS and len(node.args) == 1):
    return _CEL_FUNCTIONS[node.func.id](_eval_node(node.args[0], variables))
  raise SpecError(f"unsupported expression {ast.dump(node)}")


def evaluate_condition(condition: str, executor_input: Dict[str, Any]) -> bool:
  """KFP's trigger condition (CEL) on the ExecutorInput's fields.

  The driver exposes the ExecutorInput's fields by their proto names
  (`inputs.artifacts['k'].artifacts[0].metadata['blessed']`,
  `inputs.parameter_values['p']`); numbers are doubles. Only the CEL TFX's
  compiler emits is supported: comparisons, &&, ||, !, +, indexing and
  casts.
  """
  text = condition
  for pattern, replacement in _CEL_TOKENS:
    text = re.sub(pattern, replacement, text)
  try:
    tree = ast.parse(text.strip(), mode="eval")
  except SyntaxError as error:
    raise SpecError(f"cannot parse trigger condition {condition!r}: "
                    f"{error}") from error
  try:
    result = _eval_node(tree, {"inputs": _proto_named(executor_input)[
        "inputs"]})
  except (KeyError, IndexError, TypeError) as error:
    raise SpecError(f"trigger condition {condition!r}: {error!r}") from error
  if not isinstance(result, bool):
    raise SpecError(f"trigger condition {condition!r} is not a bool: "
                    f"{result!r}")
  return result


def _proto_named(executor_input: Dict[str, Any]) -> Dict[str, Any]:
  """The ExecutorInput JSON with proto field names, as CEL sees it."""
  inputs = executor_input.get("inputs", {})
  return {"inputs": {"artifacts": inputs.get("artifacts", {}),
                     "parameter_values": inputs.get("parameterValues", {})}}


# --- the executor ---


def _substitute(text: str, executor_input: Dict[str, Any],
                input_json: str) -> str:
  """The launcher's placeholders in one command/arg string."""

  def one(match: re.Match) -> str:
    side, kind, key, field = match.groups()
    section = executor_input.get(side, {})
    if kind == "artifacts":
      artifacts = section.get("artifacts", {}).get(key, {}).get(
          "artifacts", [])
      if not artifacts:
        raise SpecError(f"placeholder {match.group(0)}: no such artifact")
      uri = artifacts[0]["uri"]
      return uri if field == "uri" else local_path(uri)
    if side == "outputs":
      return section["parameters"][key]["outputFile"]
    value = section.get("parameterValues", {})[key]
    return value if isinstance(value, str) else json.dumps(value)

  result = _PLACEHOLDER.sub(one, text.replace("{{$}}", input_json))
  if "{{$" in result.replace(input_json, ""):
    raise SpecError(f"unsupported placeholder in {text!r}")
  return result


def local_path(uri: str) -> str:
  """The launcher's local path of a URI (gs://b/x -> /gcs/b/x)."""
  for scheme, mount in (("gs://", "/gcs/"), ("minio://", "/minio/"),
                        ("s3://", "/s3/")):
    if uri.startswith(scheme):
      return mount + uri[len(scheme):]
  return uri


# The image's Python, which this interpreter stands in for.
_PYTHON = ("python", "python3")


def _interpreter(command: List[str]) -> List[str]:
  """The image's `python` is this interpreter (its venv has the packages)."""
  if command and command[0] in _PYTHON:
    return [sys.executable] + command[1:]
  return command


def _python_module(command: List[str]) -> Optional[str]:
  """MODULE of a `python -m MODULE ...` command, else None."""
  if len(command) >= 3 and command[0] in _PYTHON and command[1] == "-m":
    return command[2]
  return None


class LocalKfpRun:
  """One run of a spec under `root`: tasks, artifacts, their outputs."""

  def __init__(self, spec: Dict[str, Any], root: str,
               run_id: Optional[str] = None,
               env: Optional[Dict[str, str]] = None,
               enable_cache: bool = True):
    self.spec = spec
    self.run_id = run_id or time.strftime("run-%Y%m%d-%H%M%S-") + (
        uuid.uuid4().hex[:6])
    self.root = os.path.abspath(root)
    self.run_root = os.path.join(self.root, self.run_id)
    self.env = env
    self._python = preloaded_python.PreloadedPython(
        PRELOADED_MODULES, os.path.join(self.run_root, "preloaded_python.log"),
        env)
    self.enable_cache = enable_cache
    self.results: Dict[str, TaskResult] = {}
    self._state_path = os.path.join(self.root, STATE_FILE)
    self._state = {"next_artifact_id": 1, "cache": {}}
    if os.path.exists(self._state_path):
      with open(self._state_path, encoding="utf-8") as state_file:
        self._state = json.load(state_file)

  def _new_artifact_name(self) -> str:
    """MLMD-style artifact id: the driver names input artifacts by it."""
    artifact_id = self._state["next_artifact_id"]
    self._state["next_artifact_id"] += 1
    return str(artifact_id)

  def _save_state(self) -> None:
    with open(self._state_path + ".tmp", "w", encoding="utf-8") as state_file:
      json.dump(self._state, state_file, sort_keys=True)
    os.replace(self._state_path + ".tmp", self._state_path)

  def _cache_key(self, task: Dict[str, Any], container: Dict[str, Any],
                 executor_input: Dict[str, Any]) -> Optional[str]:
    """KFP's cache fingerprint (cacheutils.GenerateCacheKey): input artifact
    ids, input parameter values, output specs without URIs, image and the
    unsubstituted command and args. None: this task is not cached."""
    if not (self.enable_cache and
            task.get("cachingOptions", {}).get("enableCache")):
      return None
    inputs = executor_input["inputs"]
    outputs = executor_input["outputs"]
    key = {
        "pipeline": self.spec.get("pipelineInfo", {}).get("name"),
        "inputArtifactNames": {
            k: [a["name"] for a in v["artifacts"]]
            for k, v in inputs["artifacts"].items()},
        "inputParameterValues": inputs["parameterValues"],
        "outputArtifactsSpec": {
            k: {f: a for f, a in v["artifacts"][0].items() if f != "uri"}
            for k, v in outputs["artifacts"].items()},
        "outputParametersSpec": sorted(outputs["parameters"]),
        "containerSpec": {"image": container.get("image"),
                          "cmdArgs": container.get("command", []) +
                                     container.get("args", [])}}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()

  def run(self) -> RunResult:
    check_executors(self.spec)
    tasks = self.spec["root"]["dag"]["tasks"]
    if self.spec["root"].get("inputDefinitions"):
      raise SpecError("the spec has run-time pipeline parameters: this "
                      "executor runs compile-time constants only")
    os.makedirs(self.run_root, exist_ok=False)
    try:
      for name in topological_order(tasks):
        self.results[name] = self._run_task(name, tasks[name])
        self._save_state()
    finally:
      self._python.close()
    return RunResult(self.run_id, self.run_root, self.results)

  def _input_artifacts(self, name: str, task: Dict[str, Any],
                       component: Dict[str, Any]) -> Dict[str, Any]:
    """ExecutorInput.inputs.artifacts: the producers' recorded outputs."""
    definitions = component.get("inputDefinitions", {}).get("artifacts", {})
    artifacts = {}
    for key, value in task.get("inputs", {}).get("artifacts", {}).items():
      if "taskOutputArtifact" not in value:
        raise SpecError(f"task {name!r} input {key!r}: only task outputs are "
                        f"supported, got {sorted(value)}")
      source = value["taskOutputArtifact"]
      producer = self.results[source["producerTask"]]
      artifact = dict(producer.artifacts[source["outputArtifactKey"]])
      artifact["type"] = definitions[key]["artifactType"]
      artifacts[key] = {"artifacts": [artifact]}
    return artifacts

  def _input_parameters(self, name: str, task: Dict[str, Any]) -> Dict:
    values = {}
    for key, value in task.get("inputs", {}).get("parameters", {}).items():
      if "runtimeValue" in value:
        runtime = value["runtimeValue"]
        if "constant" not in runtime:
          raise SpecError(f"task {name!r} parameter {key!r}: schema 2.0.0 "
                          "constantValue; KFP's driver needs 2.1.0 constant")
        values[key] = runtime["constant"]
      elif "taskOutputParameter" in value:
        source = value["taskOutputParameter"]
        values[key] = self.results[source["producerTask"]].parameters[
            source["outputParameterKey"]]
      else:
        raise SpecError(f"task {name!r} parameter {key!r}: unsupported "
                        f"source {sorted(value)}")
    return values

  def _run_task(self, name: str, task: Dict[str, Any]) -> TaskResult:
    start = time.time()
    component = self.spec["components"][task["componentRef"]["name"]]
    kind, body = executor_of(self.spec, name)
    # KFP's Argo DAG: each task depends on `<upstream>.Succeeded`, so a task
    # after a skipped one is not run either.
    skipped = sorted(n for n in upstream_tasks(task)
                     if self.results[n].state not in DONE)
    if skipped:
      print(f"[{name}] skipped: upstream {', '.join(skipped)} did not run",
            flush=True)
      return TaskResult(name, SKIPPED)
    artifacts = self._input_artifacts(name, task, component)
    executor_input = {"inputs": {
        "artifacts": artifacts,
        "parameterValues": self._input_parameters(name, task)}}
    condition = task.get("triggerPolicy", {}).get("condition")
    if condition and not evaluate_condition(condition, executor_input):
      print(f"[{name}] skipped: trigger condition false: {condition}",
            flush=True)
      return TaskResult(name, SKIPPED, seconds=time.time() - start)
    task_root = os.path.join(self.run_root, name, uuid.uuid4().hex[:8])
    outputs = self._provision_outputs(component, task_root)
    if kind == "importer":
      result = self._import(name, body, executor_input, outputs)
    else:
      executor_input["outputs"] = outputs
      key = self._cache_key(task, body, executor_input)
      cached = self._state["cache"].get(key) if key else None
      if cached:
        print(f"[{name}] cached: outputs of an earlier run", flush=True)
        result = TaskResult(name, CACHED, **cached)
      else:
        result = self._launch(name, body, executor_input, task_root)
        if key:
          self._state["cache"][key] = {"artifacts": result.artifacts,
                                       "parameters": result.parameters}
    result.seconds = time.time() - start
    return result

  def _provision_outputs(self, component: Dict[str, Any],
                         task_root: str) -> Dict[str, Any]:
    """The driver's provisionOutputs: one artifact per output, under root."""
    definitions = component.get("outputDefinitions", {})
    artifacts = {}
    for key, definition in sorted(definitions.get("artifacts", {}).items()):
      artifact = {"name": key, "uri": os.path.join(task_root, key),
                  "type": definition["artifactType"]}
      if "metadata" in definition:
        artifact["metadata"] = definition["metadata"]
      artifacts[key] = {"artifacts": [artifact]}
    parameters = {key: {"outputFile": os.path.join(task_root, "outputs",
                                                   key)}
                  for key in sorted(definitions.get("parameters", {}))}
    return {"artifacts": artifacts, "parameters": parameters,
            "outputFile": os.path.join(task_root, "output_metadata.json")}

  def _record(self, provisioned: Dict[str, Any],
              produced: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """Output artifacts as ML Metadata would hold them after the launcher:
    the ExecutorOutput's URI and metadata merged into the provisioned ones.
    """
    recorded = {}
    for key, listing in provisioned.items():
      artifact = dict(listing["artifacts"][0])
      written = produced.get(key, {}).get("artifacts", [])
      if written:
        if written[0].get("uri"):
          artifact["uri"] = written[0]["uri"]
        artifact["metadata"] = {**artifact.get("metadata", {}),
                                **written[0].get("metadata", {})}
      artifact["name"] = self._new_artifact_name()
      del artifact["type"]  # The consumer's input definition gives it.
      recorded[key] = artifact
    return recorded

  def _launch(self, name: str, container: Dict[str, Any],
              executor_input: Dict[str, Any], task_root: str) -> TaskResult:
    """The launcher: placeholders, the container's command, ExecutorOutput.
    """
    input_json = json.dumps(executor_input, sort_keys=True)
    command = [_substitute(part, executor_input, input_json)
               for part in container.get("command", []) +
               container.get("args", [])]
    outputs = executor_input["outputs"]
    for listing in outputs["artifacts"].values():
      os.makedirs(local_path(listing["artifacts"][0]["uri"]), exist_ok=True)
    os.makedirs(os.path.join(task_root, "outputs"), exist_ok=True)
    log = os.path.join(task_root, "executor.log")
    print(f"[{name}] running the {container.get('image')} container's "
          f"command (log {log})", flush=True)
    module = _python_module(command)
    if module:
      open(log, "w", encoding="utf-8").close()
      try:
        code = self._python.run(module, command[3:], log)
      except preloaded_python.ServerDied as died:
        raise TaskFailed(f"task {name!r}: {died}") from None
    else:
      with open(log, "w", encoding="utf-8") as log_file:
        code = subprocess.run(_interpreter(command), stdout=log_file,
                              stderr=subprocess.STDOUT, env=self.env,
                              check=False).returncode
    if code != 0:
      with open(log, encoding="utf-8", errors="replace") as log_file:
        tail = log_file.read()[-3000:]
      raise TaskFailed(f"task {name!r} failed (exit {code}); log {log}; "
                       f"last lines:\n{tail}")
    produced = {}
    if os.path.exists(outputs["outputFile"]):
      with open(outputs["outputFile"], encoding="utf-8") as output_file:
        produced = json.load(output_file)
    parameters = dict(produced.get("parameterValues", {}))
    for key, parameter in outputs["parameters"].items():
      if key not in parameters and os.path.exists(parameter["outputFile"]):
        with open(parameter["outputFile"], encoding="utf-8") as value_file:
          parameters[key] = value_file.read()
    return TaskResult(name, SUCCEEDED,
                      artifacts=self._record(outputs["artifacts"],
                                             produced.get("artifacts", {})),
                      parameters=parameters, log=log)

  def _import(self, name: str, importer: Dict[str, Any],
              executor_input: Dict[str, Any],
              outputs: Dict[str, Any]) -> TaskResult:
    """The importer launcher: an artifact of the given URI and metadata."""
    source = importer.get("artifactUri", {})
    if "constant" in source:
      uri = source["constant"]
    elif "runtimeParameter" in source:
      uri = executor_input["inputs"]["parameterValues"][
          source["runtimeParameter"]]
    else:
      raise SpecError(f"importer task {name!r}: no artifactUri")
    print(f"[{name}] importing {uri}", flush=True)
    produced = {key: {"artifacts": [{"uri": uri,
                                     "metadata": importer.get("metadata",
                                                              {})}]}
                for key in outputs["artifacts"]}
    return TaskResult(name, SUCCEEDED,
                      artifacts=self._record(outputs["artifacts"],
                                             produced))


def run_spec(spec_path: str, root: str, run_id: Optional[str] = None,
             env: Optional[Dict[str, str]] = None,
             enable_cache: bool = True) -> RunResult:
  """Runs the spec at `spec_path` with artifacts under `root`."""
  return LocalKfpRun(load_spec(spec_path), root, run_id, env,
                     enable_cache).run()
