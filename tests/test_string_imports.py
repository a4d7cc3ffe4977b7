"""No module of rcgrpo_jax/, experiments/ or benchmarks/ loads a module of this checkout by a string. A string
import hides its arrow from the import graph (tests/test_imports.py): a circle or a call up a floor that no
check sees. Read from the source (nothing is imported). The calls that import by a string:
`importlib.import_module`, `__import__` (either bare or off a module), `runpy.run_module`, `runpy.run_path`
and `importlib.util.spec_from_file_location` (the last two load a file by its path).

- A module name written in the call (a literal, or an f-string's literal head) that starts with one of this
  checkout's top-level packages or modules (`rcgrpo_jax`, `configs`, `experiments`, ...; a relative name) is an
  offence wherever it stands.
- A name computed at run time is an offence unless its site (file, function) is in ALLOWED, with the reason:
  the `module:entry` names that users pass on the command line (a user's own module registers its entry),
  and the computed names of modules that are not this checkout's (bfcl_eval's classes, the user's copy of
  API-Bank), which are no arrows of its graph. A path loader (`run_path`, `spec_from_file_location`) counts
  as computed.
- A literal naming another distribution's module (`apis.api`) is no offence.
"""

from __future__ import annotations

import ast
import os

import pytest

from tests.test_imports import REPO

SCANNED = ("rcgrpo_jax", "experiments", "benchmarks")
BY_NAME = ("import_module", "__import__", "run_module")  # the first argument is a dotted module name
BY_PATH = ("run_path", "spec_from_file_location")
ALLOWED = {
    ("rcgrpo_jax/registry.py", "entry_name"): "a registry entry given as `module:entry` in a config or on the "
    "command line: the user's module is imported so that it registers the entry",
    ("rcgrpo_jax/main.py", "import_user_modules"): "the launcher imports the module of every "
    "`--config.<field>=module:entry` override before it builds the config (main's docstring)",
    ("rcgrpo_jax/envs/isolation.py", "import_bfcl"): "bfcl_eval's modules, an optional third-party package "
    "imported on use so a missing install names its pip command",
    ("rcgrpo_jax/envs/api_bank.py", "load_catalog"): "the API classes of the user's own copy of API-Bank "
    "(`apis/*.py` of eval.api_bank.path), not modules of this checkout",
    ("rcgrpo_jax/worlds/replay.py", "make_instances"): "bfcl_eval's multi-turn classes, by the module "
    "names of BFCL's own table (CLASS_FILE_PATH_MAPPING)",
}


def _project_names() -> frozenset[str]:
    """This checkout's top-level importable names: its folders that hold Python files, and its .py files."""
    out = set()
    for entry in os.listdir(REPO):
        path = os.path.join(REPO, entry)
        if entry.endswith(".py"):
            out.add(entry[:-3])
        elif os.path.isdir(path) and not entry.startswith(".") and any(f.endswith(".py") for f in os.listdir(path)):
            out.add(entry)
    return frozenset(out)


PROJECT = _project_names()


def _called(node: ast.Call) -> str | None:
    """The importing function a call names (`importlib.import_module(...)`, `import_module(...)`), or None."""
    name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
    return name if name in BY_NAME + BY_PATH else None


def _written_name(arg: ast.expr) -> str | None:
    """The module name as written: a literal, or an f-string's literal head; None when computed."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
        return str(arg.values[0].value)
    return None


def string_imports(source: str, path: str) -> list[str]:
    """Each string import of `source` (the file at `path`, relative to the checkout) that the rules forbid,
    as 'path:line: what'."""
    found: list[str] = []

    def visit(node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = scope
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = f"{scope}.{child.name}" if scope else child.name
            if isinstance(child, ast.Call) and (fn := _called(child)):
                text = ast.unparse(child)
                written = _written_name(child.args[0]) if fn in BY_NAME and child.args else None
                if written is not None:
                    if written.startswith(".") or written.split(".")[0] in PROJECT:
                        found.append(f"{path}:{child.lineno}: {text} loads this checkout's module by a string")
                elif (path, scope.rpartition(".")[2] if scope else "<module>") not in ALLOWED:
                    found.append(f"{path}:{child.lineno}: {text} imports a computed name (in {scope or 'the module'})")
            visit(child, inner)

    visit(ast.parse(source), "")
    return found


def _files() -> list[str]:
    out = []
    for top in SCANNED:
        for folder, _, files in os.walk(os.path.join(REPO, top)):
            out += [os.path.relpath(os.path.join(folder, f), REPO) for f in sorted(files) if f.endswith(".py")]
    return sorted(out)


def all_string_imports() -> list[str]:
    out = []
    for path in _files():
        with open(os.path.join(REPO, path)) as f:
            out += string_imports(f.read(), path.replace(os.sep, "/"))
    return out


def test_no_string_import_of_this_checkouts_modules():
    found = all_string_imports()
    assert not found, f"{len(found)} string imports (import the module by a statement):\n" + "\n".join(found)


def test_every_allowed_site_still_imports_by_a_computed_name():
    """An entry of ALLOWED whose function no longer makes a string import is stale: it goes."""
    sites = set()
    for path in {p for p, _ in ALLOWED}:
        with open(os.path.join(REPO, path)) as f:
            tree = ast.parse(f.read())
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if any(isinstance(c, ast.Call) and _called(c) for c in ast.walk(fn)):
                    sites.add((path, fn.name))
    assert set(ALLOWED) <= sites, f"stale entries: {sorted(set(ALLOWED) - sites)}"


def test_the_project_names_are_found():
    assert {"rcgrpo_jax", "configs", "experiments", "benchmarks", "tests"} <= PROJECT and "json" not in PROJECT


@pytest.mark.parametrize(
    "source, expected",
    [
        ("import importlib\nimportlib.import_module('rcgrpo_jax.eval.run')\n", 1),
        ("from importlib import import_module\nimport_module('configs.sft')\n", 1),
        ("import importlib\ndef f(s):\n    return importlib.import_module(f'configs.{s}')\n", 1),
        ("__import__('experiments.ablation')\n", 1),
        ("import importlib\nimportlib.import_module('.run', 'rcgrpo_jax.eval')\n", 1),
        ("import importlib\ndef g(name):\n    return importlib.import_module(name)\n", 1),  # computed, not allowed
        ("import runpy\nrunpy.run_path('benchmarks/gpu.py')\n", 1),
        ("import importlib.util as u\nu.spec_from_file_location('x', 'launch/gpu_env.py')\n", 1),
        # no offence: another distribution's module by a literal, an allowed site, importlib's other functions
        ("import importlib\nimportlib.import_module('apis.api')\n", 0),
        ("import importlib\ndef entry_name(name):\n    importlib.import_module(name)\n", 0),
        ("import importlib.util\nimportlib.util.find_spec('tokamax')\n", 0),
    ],
)
def test_the_rule_sees_each_form(source, expected):
    """The checker on probes; the last but two stands as rcgrpo_jax/registry.py, the others as rcgrpo_jax/probe.py."""
    path = "rcgrpo_jax/registry.py" if "entry_name" in source else "rcgrpo_jax/probe.py"
    assert len(string_imports(source, path)) == expected, string_imports(source, path)
