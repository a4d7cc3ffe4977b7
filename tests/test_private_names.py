"""The privacy rule, read from the source (no module is imported). A module of `rcgrpo_jax`

- imports no private name (`_x`, dunders aside) of another of the package's modules
  (`from rcgrpo_jax.a import _x`, relative imports included);
- reads no private attribute of another package module it imported (`mod._x`, whatever alias names
  the module: `import rcgrpo_jax.a as mod`, `from rcgrpo_jax import a`, `import rcgrpo_jax.a` then
  `rcgrpo_jax.a._x`);
- assigns, deletes or `setattr`s no name on another package module (`mod.f = stand_in`: monkeypatching);
- touches no private attribute of an object whose class is defined elsewhere (`obj._x`: read, written, deleted,
  or by `getattr`/`setattr`/`delattr`/`hasattr` with the name written). The approximation, from the text alone:
  `x._n` is a reach-in unless `x` is `self`, `cls` or `super()` inside a class of the same module that defines
  `_n` (in its body, as `self._n = ...`/`cls._n = ...`, or in a base class of the same module), or `x` is a module
  bound by `import m [as n]` or by `from p import m` of a package module, or a dotted path off one (the rules
  above; another distribution's module privates, `np._core`, are not this rule's).
  Another object of the same class counts as foreign: pass what it needs through a public name. Namedtuple's
  public `_replace`, `_asdict`, `_fields`, `_field_defaults` and `_make` are not private.
The modules of experiments/ and benchmarks/ (the tools beside the library) are held to the same rules.

A test may read a private name to test it, but replaces none of another module's (`monkeypatch.setattr(m, "_x",
...)`, `monkeypatch.setattr("a.b._x", ...)`, `mock.patch("a.b._x")`, `patch.object(o, "_x")`, `setattr`,
`o._x = ...`, `del o._x`, by the receiver rule above). What a module offers another is its public names; a seam
that must vary is a parameter or public method of its owner, not a swap of its privates. What stays is in
ALLOWED, one list, each site with its reason.
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


PUBLIC_UNDERSCORED = frozenset({"_replace", "_asdict", "_fields", "_field_defaults", "_make"})  # namedtuple's API
ALLOWED = {  # (file, private name) -> why it stays: the one list of the rule's exceptions
    ("rcgrpo_jax/envs/isolation.py", "_load_scenario"): "BFCL's classes (bfcl_eval) take a scenario only through "
    "their `_load_scenario`, the method BFCL's own executor calls",
    ("rcgrpo_jax/worlds/replay.py", "_load_scenario"): "the same BFCL classes, loaded the way BFCL loads them",
    ("benchmarks/grpo_step.py", "_cache_size"): "jax has no public count of a jitted function's compiled programs; "
    "the benchmark reports whether a step recompiled after its warm-up",
}


def _is_self(node: ast.AST) -> bool:
    """`self`, `cls` or `super()`: the receiver that stands for the enclosing class."""
    if isinstance(node, ast.Name):
        return node.id in ("self", "cls")
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"


def _members(cls: ast.ClassDef, classes: dict[str, ast.ClassDef], seen: tuple[str, ...] = ()) -> set[str]:
    """The names a class defines: in its body, as `self.x = ...`/`cls.x = ...`, and in its bases of the module."""
    out = set()
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    for node in ast.walk(cls):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _is_self(node.value):
            out.add(node.attr)
    for base in cls.bases:
        if isinstance(base, ast.Name) and base.id in classes and base.id not in seen:
            out |= _members(classes[base.id], classes, (*seen, cls.name))
    return out


def _module_names(tree: ast.AST, module: str) -> set[str]:
    """The local names bound to modules: every `import x [as y]`, and `from p import m` where p.m is a package module."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.asname or a.name.partition(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, module) if module in MODULES else (node.module or "")
            out |= {a.asname or a.name for a in node.names if f"{base}.{a.name}" in MODULES}
    return out


def _root(node: ast.AST) -> ast.AST:
    """The start of an attribute chain (`a` of `a.b.c`)."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node


def _named(call: ast.Call, functions: tuple[str, ...]) -> tuple[ast.AST, str] | None:
    """(receiver, name) of `f(obj, "name", ...)` when f (bare or off a module/fixture) is one of `functions`."""
    fn = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", None)
    if fn in functions and len(call.args) >= 2:
        name = call.args[1]
        if isinstance(name, ast.Constant) and isinstance(name.value, str):
            return call.args[0], name.value
    return None


def _dotted_string(call: ast.Call, functions: tuple[str, ...]) -> str | None:
    """The last part of `f("a.b._x", ...)` (monkeypatch's and mock.patch's string form), or None."""
    fn = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", None)
    first = call.args[0] if call.args else None
    if fn in functions and isinstance(first, ast.Constant) and isinstance(first.value, str) and "." in first.value:
        return first.value.rpartition(".")[2]
    return None


def reach_ins(source: str, module: str, *, replaced_only: bool = False) -> list[str]:
    """Each private attribute of a foreign object that `source` (the text of `module`) touches, as 'line: what';
    with `replaced_only` (the tests' rule), each one it replaces or deletes, module privates included."""
    tree = ast.parse(source)
    classes = {c.name: c for c in ast.walk(tree) if isinstance(c, ast.ClassDef)}
    modules = set() if replaced_only else _module_names(tree, module)
    found: list[str] = []

    def check(node: ast.AST, receiver: ast.AST, name: str, cls: ast.ClassDef | None) -> None:
        if not _private(name) or name in PUBLIC_UNDERSCORED:
            return
        if cls is not None and _is_self(receiver) and name in _members(cls, classes):
            return
        root = _root(receiver)
        if isinstance(root, ast.Name) and root.id in modules:  # a module, or a dotted path off one (`np.linalg`)
            return
        found.append(f"{node.lineno}: {ast.unparse(receiver)}.{name}")

    def visit(node: ast.AST, cls: ast.ClassDef | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Attribute) and (not replaced_only or isinstance(child.ctx, (ast.Store, ast.Del))):
                check(child, child.value, child.attr, cls)
            elif isinstance(child, ast.Call):
                # setattr(o, "_x", v), monkeypatch.setattr(o, "_x", v), mock.patch.object(o, "_x"); getattr(o, "_x")
                writers = ("setattr", "delattr", "object")
                named = _named(child, writers if replaced_only else (*writers[:2], "getattr", "hasattr"))
                if named is not None:
                    check(child, *named, cls)
                last = _dotted_string(child, ("setattr", "delattr", "patch")) if replaced_only else None
                if last is not None and _private(last):
                    found.append(f"{child.lineno}: {child.args[0].value}")
            visit(child, child if isinstance(child, ast.ClassDef) else cls)

    visit(tree, None)
    return sorted(set(found), key=lambda s: (int(s.partition(":")[0]), s))


def _files(tops: tuple[str, ...], *, recursive: bool) -> list[str]:
    out = []
    for top in tops:
        for folder, _, files in os.walk(os.path.join(REPO, top)):
            out += [os.path.relpath(os.path.join(folder, f), REPO) for f in sorted(files) if f.endswith(".py")]
            if not recursive:
                break
    return sorted(p.replace(os.sep, "/") for p in out)


def unlisted(paths: list[str], *, replaced_only: bool) -> list[str]:
    """The reach-ins of `paths` that ALLOWED does not list, as 'path:line: what'."""
    out = []
    for path in paths:
        with open(os.path.join(REPO, path)) as f:
            found = reach_ins(
                f.read(), path[: -len(".py")].replace("/", ".").removesuffix(".__init__"), replaced_only=replaced_only
            )
        out += [f"{path}:{v}" for v in found if (path, v.rpartition(".")[2]) not in ALLOWED]
    return out


def test_no_module_touches_a_private_attribute_of_a_foreign_object():
    found = unlisted(_files((PACKAGE,), recursive=True) + _files(TOOLS, recursive=False), replaced_only=False)
    assert not found, (
        f"{len(found)} reach-ins (give the owner a public name, or list the site in ALLOWED):\n" + "\n".join(found)
    )


def test_no_test_replaces_another_modules_private_name():
    found = unlisted(_files(("tests",), recursive=True), replaced_only=True)
    assert not found, (
        f"{len(found)} replaced private names (patch a public seam, or list it in ALLOWED):\n" + "\n".join(found)
    )


def test_every_allowed_site_is_still_there():
    """An ALLOWED entry whose file no longer touches that name is stale: it goes."""
    stale = []
    for path, name in ALLOWED:
        with open(os.path.join(REPO, path)) as f:
            found = reach_ins(f.read(), path[: -len(".py")].replace("/", "."))
        if not any(v.endswith(f".{name}") for v in found):
            stale.append((path, name))
    assert not stale, f"stale entries of ALLOWED: {stale}"


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


@pytest.mark.parametrize(
    "source, expected",
    [
        ("def f(step):\n    return step.updater._grads\n", ["2: step.updater._grads"]),
        ("class A:\n    def f(self, other):\n        return other._x\n    _x = 1\n", ["3: other._x"]),  # same class
        ("class A:\n    def f(self):\n        return self._y\n", ["3: self._y"]),  # defined elsewhere (a base's)
        ("from rcgrpo_jax.train.rl_step import Updater\nUpdater._apply\n", ["2: Updater._apply"]),  # a class
        ("def f(o):\n    return getattr(o, '_x'), hasattr(o, '_y')\n", ["2: o._x", "2: o._y"]),
        ("def f(o):\n    o._x = 1\n    del o._y\n", ["2: o._x", "3: o._y"]),
        ("def f(o):\n    return o.f()._x\n", ["2: o.f()._x"]),
        # allowed: its own members through self/cls/super(), a same-module base's, public and dunder names,
        # namedtuple's API, modules (the other rules)
        ("class A:\n    def __init__(self):\n        self._x = 1\n    def f(self):\n        return self._x\n", []),
        ("class A:\n    _n = 0\n    @classmethod\n    def f(cls):\n        return cls._n\n", []),
        ("class A:\n    def _g(self):\n        pass\nclass B(A):\n    def f(self):\n        super()._g()\n", []),
        ("def f(o):\n    return o.x, o.__dict__, o._replace(a=1)\n", []),
        ("import numpy as np\nnp._core\nimport jax\njax.lax._x\n", []),
    ],
)
def test_the_object_rule_sees_each_form(source, expected):
    """The reach-in checker on probes standing as `benchmarks.grpo_step` (a tool: no module of the package)."""
    assert reach_ins(source, "benchmarks.grpo_step") == expected


@pytest.mark.parametrize(
    "source, expected",
    [
        ("def t(monkeypatch, policy):\n    monkeypatch.setattr(policy, '_start', f)\n", ["2: policy._start"]),
        ("def t(monkeypatch):\n    monkeypatch.setattr('rcgrpo_jax.a._x', f)\n", ["2: rcgrpo_jax.a._x"]),
        ("from unittest import mock\nmock.patch('rcgrpo_jax.a._x')\n", ["2: rcgrpo_jax.a._x"]),
        ("from unittest import mock\nmock.patch.object(s, '_x', 1)\n", ["2: s._x"]),
        ("from rcgrpo_jax.sampling import session\nsession._put = f\n", ["2: session._put"]),  # a module's too
        ("def t(p):\n    p._start = f\n    setattr(p, '_go', g)\n", ["2: p._start", "3: p._go"]),
        # allowed: reading a private name (to test it), replacing a public one, a test's own class
        ("def t(p):\n    return p._start\n", []),
        ("def t(monkeypatch, m):\n    monkeypatch.setattr(m, 'start', f)\n    m.start = f\n", []),
        ("class Fake:\n    def __init__(self):\n        self._n = 0\n    def bump(self):\n        self._n += 1\n", []),
    ],
)
def test_the_tests_rule_sees_each_form(source, expected):
    assert reach_ins(source, "tests.probe", replaced_only=True) == expected
