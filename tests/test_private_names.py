"""The package's privacy rule, read from the source (no module is imported): a module of `rcgrpo_jax`

- imports no private name (`_x`, dunders aside) of another of the package's modules
  (`from rcgrpo_jax.a import _x`, relative imports included);
- reads no private attribute of another package module it imported (`mod._x`, whatever alias names
  the module: `import rcgrpo_jax.a as mod`, `from rcgrpo_jax import a`, `import rcgrpo_jax.a` then
  `rcgrpo_jax.a._x`);
- assigns, deletes or `setattr`s no name on another package module (`mod.f = stand_in`: monkeypatching).

What a module offers another is its public names; a seam that must vary (the dry run's memory-plan stand-ins)
is a parameter of the owning module, not a swap of its globals.
"""

from __future__ import annotations

import ast
import os

import pytest

from tests.test_imports import MODULES, PACKAGE, REPO


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _absolute(node: ast.ImportFrom, module: str) -> str:
    """The dotted module an ImportFrom in `module` reads from (relative imports resolved)."""
    base = node.module or ""
    if not node.level:
        return base
    package = module if MODULES[module].endswith("__init__.py") else module.rpartition(".")[0]
    parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
    return ".".join(parts + ([base] if base else []))


def _in_package(name: str) -> bool:
    return name == PACKAGE or name.startswith(PACKAGE + ".")


def _aliases(tree: ast.AST, module: str) -> dict[str, str]:
    """Local name -> the package module it is bound to, for every import in the module (at any depth)."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if _in_package(a.name):
                    if a.asname:
                        out[a.asname] = a.name
                    else:  # `import rcgrpo_jax.a.b` binds `rcgrpo_jax`; its chain resolves in `_dotted`
                        out[a.name.partition(".")[0]] = PACKAGE
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, module)
            if not _in_package(base):
                continue
            for a in node.names:
                if f"{base}.{a.name}" in MODULES:
                    out[a.asname or a.name] = f"{base}.{a.name}"
    return out


def _dotted(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """The package module an expression names (`mod`, `rcgrpo_jax.a.b`), or None."""
    if isinstance(node, ast.Name):
        return aliases.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, aliases)
        if base is not None and f"{base}.{node.attr}" in MODULES:
            return f"{base}.{node.attr}"
    return None


def violations(source: str, module: str) -> list[str]:
    """Each breach of the rule in `source` (the text of package module `module`), as 'line: what'."""
    tree = ast.parse(source)
    aliases = _aliases(tree, module)
    found: list[str] = []

    def other(target: str | None) -> bool:
        return target is not None and target != module

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = _absolute(node, module)
            if _in_package(base) and base != module:
                for a in node.names:
                    if _private(a.name):
                        found.append(f"{node.lineno}: imports {base}.{a.name}")
        elif isinstance(node, ast.Attribute):
            owner = _dotted(node.value, aliases)
            if other(owner) and isinstance(node.ctx, (ast.Store, ast.Del)):
                found.append(f"{node.lineno}: replaces {owner}.{node.attr}")
            elif other(owner) and _private(node.attr):
                found.append(f"{node.lineno}: reads {owner}.{node.attr}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"):
            if node.args and other(_dotted(node.args[0], aliases)):
                found.append(f"{node.lineno}: {node.func.id} on {_dotted(node.args[0], aliases)}")
    return sorted(set(found), key=lambda s: int(s.partition(":")[0]))


def all_violations() -> list[str]:
    out = []
    for module, path in sorted(MODULES.items()):
        with open(path) as f:
            out += [f"{os.path.relpath(path, REPO)}:{v}" for v in violations(f.read(), module)]
    return out


TOOLS = ("experiments", "benchmarks")  # beside the library: held to the same rule towards it


def tool_violations() -> list[str]:
    out = []
    for top in TOOLS:
        for name in sorted(os.listdir(os.path.join(REPO, top))):
            if name.endswith(".py"):
                path = os.path.join(REPO, top, name)
                with open(path) as f:
                    out += [f"{top}/{name}:{v}" for v in violations(f.read(), f"{top}.{name[:-3]}")]
    return out


def test_the_tools_beside_the_library_use_only_its_public_names():
    found = tool_violations()
    assert not found, f"{len(found)} uses of the library's private names:\n" + "\n".join(found)


def test_no_module_uses_or_replaces_another_modules_private_names():
    found = all_violations()
    assert not found, f"{len(found)} uses of another module's private names (make them public):\n" + "\n".join(found)


@pytest.mark.parametrize(
    "source, expected",
    [
        (
            "from rcgrpo_jax.sampling.decode_loop import _decode\n",
            ["1: imports rcgrpo_jax.sampling.decode_loop._decode"],
        ),
        ("from .decode_loop import _decode, Sampler\n", ["1: imports rcgrpo_jax.sampling.decode_loop._decode"]),
        (
            "import rcgrpo_jax.sampling.decode_loop as s\ns._decode(1)\n",
            ["2: reads rcgrpo_jax.sampling.decode_loop._decode"],
        ),
        (
            "from rcgrpo_jax.sampling import decode_loop\ndecode_loop._decode\n",
            ["2: reads rcgrpo_jax.sampling.decode_loop._decode"],
        ),
        (
            "import rcgrpo_jax.sampling.decode_loop\nrcgrpo_jax.sampling.decode_loop._x\n",
            ["2: reads rcgrpo_jax.sampling.decode_loop._x"],
        ),
        (
            "from rcgrpo_jax.models import attention as a\na.attention = f\n",
            ["2: replaces rcgrpo_jax.models.attention.attention"],
        ),
        (
            "from rcgrpo_jax.sampling import session\nsession._put, x = 1, 2\n",
            ["2: replaces rcgrpo_jax.sampling.session._put"],
        ),
        (
            "from rcgrpo_jax.sampling import session\nsetattr(session, 'f', g)\n",
            ["2: setattr on rcgrpo_jax.sampling.session"],
        ),
        # allowed: public names, dunders, a module's own privates, other objects' privates, third-party privates
        ("from rcgrpo_jax.sampling import decode_loop\ndecode_loop.Sampler, decode_loop.__name__\n", []),
        ("from rcgrpo_jax.sampling.decode_step import _write\n", []),  # the module itself (below)
        ("import numpy as np\nnp._core\nx = object()\nx._y = 1\n", []),
        ("def f(session):\n    return session._programs\n", []),  # a parameter, not the module
    ],
)
def test_the_rule_sees_each_form(source, expected):
    """The checker itself, on a probe that stands as `rcgrpo_jax.sampling.decode_step`."""
    assert violations(source, "rcgrpo_jax.sampling.decode_step") == expected


def test_a_tool_is_held_to_the_rule():
    """A probe standing as `benchmarks.gpu`: the library's privates are as closed to it as to the library."""
    assert violations("from rcgrpo_jax.sampling import session\nsession._x\n", "benchmarks.gpu") == [
        "2: reads rcgrpo_jax.sampling.session._x"
    ]
