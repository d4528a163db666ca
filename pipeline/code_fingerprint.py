"""The code fingerprint in every component's cache key.

TFX caches an execution by its pipeline, node, executor class path, input
artifacts and execution properties (tfx/orchestration/portable/
cache_utils.py), not by the code behind them. So after a fix in a helper an
executor imports, or in the module of a dotted-path function (run_fn,
tuner_fn, preprocessing_fn, a TFMA metric), a re-run with the same output
would silently reuse the old result. `add_code_fingerprint` adds a hash of
that code to a component's execution properties: the sources of the project
modules it runs and of every project module they import, at any depth,
found by reading the imports (ast), never listed by hand.
"""

import ast
import hashlib
import os
from typing import Any, FrozenSet, Iterable, List, Optional, Sequence

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The project's own top-level packages: imports of anything else are
# third-party and leave the project's import graph.
PROJECT_PACKAGES = ("commands", "components", "kubeflow", "pipeline",
                    "trainer_module")
# The execution property that carries the fingerprint.
CODE_FINGERPRINT = "code_fingerprint"


def _module_file(module: str, root: str) -> Optional[str]:
  """The source file of project `module` under `root`, or None."""
  path = os.path.join(root, *module.split("."))
  for candidate in (path + ".py", os.path.join(path, "__init__.py")):
    if os.path.isfile(candidate):
      return candidate
  return None


def project_imports(module: str, root: Optional[str] = None,
                    packages: Sequence[str] = PROJECT_PACKAGES
                   ) -> FrozenSet[str]:
  """The project modules `module` imports, at any depth of its code.

  Read from the source (ast), so imports inside functions count as much as
  those at the top. `from package import submodule` is an edge to the
  submodule (what it uses), `from module import name` one to the module.
  """
  root = REPO_ROOT if root is None else root
  path = _module_file(module, root)
  with open(path, encoding="utf-8") as f:
    tree = ast.parse(f.read(), path)
  package = (module if path.endswith("__init__.py")
             else module.rpartition(".")[0])
  found = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      found.update(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:
        parts = package.split(".")[:len(package.split(".")) - node.level + 1]
        base = ".".join(parts + ([base] if base else []))
      for alias in node.names:
        submodule = f"{base}.{alias.name}"
        found.add(submodule if _module_file(submodule, root) else base)
  return frozenset(
      name for name in found
      if name.split(".")[0] in packages and name != module
      and _module_file(name, root))


def import_closure(modules: Iterable[str],
                   root: Optional[str] = None) -> List[str]:
  """`modules` and every project module they import, transitively, with
  the packages Python runs on the way (their __init__), sorted. Modules
  outside the project (TFX's own executors) have no closure."""
  root = REPO_ROOT if root is None else root
  seen = set()
  todo = [m for m in modules if m.split(".")[0] in PROJECT_PACKAGES
          and _module_file(m, root)]
  while todo:
    name = todo.pop()
    if name not in seen:
      seen.add(name)
      todo.extend(project_imports(name, root))
      parts = name.split(".")
      todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))
  return sorted(seen)


def source_files(modules: Iterable[str]) -> List[str]:
  """The source files (relative to the repository) of import_closure."""
  return [os.path.relpath(_module_file(module, REPO_ROOT), REPO_ROOT)
          for module in import_closure(modules)]


def code_fingerprint(modules: Iterable[str]) -> str:
  """A hash of the sources of `modules` and of what they import."""
  digest = hashlib.sha256()
  for path in source_files(modules):
    with open(os.path.join(REPO_ROOT, path), "rb") as f:
      digest.update(path.encode() + b"\0" + f.read())
  return digest.hexdigest()[:16]


def entry_modules(component: Any) -> List[str]:
  """The modules a component (a TFX BaseComponent) runs: its executor's, and those of the project
  functions its execution properties name by dotted path (run_fn,
  tuner_fn, preprocessing_fn)."""
  modules = [component.executor_spec.executor_class.__module__]
  for value in component.exec_properties.values():
    if isinstance(value, str) and value.split(".")[0] in PROJECT_PACKAGES:
      module = value.rpartition(".")[0]
      if _module_file(module, REPO_ROOT):
        modules.append(module)
  return modules


def add_code_fingerprint(component: Any,
                         extra_modules: Sequence[str] = ()) -> None:
  """Puts the fingerprint of the code `component` runs (entry_modules, plus
  `extra_modules` it loads by name, e.g. the Evaluator's TFMA metrics) into
  its execution properties, so the cache key changes with that code."""
  component.exec_properties[CODE_FINGERPRINT] = code_fingerprint(
      entry_modules(component) + list(extra_modules))
