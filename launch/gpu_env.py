"""The GPU environment's helper (standard library only, it runs before anything is installed; `wheels` also
reads markers with pip's packaging).

    python launch/gpu_env.py missing LIST            the lines of LIST (name==version) not installed here, and
                                                     LIST's pin of each VERSION_CHECKED library older here than
                                                     setup.py requires
    python launch/gpu_env.py versions LIST           each VERSION_CHECKED library: the version here, setup.py's
                                                     requirement, and keep / install LIST's pin / REFUSED
                                                     (exit 1 when any is refused)
    python launch/gpu_env.py overlay VENV ROOT       make VENV (a venv of this Python's base) see this
                                                     Python's site-packages and the checkout ROOT (.pth files)
    python launch/gpu_env.py check [--gpu]           import every module the package needs; with --gpu, also
                                                     require jax.default_backend() == "gpu" on a GPU host
    python launch/gpu_env.py wheels DIR              check a wheel folder (launch/wheels.sh): pure-Python
                                                     wheels, under 64 MiB, their dependencies met
    python launch/gpu_env.py installed               every installed distribution, name==version (JSON)

launch/setup_env.sh --gpu, launch/wheels.sh and launch/gpu_check.sh call it; tests/launch read its tables.
The two lists it reads: launch/gpu_image_packages.txt (what the GPU test box's python3 holds: the project's
record of the image) and launch/gpu_wheels.txt (what the box lacks: the wheel folder's contents).
"""

from __future__ import annotations

import ast
import fnmatch
import functools
import json
import os
import re
import sys
import sysconfig
from typing import NamedTuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMAGE_LIST = os.path.join(ROOT, "launch", "gpu_image_packages.txt")
WHEEL_LIST = os.path.join(ROOT, "launch", "gpu_wheels.txt")
WHEEL_FOLDER_LIMIT = 64 * 2**20  # what travels with the working tree to the GPU box
# Installed --no-deps: the benchmark's own dependency tree is the hosted-model clients (see BFCL.md).
NO_DEPS = ("bfcl-eval",)
# Never installed by setup_env.sh --gpu: the image's CUDA-coupled builds.
NEVER_INSTALL = ("jax", "jaxlib", "jax-cuda12-plugin", "jax-cuda12-pjrt", "jax-cuda13-plugin", "jax-cuda13-pjrt")
NEVER_INSTALL += ("torch", "nvidia-*")
# The wheel folder's compiled builds, one each, for the box's CPython 3.12 on x86-64 Linux (every other wheel
# is pure Python): pydantic's core, which tokamax needs and the image lacks.
COMPILED = ("pydantic-core",)
COMPILED_TAG = re.compile(r"-cp312-cp312-manylinux[\w.]*x86_64\.whl$")
# The image's libraries whose versions setup_env.sh --gpu reads in reuse mode and compares with setup.py's
# requirements: the JAX libraries and transformers, whose APIs the code follows release by release.
VERSION_CHECKED = ("jax", "flax", "optax", "orbax-checkpoint", "chex", "transformers")

# Distribution -> the top-level modules it provides, for every distribution the lists and setup.py name
# (tests/launch/test_gpu_env.py fails on one without an entry). The first module is the one `check` imports.
IMPORTS: dict[str, tuple[str, ...]] = {
    "absl-py": ("absl",),
    "aiofiles": ("aiofiles",),
    "annotated-types": ("annotated_types",),
    "bfcl-eval": ("bfcl_eval",),
    "chex": ("chex",),
    "contourpy": ("contourpy",),
    "cycler": ("cycler",),
    "einshape": ("einshape",),
    "etils": ("etils",),
    "filelock": ("filelock",),
    "flax": ("flax",),
    "fonttools": ("fontTools",),
    "fsspec": ("fsspec",),
    "huggingface-hub": ("huggingface_hub",),
    "humanize": ("humanize",),
    "immutabledict": ("immutabledict",),
    "jax": ("jax",),
    "jax-cuda13-pjrt": ("jax_plugins",),
    "jax-cuda13-plugin": ("jax_cuda13_plugin", "jax_plugins"),
    "jaxlib": ("jaxlib",),
    "jaxtyping": ("jaxtyping",),
    "jinja2": ("jinja2",),
    "kiwisolver": ("kiwisolver",),
    "markupsafe": ("markupsafe",),
    "matplotlib": ("matplotlib", "mpl_toolkits", "pylab"),
    "ml-collections": ("ml_collections",),
    "ml-dtypes": ("ml_dtypes",),
    "mpmath": ("mpmath",),
    "msgpack": ("msgpack",),
    "nest-asyncio": ("nest_asyncio",),
    "networkx": ("networkx",),
    "numpy": ("numpy",),
    "opt-einsum": ("opt_einsum",),
    "optax": ("optax",),
    "orbax-checkpoint": ("orbax.checkpoint", "orbax"),
    "packaging": ("packaging",),
    "pillow": ("PIL",),
    "pip": ("pip",),
    "protobuf": ("google.protobuf", "google"),
    "pydantic": ("pydantic",),
    "pydantic-core": ("pydantic_core",),
    "pyparsing": ("pyparsing",),
    "python-dateutil": ("dateutil",),
    "pyyaml": ("yaml",),
    "qwix": ("qwix",),
    "regex": ("regex",),
    "requests": ("requests",),
    "rich": ("rich",),
    "safetensors": ("safetensors",),
    "scipy": ("scipy",),
    "simplejson": ("simplejson",),
    "six": ("six",),
    "sympy": ("sympy",),
    "tensorboardx": ("tensorboardX",),
    "tensorstore": ("tensorstore",),
    "tokamax": ("tokamax",),
    "tokenizers": ("tokenizers",),
    "toolz": ("toolz", "tlz"),
    "torch": ("torch", "functorch", "torchgen"),
    "tqdm": ("tqdm",),
    "transformers": ("transformers",),
    "treescope": ("treescope",),
    "typeguard": ("typeguard",),
    "typing-extensions": ("typing_extensions",),
    "typing-inspection": ("typing_inspection",),
    "zipp": ("zipp",),
}


def normalize(name: str) -> str:
    """PEP 503's normal form: lower case, runs of -_. as one '-'."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(req: str) -> str:
    """'jax[cuda13]>=0.10,<0.13 ; python_version>="3.11"' -> 'jax'."""
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
    if not m:
        raise ValueError(f"not a requirement: {req!r}")
    return normalize(m.group(1))


def read_list(path: str) -> list[tuple[str, str]]:
    """(normalized name, version) of each `name==version` line of `path` (# comments and blanks skipped)."""
    out = []
    with open(path) as f:
        for n, raw in enumerate(f, 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            name, sep, version = line.partition("==")
            if not sep or not name.strip() or not version.strip():
                raise ValueError(f"{path}:{n}: expected name==version, got {line!r}")
            out.append((normalize(name.strip()), version.strip()))
    return out


def requirement_specifier(req: str) -> str:
    """'jax[cuda13]>=0.10,<0.13 ; python_version>="3.11"' -> '>=0.10,<0.13' ('' when any version will do)."""
    req = req.split(";", 1)[0]
    m = re.match(r"\s*[A-Za-z0-9][A-Za-z0-9._-]*\s*(\[[^\]]*\])?\s*(.*)$", req)
    if not m:
        raise ValueError(f"not a requirement: {req!r}")
    return re.sub(r"\s+", "", m.group(2))


def requirements(setup_py: str = os.path.join(ROOT, "setup.py")) -> dict[str, str]:
    """setup.py's install_requires (read with ast, not run): normalized name -> its version specifier."""
    tree = ast.parse(open(setup_py).read())
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "install_requires":
            return {requirement_name(v): requirement_specifier(v) for v in ast.literal_eval(node.value)}
    raise ValueError(f"{setup_py}: no install_requires")


def install_requires(setup_py: str = os.path.join(ROOT, "setup.py")) -> list[str]:
    """The normalized distribution names of setup.py's install_requires."""
    return list(requirements(setup_py))


_VERSION = re.compile(r"v?(\d+(?:\.\d+)*)(\.?(?:a|b|c|rc|alpha|beta|pre|preview|dev)\d*)?", re.IGNORECASE)


def version_key(version: str) -> tuple[tuple[int, ...], int]:
    """A sortable key for a release version: its release numbers (trailing zeros dropped: 0.12 == 0.12.0),
    then 0 for a pre- or dev release (0.13.0rc1 < 0.13.0), 1 otherwise. Post and local parts are ignored."""
    m = _VERSION.match(version.strip())
    if not m:
        raise ValueError(f"not a version: {version!r}")
    release = [int(x) for x in m.group(1).split(".")]
    while len(release) > 1 and release[-1] == 0:
        release.pop()
    return tuple(release), 0 if m.group(2) else 1


_COMPARE = {
    ">=": lambda a, b: a >= b,
    ">": lambda a, b: a > b,
    "<=": lambda a, b: a <= b,
    "<": lambda a, b: a < b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}


def satisfies(version: str, specifier: str) -> bool:
    """Whether `version` meets every clause of `specifier` (comma-separated; >=, >, <=, <, ==, != and no
    wildcards: what setup.py uses); '' is met by any version. Raises ValueError on anything else."""
    for clause in filter(None, (c.strip() for c in specifier.split(","))):
        m = re.fullmatch(r"(>=|<=|==|!=|>|<)\s*([^\s*]+)", clause)
        if not m:
            raise ValueError(f"launch/gpu_env.py: specifier clause {clause!r} is not supported")
        if not _COMPARE[m.group(1)](version_key(version), version_key(m.group(2))):
            return False
    return True


class VersionCheck(NamedTuple):
    """One library's reuse-mode check: its version here (None: not installed), setup.py's specifier ('' any),
    and the action: "keep", "install" (`pin`, the wheel list's name==version) or "refuse" (`why`). A NamedTuple,
    not a dataclass: this file is also loaded by path without a sys.modules entry (wheels.sh, the tests)."""

    name: str
    installed: str | None
    required: str
    action: str
    pin: str = ""
    why: str = ""

    def line(self) -> str:
        found = f"installed {self.installed}" if self.installed else "not installed"
        act = {"keep": "keep", "install": f"install {self.pin}", "refuse": f"REFUSED: {self.why}"}[self.action]
        return f"{self.name}: {found}; setup.py needs {self.required or 'any version'}; {act}"


def decide(name: str, installed: str | None, required: str, pin: str | None) -> VersionCheck:
    """Keep what meets `required`; else install the wheel list's `pin` (a version) when it does; never
    replace a CUDA-coupled build (NEVER_INSTALL); else refuse."""
    check = functools.partial(VersionCheck, name, installed, required)
    if installed is not None and satisfies(installed, required):
        return check("keep")
    if any(fnmatch.fnmatch(name, pattern) for pattern in NEVER_INSTALL):
        return check("refuse", why="the image's own CUDA-coupled build, never replaced by setup_env.sh")
    if pin is None:
        return check("refuse", why=f"launch/gpu_wheels.txt pins no {name} to install instead")
    if not satisfies(pin, required):
        return check("refuse", why=f"launch/gpu_wheels.txt's {name}=={pin} does not meet it either")
    return check("install", pin=f"{name}=={pin}")


def installed_version(dist: str) -> str | None:
    """The version of `dist` installed here, from its metadata (as pip sees it); None when it has none."""
    import importlib.metadata

    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_versions(wheel_list: str, names: tuple[str, ...] = VERSION_CHECKED) -> list[VersionCheck]:
    """decide() for each of `names`, installed here, against setup.py and `wheel_list`'s pins."""
    required = requirements()
    pins = dict(read_list(wheel_list))
    return [decide(n, installed_version(n), required[n], pins.get(n)) for n in names]


def package_needs() -> list[str]:
    """Every distribution the package imports: install_requires plus the benchmark (installed --no-deps)."""
    return install_requires() + ["bfcl-eval"]


def import_names(dist: str) -> tuple[str, ...]:
    try:
        return IMPORTS[normalize(dist)]
    except KeyError:
        raise KeyError(f"launch/gpu_env.py IMPORTS: no import names for distribution {dist!r}") from None


def installed(dist: str) -> bool:
    """Whether `dist` is installed here (its metadata, or else its modules on sys.path)."""
    import importlib.metadata
    import importlib.util

    try:
        importlib.metadata.distribution(dist)
        return True
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        return all(importlib.util.find_spec(m) is not None for m in import_names(dist)[:1])
    except (ImportError, ValueError):
        return False


def cmd_missing(path: str) -> int:
    """Print the lines of `path` not installed here, or pinning a VERSION_CHECKED library whose version here
    falls short of setup.py (check_versions); refuse a line naming a CUDA-coupled build."""
    lines = read_list(path)
    for name, _ in lines:
        if any(fnmatch.fnmatch(name, pattern) for pattern in NEVER_INSTALL):
            print(f"{path}: {name} is never installed by setup_env.sh (the image's own build)", file=sys.stderr)
            return 1
    upgrade = {c.name for c in check_versions(path) if c.action == "install"}
    for name, version in lines:
        if name in upgrade or not installed(name):
            print(f"{name}=={version}")
    return 0


def cmd_versions(path: str) -> int:
    """One line per VERSION_CHECKED library (VersionCheck.line); exit 1 when any is refused."""
    checks = check_versions(path)
    for c in checks:
        print(c.line())
    refused = [c.name for c in checks if c.action == "refuse"]
    if refused:
        print(f"setup_env.sh: {', '.join(refused)}: not what setup.py requires (see the lines above)", file=sys.stderr)
        return 1
    return 0


def site_dirs() -> list[str]:
    """This interpreter's site directories, in its own order (its venv's, then the base's when the venv
    includes system site packages, then the user site when enabled), existing ones only."""
    import site

    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return [d for d in dict.fromkeys(dirs) if os.path.isdir(d)]


def cmd_overlay(venv: str, root: str) -> int:
    """Run by the parent Python. The venv was made by this Python (`python -m venv --without-pip`), so its
    interpreter is this one's base at the same version, and its purelib is lib/pythonX.Y/site-packages.
    Two .pth files there (processed at start-up in name order): the checkout (so `import rcgrpo_jax` is the
    working tree: nothing built or installed), then `site.addsitedir` of each of this Python's site
    directories (so their own .pth files run too). The venv's own site-packages stays first on sys.path:
    what setup_env.sh installs there (only what the image lacks) never shadows an image package."""
    purelib = sysconfig.get_path("purelib", vars={"base": venv, "platbase": venv})
    if not os.path.isdir(purelib):
        print(
            f"gpu_env.py overlay: {purelib} is not a directory (was {venv} made by {sys.executable}?)", file=sys.stderr
        )
        return 1
    with open(os.path.join(purelib, "_rcgrpo_0_checkout.pth"), "w") as f:
        f.write(os.path.abspath(root) + "\n")
    with open(os.path.join(purelib, "_rcgrpo_1_parent.pth"), "w") as f:
        f.write(f"# the site directories of {sys.executable} (prefix {sys.prefix})\n")
        for d in site_dirs():
            f.write(f"import site; site.addsitedir({d!r})\n")
    with open(os.path.join(venv, "rcgrpo-parent.txt"), "w") as f:
        f.write(sys.prefix + "\n")
    return 0


def gpu_present() -> bool:
    """An NVIDIA device node: the host has a GPU, whatever jax says."""
    import glob

    return bool(glob.glob("/dev/nvidia[0-9]*"))


def cmd_check(want_gpu: bool) -> int:
    """Import each module the package needs (the first import name of each distribution), then
    rcgrpo_jax itself; with want_gpu, the backend. One line per module; exit 1 when any failed."""
    import importlib

    failed = []
    for dist in package_needs():
        mod = import_names(dist)[0]
        try:
            m = importlib.import_module(mod)
            version = getattr(m, "__version__", None)
            print(f"ok {dist}: import {mod}" + (f" ({version})" if version else ""))
        except Exception as e:  # noqa: BLE001 - each failure is reported, then all of them fail the check
            failed.append(dist)
            print(f"MISSING {dist}: import {mod} failed: {type(e).__name__}: {e}")
    try:
        import rcgrpo_jax

        print(f"ok rcgrpo_jax: {os.path.dirname(rcgrpo_jax.__file__)}")
    except Exception as e:  # noqa: BLE001
        failed.append("rcgrpo_jax")
        print(f"MISSING rcgrpo_jax: {type(e).__name__}: {e}")
    if want_gpu and "jax" not in failed:
        import jax

        backend = jax.default_backend()
        if backend == "gpu":
            print(f"ok backend: gpu ({jax.devices()[0].device_kind}, {jax.device_count()} devices)")
        elif gpu_present():
            failed.append("backend")
            print(f"FAILED backend: jax.default_backend() == {backend!r} on a host with an NVIDIA device")
        else:
            print(f"skipped: CPU host (no NVIDIA device; jax.default_backend() == {backend!r})")
    if failed:
        print(f"setup_env.sh: the environment lacks {', '.join(failed)} (see the lines above)", file=sys.stderr)
        return 1
    return 0


def wheel_requirements(path: str) -> list[str]:
    """The unconditional (or, for Python 3.12 on Linux, true) Requires-Dist names of a wheel, extras
    aside. Markers are read for the common cases only: python_version, sys_platform, extra."""
    import zipfile

    with zipfile.ZipFile(path) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode()
    names = []
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req, _, marker = line[len("Requires-Dist:") :].partition(";")
        if marker.strip() and not _marker_true(marker):
            continue
        names.append(requirement_name(req))
    return names


def _marker_true(marker: str) -> bool:
    """A requirement marker evaluated for the box (CPython 3.12 on x86-64 Linux), no extra requested."""
    try:
        from packaging.markers import Marker
    except ImportError:  # pip's own copy (wheels.sh runs where pip is)
        from pip._vendor.packaging.markers import Marker
    env = {"python_version": "3.12", "python_full_version": "3.12.0", "sys_platform": "linux"}
    env.update(platform_system="Linux", os_name="posix", platform_machine="x86_64", implementation_name="cpython")
    env.update(platform_python_implementation="CPython", extra="")
    return Marker(marker).evaluate(env)


def cmd_wheels(folder: str) -> int:
    """A wheel folder is ready for the GPU box when: every file is a pure-Python wheel (or, for a name in
    COMPILED, a CPython 3.12 x86-64 manylinux one), every line of
    gpu_wheels.txt has its wheel, each wheel's own requirements (bfcl-eval's aside: installed --no-deps)
    are on the image list or in the folder, and the whole is under 64 MiB. One line per problem."""
    wheels = sorted(f for f in os.listdir(folder) if not f.startswith("."))
    problems = []
    have = {}
    for f in wheels:
        if not f.endswith(".whl"):
            problems.append(f"{f}: not a wheel")
            continue
        name = normalize(f.split("-")[0])
        if not f.endswith("-none-any.whl") and not (name in COMPILED and COMPILED_TAG.search(f)):
            problems.append(f"{f}: not a pure-Python wheel (the box takes no compiled builds from here)")
        have[name] = f
    for name, version in read_list(WHEEL_LIST):
        f = have.get(name)
        if f is None:
            problems.append(f"{name}=={version}: no wheel")
        elif f.split("-")[1] != version:
            problems.append(f"{name}=={version}: the folder holds {f}")
    image = {n for n, _ in read_list(IMAGE_LIST)}
    for name, f in have.items():
        if name in NO_DEPS:
            continue
        for dep in wheel_requirements(os.path.join(folder, f)):
            if dep not in image and dep not in have:
                problems.append(f"{f} requires {dep}: neither on the image list nor in the folder")
    size = sum(os.path.getsize(os.path.join(folder, f)) for f in wheels)
    if size >= WHEEL_FOLDER_LIMIT:
        problems.append(f"{folder}: {size / 2**20:.1f} MiB, over the 64 MiB that travels with the tree")
    for p in problems:
        print(p, file=sys.stderr)
    print(
        json.dumps({"wheel_folder": folder, "wheels": len(wheels), "mib": round(size / 2**20, 2), "ok": not problems})
    )
    return 1 if problems else 0


def cmd_installed() -> int:
    import importlib.metadata

    dists = sorted(
        {
            f"{normalize(d.metadata['Name'])}=={d.version}"
            for d in importlib.metadata.distributions()
            if d.metadata["Name"]
        }
    )
    listed = dict(read_list(IMAGE_LIST))
    here = dict(d.split("==", 1) for d in dists)
    row = {
        "bench": "image_packages",
        "python": sys.version.split()[0],
        "prefix": sys.prefix,
        "venv": sys.prefix != sys.base_prefix,
        "absent_from_image": sorted(n for n in listed if n not in here),
        "other_versions": {n: here[n] for n in sorted(listed) if n in here and here[n] != listed[n]},
        "packages": dists,
    }
    print(json.dumps(row), flush=True)
    return 0


def main(argv: list[str]) -> int:
    usage = (
        "usage: gpu_env.py missing LIST | versions LIST | overlay VENV ROOT | check [--gpu] | wheels DIR | installed"
    )
    if not argv:
        print(usage, file=sys.stderr)
        return 2
    cmd, args = argv[0], argv[1:]
    if cmd == "missing" and len(args) == 1:
        return cmd_missing(args[0])
    if cmd == "versions" and len(args) == 1:
        return cmd_versions(args[0])
    if cmd == "overlay" and len(args) == 2:
        return cmd_overlay(*args)
    if cmd == "check" and args in ([], ["--gpu"]):
        return cmd_check(bool(args))
    if cmd == "wheels" and len(args) == 1:
        return cmd_wheels(args[0])
    if cmd == "installed" and not args:
        return cmd_installed()
    print(usage, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
