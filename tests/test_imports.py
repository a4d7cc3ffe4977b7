"""The package's import rule, read from the source (no module is imported):

- no module imports another of the package's modules inside a function, unless the statement's line carries
  a `# heavy: <dependency>` comment saying which heavy optional dependency the deferral keeps out;
- the module-level import graph (a submodule import counts as importing its parent packages too) has no cycle;
- `config_fields` (the errors and the field accessors every check stands on) imports nothing of the package.
"""

from __future__ import annotations

import ast
import os
import re

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "rcgrpo_jax"
HEAVY = re.compile(r"#\s*heavy:\s*\S")


def _modules() -> dict[str, str]:
    """dotted module name -> file path, for every module of the package."""
    out = {}
    for folder, _, files in os.walk(os.path.join(REPO, PACKAGE)):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                dotted = os.path.relpath(path, REPO)[: -len(".py")].replace(os.sep, ".")
                out[dotted.removesuffix(".__init__")] = path
    return out


MODULES = _modules()


def _known(name: str) -> str | None:
    """The longest prefix of `name` that is one of the package's modules."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _targets(node: ast.Import | ast.ImportFrom, module: str) -> list[str]:
    """The package modules an import statement in `module` loads (empty for a third-party import)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = module if MODULES[module].endswith("__init__.py") else module.rpartition(".")[0]
            parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
            base = ".".join(parts + ([base] if base else []))
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
    return [t for t in map(_known, (n for n in names if n == PACKAGE or n.startswith(PACKAGE + "."))) if t]


def _imports(module: str) -> list[tuple[ast.stmt, bool]]:
    """Every import statement of `module` with whether it sits inside a function (TYPE_CHECKING blocks skipped)."""
    tree = ast.parse(open(MODULES[module]).read())
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and isinstance(child.test, ast.Name) and child.test.id == "TYPE_CHECKING":
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append((child, in_function))
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(tree, False)
    return found


def _graph() -> dict[str, set[str]]:
    """module -> the package modules its module-level imports load, parent packages included."""
    graph = {}
    for module in MODULES:
        own_parents = {module.rsplit(".", k)[0] for k in range(1, module.count(".") + 1)}
        edges = set()
        for node, in_function in _imports(module):
            if in_function:
                continue
            for target in _targets(node, module):
                parents = {target.rsplit(".", k)[0] for k in range(1, target.count(".") + 1)}
                edges |= ({target} | parents) - own_parents - {module}
        graph[module] = edges
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as a path [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_package_is_found():
    assert len(MODULES) > 100 and "rcgrpo_jax.main" in MODULES and "rcgrpo_jax.config_fields" in MODULES


def test_no_package_import_inside_a_function_without_a_heavy_comment():
    offenders = []
    for module, path in MODULES.items():
        lines = open(path).read().splitlines()
        for node, in_function in _imports(module):
            if in_function and _targets(node, module):
                text = "\n".join(lines[node.lineno - 1 : node.end_lineno])
                if not HEAVY.search(text):
                    offenders.append(f"{os.path.relpath(path, REPO)}:{node.lineno}: {text.strip()}")
    assert not offenders, "move these imports to the top of the module:\n" + "\n".join(offenders)


def test_the_import_graph_has_no_cycle():
    assert _cycle(_graph()) is None, " -> ".join(_cycle(_graph()))


def test_config_fields_is_a_leaf():
    assert _graph()["rcgrpo_jax.config_fields"] == set()


@pytest.mark.parametrize(
    "source, expected",
    [
        ("def f():\n    from rcgrpo_jax.envs import bfcl\n", ["rcgrpo_jax.envs.bfcl"]),
        ("def f():\n    import json\n", []),
    ],
)
def test_the_rule_sees_an_import_inside_a_function(tmp_path, monkeypatch, source, expected):
    """The checker itself: a function-level import of a package module is found, a third-party one is not."""
    path = tmp_path / "probe.py"
    path.write_text(source)
    monkeypatch.setitem(MODULES, "rcgrpo_jax.probe", str(path))
    (node, in_function), *_ = _imports("rcgrpo_jax.probe")
    assert in_function and _targets(node, "rcgrpo_jax.probe") == expected


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None
