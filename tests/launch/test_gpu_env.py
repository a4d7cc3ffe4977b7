"""What the GPU box must provide, checked statically: the import closure of benchmarks.gpu (what
launch/gpu_check.sh runs) is met by the image's package list (launch/gpu_image_packages.txt) plus the
wheel folder's (launch/gpu_wheels.txt), through launch/gpu_env.py's explicit distribution -> module table;
and the wheel folder check (launch/wheels.sh's last step) rejects what cannot travel."""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import io
import os
import sys
import zipfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("gpu_env", os.path.join(REPO, "launch", "gpu_env.py"))
gpu_env = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_env)


def _module_file(name: str) -> str | None:
    path = os.path.join(REPO, *name.split("."))
    if os.path.isfile(os.path.join(path, "__init__.py")):
        return os.path.join(path, "__init__.py")
    return path + ".py" if os.path.isfile(path + ".py") else None


def import_closure(
    root: str, packages: tuple[str, ...] = ("rcgrpo_jax", "benchmarks", "experiments")
) -> tuple[set[str], dict[str, set[str]]]:
    """(this checkout's modules (of `packages`: the library and the tools beside it) reachable from `root`, third-party top-level module -> the modules importing
    it). Follows every import statement anywhere in a module (inside functions too), relative ones,
    `from pkg import submodule`, the parent packages a submodule import runs, and importlib.import_module
    of a literal name; the standard library aside."""
    seen: set[str] = set()
    third: dict[str, set[str]] = {}
    todo = [root]
    while todo:
        mod = todo.pop()
        if mod in seen:
            continue
        seen.add(mod)
        parts = mod.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]
        path = _module_file(mod)
        assert path is not None, f"{mod}: no such module in the checkout"
        here = parts if path.endswith("__init__.py") else parts[:-1]
        for node in ast.walk(ast.parse(open(path).read(), path)):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here[: len(here) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module
                names = [target] + [f"{target}.{a.name}" for a in node.names]
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "import_module"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                names = [node.args[0].value]
            for name in names:
                top = name.split(".")[0]
                if top in packages:
                    if _module_file(name) is not None:  # a module, not a name defined in one
                        todo.append(name)
                elif top != "__future__" and top not in sys.stdlib_module_names:
                    third.setdefault(top, set()).add(mod)
    return seen, third


def provided(lists: list[list[tuple[str, str]]]) -> set[str]:
    """The top-level modules the distributions of `lists` provide."""
    return {m.split(".")[0] for dists in lists for name, _ in dists for m in gpu_env.import_names(name)}


def test_bench_gpu_imports_are_on_the_image_or_in_the_wheel_folder():
    modules, third = import_closure("benchmarks.gpu")
    # what the check exercises: the RL update's modules (the rl_step row) and the sampler's
    assert {"rcgrpo_jax.train.rl_step", "rcgrpo_jax.rl.losses", "rcgrpo_jax.sampling.decode_step"} <= modules
    assert {"jax", "numpy", "flax", "optax", "ml_collections"} <= set(third)
    image = gpu_env.read_list(gpu_env.IMAGE_LIST)
    wheels = gpu_env.read_list(gpu_env.WHEEL_LIST)
    unmet = {m: sorted(third[m]) for m in third if m not in provided([image, wheels])}
    assert unmet == {}, f"imported by benchmarks.gpu's closure, on neither list: {unmet}"
    # the check reads the lists: without the ml-collections wheel, the RL modules' import is unmet
    without = [(n, v) for n, v in wheels if n != "ml-collections"]
    assert {m for m in third if m not in provided([image, without])} == {"ml_collections"}


def test_the_package_needs_only_what_the_two_lists_hold():
    """setup_env.sh --gpu's last check (every install_requires module and bfcl_eval) can pass on the box."""
    have = {n for lst in (gpu_env.IMAGE_LIST, gpu_env.WHEEL_LIST) for n, _ in gpu_env.read_list(lst)}
    needs = gpu_env.package_needs()
    assert {"jax", "ml-collections", "tensorboardx", "bfcl-eval"} <= set(needs)
    assert sorted(set(needs) - have) == []


def test_every_listed_distribution_maps_to_its_modules_explicitly():
    image = gpu_env.read_list(gpu_env.IMAGE_LIST)
    wheels = gpu_env.read_list(gpu_env.WHEEL_LIST)
    names = [n for n, _ in image + wheels] + gpu_env.package_needs()
    assert [n for n in names if n not in gpu_env.IMPORTS] == []
    assert set(dict(image)).isdisjoint(dict(wheels))  # the wheel folder holds only what the image lacks
    assert gpu_env.import_names("ml-collections") == ("ml_collections",)
    assert gpu_env.import_names("orbax-checkpoint")[0] == "orbax.checkpoint"
    assert gpu_env.import_names("absl_py") == ("absl",)  # any spelling of a name
    with pytest.raises(KeyError, match="no import names for distribution 'left-pad'"):
        gpu_env.import_names("left-pad")
    # the image's Python and its CUDA jax, as recorded
    assert dict(image)["jax"] == "0.11.2" and "jax-cuda13-plugin" in dict(image) and "torch" in dict(image)
    assert not {"ml-collections", "tensorboardx", "bfcl-eval"} & set(dict(image))


def test_lists_reject_malformed_lines_and_cuda_builds(tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_text("# fine\nml-collections==1.1.0\ntensorboardX>=2\n")
    with pytest.raises(ValueError, match=r"bad.txt:3: expected name==version, got 'tensorboardX>=2'"):
        gpu_env.read_list(str(bad))
    cuda = tmp_path / "cuda.txt"
    cuda.write_text("mpmath==1.3.0\nnvidia-cublas==13.0\n")
    assert gpu_env.cmd_missing(str(cuda)) == 1
    out = capsys.readouterr()
    assert out.out == "" and "nvidia-cublas is never installed" in out.err


def _wheel(folder, filename: str, requires: list[str], payload: int = 10) -> None:
    name, version = filename.split("-")[:2]
    info = f"{name}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires
    )
    with zipfile.ZipFile(os.path.join(folder, filename), "w") as z:
        z.writestr(f"{info}/METADATA", meta)
        z.writestr(f"{name}/__init__.py", "x" * payload)


def _check(folder) -> tuple[int, list[str]]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = gpu_env.cmd_wheels(str(folder))
    return rc, err.getvalue().splitlines()


# tokamax's wheels as downloaded (wheels.sh): pure but pydantic-core, built for the box's CPython 3.12 on x86-64
TOKAMAX_WHEELS = {
    "tokamax-0.0.12-py3-none-any.whl": ["absl-py", "einshape", "jax", "jaxlib", "jaxtyping", "pydantic", "qwix"]
    + ["tqdm", "typing_extensions", "typeguard==2.13.3", "immutabledict", "tensorboardx"],
    "qwix-0.1.8-py3-none-any.whl": ["absl-py", "flax", "jax", "jaxlib", "numpy", "opt_einsum"],
    "einshape-1.0-py3-none-any.whl": ["absl-py", "numpy"],
    "immutabledict-4.3.1-py3-none-any.whl": [],
    "typeguard-2.13.3-py3-none-any.whl": [],
    "pydantic-2.14.4-py3-none-any.whl": ["annotated-types", "pydantic-core", "typing-extensions", "typing-inspection"],
    "pydantic_core-2.50.5-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.whl": ["typing-extensions"],
    "annotated_types-0.8.0-py3-none-any.whl": [],
    "typing_inspection-0.4.5-py3-none-any.whl": ["typing-extensions"],
}


def _tokamax_wheels(folder) -> None:
    for f, requires in TOKAMAX_WHEELS.items():
        _wheel(folder, f, requires)


def test_the_wheel_folder_check(tmp_path, monkeypatch):
    folder = tmp_path / "wheels"
    folder.mkdir()
    markers = [
        "absl-py",
        "PyYAML>=6",
        'pytest ; extra == "test"',  # an extra: not needed
        'tomli ; python_version < "3.11"',  # not on the box's 3.12
        'typing-extensions ; python_version >= "3.8"',  # on the image
    ]
    _wheel(folder, "ml_collections-1.1.0-py3-none-any.whl", markers)
    _wheel(folder, "tensorboardX-2.6.5-py3-none-any.whl", ["numpy", "protobuf>=3.20", "packaging"])
    _wheel(folder, "bfcl_eval-2026.3.23-py3-none-any.whl", ["openai", "anthropic"])  # installed --no-deps
    _wheel(folder, "mpmath-1.3.0-py3-none-any.whl", [])
    _tokamax_wheels(folder)
    assert _check(folder) == (0, [])

    _wheel(folder, "mpmath-1.3.0-py3-none-any.whl", ["left-pad"])
    _wheel(folder, "tensorboardX-2.6.5-py3-none-any.whl", ['gmpy2 ; python_version >= "3.12"'])
    os.remove(folder / "ml_collections-1.1.0-py3-none-any.whl")
    _wheel(folder, "ml_collections-1.0.0-py3-none-any.whl", [])
    _wheel(folder, "kiwisolver-1.5.1-cp312-cp312-manylinux_2_17_x86_64.whl", [])
    rc, problems = _check(folder)
    assert rc == 1
    assert sorted(problems) == sorted(
        [
            "kiwisolver-1.5.1-cp312-cp312-manylinux_2_17_x86_64.whl: not a pure-Python wheel"
            " (the box takes no compiled builds from here)",
            "ml-collections==1.1.0: the folder holds ml_collections-1.0.0-py3-none-any.whl",
            "mpmath-1.3.0-py3-none-any.whl requires left-pad: neither on the image list nor in the folder",
            "tensorboardX-2.6.5-py3-none-any.whl requires gmpy2: neither on the image list nor in the folder",
        ]
    )

    small = tmp_path / "small"
    small.mkdir()
    for f in ("ml_collections-1.1.0", "tensorboardX-2.6.5", "bfcl_eval-2026.3.23", "mpmath-1.3.0"):
        _wheel(small, f + "-py3-none-any.whl", [], payload=1000)
    _tokamax_wheels(small)
    monkeypatch.setattr(gpu_env, "WHEEL_FOLDER_LIMIT", 2000)
    rc, problems = _check(small)
    assert rc == 1 and len(problems) == 1 and "over the 64 MiB" in problems[0]


def test_wheels_sh_downloads_the_list_for_python_3_12_then_checks_the_folder(tmp_path):
    """launch/wheels.sh with a PYTHON whose `pip download` is recorded and served from a local folder (no
    network in tests): the one pip call it makes, then its check of what came down."""
    import stat
    import subprocess

    served = tmp_path / "served"
    served.mkdir()
    for f in ("ml_collections-1.1.0", "tensorboardX-2.6.5", "bfcl_eval-2026.3.23", "mpmath-1.3.0"):
        _wheel(served, f + "-py3-none-any.whl", [])
    _tokamax_wheels(served)
    log = tmp_path / "pip.log"
    python = tmp_path / "python"
    python.write_text(
        "#!/usr/bin/env bash\n"
        'if [ "$1 $2 $3" = "-m pip download" ]; then\n'
        f'  echo "$*" >> {log}\n'
        '  while [ $# -gt 0 ]; do [ "$1" = --dest ] && dest="$2"; shift; done\n'
        f'  cp {served}/*.whl "$dest"/; exit 0\n'
        "fi\n"
        f'exec {sys.executable} "$@"\n'
    )
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    script = os.path.join(REPO, "launch", "wheels.sh")
    run = lambda d: subprocess.run(
        ["bash", script, str(d)], env={**os.environ, "PYTHON": str(python)}, capture_output=True, text=True
    )
    out = run(tmp_path / "wheels")
    assert out.returncode == 0, out.stderr
    assert '"ok": true' in out.stdout and f'"wheels": {4 + len(TOKAMAX_WHEELS)}' in out.stdout
    listed = gpu_env.read_list(gpu_env.WHEEL_LIST)
    pure = " ".join(f"{n}=={v}" for n, v in listed if n not in gpu_env.COMPILED)
    compiled = " ".join(f"{n}=={v}" for n, v in listed if n in gpu_env.COMPILED)
    assert compiled == "pydantic-core==2.50.5"
    assert open(log).read().splitlines() == [
        "-m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation py"
        f" --dest {tmp_path / 'wheels'} {pure}",
        "-m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312"
        f" --platform manylinux2014_x86_64 --dest {tmp_path / 'wheels'} {compiled}",
    ]
    _wheel(served, "kiwisolver-1.5.1-cp312-cp312-manylinux_2_17_x86_64.whl", [])  # a compiled build came too
    out = run(tmp_path / "more")
    assert out.returncode == 1 and "kiwisolver-1.5.1-cp312-cp312-manylinux_2_17_x86_64.whl: not a pure" in out.stderr


# Reuse mode's version check (setup_env.sh --gpu; the shell's side: tests/launch/test_setup_env.py)


def test_setup_py_states_what_the_checked_libraries_need():
    required = gpu_env.requirements()
    assert set(gpu_env.VERSION_CHECKED) <= set(required)
    assert required["jax"] == ">=0.10,<0.13" and required["flax"] == ">=0.12"
    assert required["transformers"] == ">=4.50" and required["optax"] == ""
    assert gpu_env.install_requires() == list(required)
    assert gpu_env.requirement_specifier('jax[cuda13] >= 0.10, <0.13 ; python_version>="3.11"') == ">=0.10,<0.13"
    assert gpu_env.requirement_specifier("chex") == ""


@pytest.mark.parametrize(
    "version, specifier, ok",
    [
        ("0.12.0", ">=0.12", True),
        ("0.12", ">=0.12.0", True),  # trailing zeros do not count
        ("0.11.9", ">=0.12", False),
        ("0.12.12", ">=0.12", True),  # numbers, not strings: 12 > 9
        ("0.9.2", ">=0.10,<0.13", False),
        ("0.13.0", ">=0.10,<0.13", False),
        ("0.12.1", ">=0.10,<0.13", True),
        ("0.12.0rc1", ">=0.12", False),  # a release candidate precedes its release
        ("4.57.0.dev0", ">=4.50", True),
        ("0.11.2+cuda13", "==0.11.2", True),  # a local part is ignored
        ("2.0", "!=2.0.0", False),
        ("1.0", "", True),  # no specifier: any version
    ],
)
def test_versions_compare_by_release_numbers(version, specifier, ok):
    assert gpu_env.satisfies(version, specifier) is ok


def test_unsupported_specifiers_are_refused_not_guessed():
    for spec in ("~=0.12", "==0.12.*", ">=0.12 junk"):
        with pytest.raises(ValueError, match="not supported"):
            gpu_env.satisfies("0.12.0", spec)
    with pytest.raises(ValueError, match="not a version"):
        gpu_env.version_key("unknown")


@pytest.mark.parametrize(
    "name, installed, required, pin, action, detail",
    [
        ("flax", "0.12.12", ">=0.12", None, "keep", ""),
        ("optax", "0.0.1", "", None, "keep", ""),  # setup.py asks for any version
        ("flax", "0.11.3", ">=0.12", "0.12.12", "install", "flax==0.12.12"),  # too old: the pin
        ("chex", None, "", "0.1.92", "install", "chex==0.1.92"),  # missing: the pin
        ("transformers", "4.49.0", ">=4.50", None, "refuse", "pins no transformers"),
        ("flax", "0.11.3", ">=0.12", "0.11.4", "refuse", "flax==0.11.4 does not meet it either"),
        ("jax", "0.9.2", ">=0.10,<0.13", "0.11.2", "refuse", "never replaced"),  # the image's CUDA build
    ],
)
def test_each_library_is_kept_upgraded_to_its_pin_or_refused(name, installed, required, pin, action, detail):
    check = gpu_env.decide(name, installed, required, pin)
    assert check.action == action
    assert detail in (check.pin if action == "install" else check.why)
    line = check.line()
    assert line.startswith(f"{name}: " + (f"installed {installed}; " if installed else "not installed; "))
    assert f"setup.py needs {required or 'any version'}; " in line
    assert line.endswith({"keep": "; keep", "install": f"; install {check.pin}"}.get(action, check.why))


def test_the_recorded_image_and_the_wheel_pins_meet_setup_py():
    """On the box as recorded (launch/gpu_image_packages.txt) every checked library is kept; every pin of the
    wheel list that setup.py names meets its requirement."""
    required = gpu_env.requirements()
    image = dict(gpu_env.read_list(gpu_env.IMAGE_LIST))
    for name in gpu_env.VERSION_CHECKED:
        assert gpu_env.decide(name, image[name], required[name], None).action == "keep", name
    for name, version in gpu_env.read_list(gpu_env.WHEEL_LIST):
        assert gpu_env.satisfies(version, required.get(name, "")), f"{name}=={version}"
