"""No project module imports another that imports it back (read by ast).

Function-level imports count: an import moved into a function still runs,
and still closes a cycle.
"""

import os
from typing import Dict, FrozenSet, List, Optional, Sequence

from pipeline import code_fingerprint as fingerprint


def _modules(root: str, packages: Sequence[str]) -> List[str]:
  """Every module (package __init__ included) of `packages` under `root`."""
  modules = []
  for package in packages:
    for directory, _, files in os.walk(os.path.join(root, package)):
      relative = os.path.relpath(directory, root).replace(os.sep, ".")
      for name in files:
        if name == "__init__.py":
          modules.append(relative)
        elif name.endswith(".py"):
          modules.append(f"{relative}.{name[:-3]}")
  return sorted(modules)


def _graph(root: str, packages: Sequence[str]) -> Dict[str, FrozenSet[str]]:
  return {module: fingerprint.project_imports(module, root, packages)
          for module in _modules(root, packages)}


def _cycle(graph: Dict[str, FrozenSet[str]]) -> Optional[List[str]]:
  """One import cycle (a path that returns to its start), or None."""
  state = {}  # module -> "open" (on the current path) or "done".

  def visit(module, path):
    state[module] = "open"
    for imported in sorted(graph.get(module, ())):
      if state.get(imported) == "open":
        return path[path.index(imported):] + [imported]
      if imported not in state:
        found = visit(imported, path + [imported])
        if found:
          return found
    state[module] = "done"
    return None

  for module in sorted(graph):
    if module not in state:
      found = visit(module, [module])
      if found:
        return found
  return None


def test_the_project_has_no_import_cycle():
  graph = _graph(fingerprint.REPO_ROOT, fingerprint.PROJECT_PACKAGES)
  assert "commands.cli.main" in graph and "pipeline.metadata" in graph
  assert "pipeline.runner" in graph["commands.runs.run"]
  assert _cycle(graph) is None, " -> ".join(_cycle(graph))


# The rooms, top to bottom: a module imports its own room's and those below.
# kubeflow/ (compiler, local executor of compiled specs) sits on the
# pipeline it compiles, under the commands that parse its flags.
LAYERS = ("commands", "kubeflow", "pipeline", "components", "trainer_module")
# `python -m pipeline` (pipeline/__main__.py) is the CLI's entry point.
ENTRY_POINT = "pipeline.__main__"


def test_nothing_imports_up_the_stack():
  """Each room stands without the rooms above it: pipeline, components and
  trainer_module without the tools and Kubeflow, and so on down."""
  graph = _graph(fingerprint.REPO_ROOT, fingerprint.PROJECT_PACKAGES)
  assert set(LAYERS) == set(fingerprint.PROJECT_PACKAGES)
  rank = {room: i for i, room in enumerate(LAYERS)}
  room = lambda module: rank[module.split(".")[0]]
  upward = {module: sorted(i for i in imported if room(i) < room(module))
            for module, imported in graph.items()}
  assert {m: i for m, i in upward.items() if i} == {
      ENTRY_POINT: ["commands.cli.main"]}
  assert "kubeflow.compiler" in graph["commands.runs.kfp"]


def test_a_cycle_through_a_function_level_import_is_found(tmp_path):
  package = tmp_path / "cyclic"
  package.mkdir()
  (package / "__init__.py").write_text("")
  (package / "first.py").write_text("from cyclic import second\n")
  (package / "second.py").write_text(
      "import os\n\n\ndef late():\n  from cyclic.first import name\n"
      "  return name\n")
  (package / "third.py").write_text("from . import second\n")
  graph = _graph(str(tmp_path), ("cyclic",))
  assert graph["cyclic.first"] == {"cyclic.second"}
  assert graph["cyclic.second"] == {"cyclic.first"}
  assert graph["cyclic.third"] == {"cyclic.second"}
  assert _cycle(graph) == ["cyclic.first", "cyclic.second", "cyclic.first"]
  (package / "second.py").write_text("import os\n")
  assert _cycle(_graph(str(tmp_path), ("cyclic",))) is None


def test_the_cowclip_maths_imports_no_other_project_module():
  """cowclip.py is read against the paper alone: its settings are
  parameters, not the settings module."""
  graph = _graph(fingerprint.REPO_ROOT, fingerprint.PROJECT_PACKAGES)
  assert graph["trainer_module.cowclip"] == frozenset()


# A module a reader holds in mind at once (the house's limit).
MAX_MODULE_LINES = 600


def test_no_module_is_longer_than_the_limit():
  too_long = {}
  for package in fingerprint.PROJECT_PACKAGES:
    for directory, _, files in os.walk(
        os.path.join(fingerprint.REPO_ROOT, package)):
      for name in files:
        if name.endswith(".py"):
          with open(os.path.join(directory, name)) as f:
            lines = sum(1 for _ in f)
          if lines > MAX_MODULE_LINES:
            too_long[os.path.join(directory, name)] = lines
  assert not too_long, f"modules over {MAX_MODULE_LINES} lines: {too_long}"
