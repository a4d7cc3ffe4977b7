"""Every module docstring of the package and of the tools beside it (experiments/, benchmarks/) states its module's
contract in at most 25 lines; findings, figures and history belong in docs/ (and git), not in the code."""

from __future__ import annotations

import ast
import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FOLDERS = ("rcgrpo_jax", "experiments", "benchmarks")
MAX_LINES = 25


def docstring_lines() -> dict[str, int]:
    """repo-relative path -> the line count of its module docstring, for every module of FOLDERS."""
    out = {}
    walks = [os.walk(os.path.join(REPO, top)) for top in FOLDERS]
    for folder, _, files in (entry for walk in walks for entry in walk):
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                doc = ast.get_docstring(ast.parse(open(path).read()), clean=False)
                out[os.path.relpath(path, REPO).replace(os.sep, "/")] = len(doc.splitlines()) if doc else 0
    return out


def test_module_docstrings_are_at_most_25_lines():
    lines = docstring_lines()
    long = {p: n for p, n in lines.items() if n > MAX_LINES}
    assert not long, f"module docstrings over {MAX_LINES} lines (move findings and history to docs/): {long}"
