"""configs/<stage>.py are thin files over the package's builders (`rcgrpo_jax.config_lib`): no sys.path change, no
import of another config file, and `--config=/abs/path/configs/<stage>.py:<preset>` loads the same config from
any working directory."""

from __future__ import annotations

import ast
import glob
import json
import os
import subprocess
import sys

import pytest

from rcgrpo_jax import main

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STAGE_FILES = sorted(
    p for p in glob.glob(os.path.join(REPO, "configs", "*.py")) if os.path.basename(p) != "__init__.py"
)


def test_the_stage_files_are_found():
    names = {os.path.basename(p)[:-3] for p in STAGE_FILES}
    assert names == {"awpo", "dapo", "dr_grpo", "eval", "grpo", "rc_grpo", "rctp_ft", "sft"}


@pytest.mark.parametrize("path", STAGE_FILES, ids=os.path.basename)
def test_a_stage_file_is_thin(path):
    """get_config(arg), and imports from the package only (no sys.path.insert, no `from configs import ...`)."""
    text = open(path).read()
    tree = ast.parse(text)
    assert "sys.path" not in text
    imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert imported and all(m.startswith("rcgrpo_jax.") for m in imported), imported
    assert any(isinstance(n, ast.FunctionDef) and n.name == "get_config" for n in tree.body)


def test_every_stage_file_loads_by_absolute_path_from_another_directory(tmp_path):
    """A subprocess in an empty directory (the package importable, as an installed one is) parses each file's
    tiny preset through the launcher's flags and gets the config this process gets."""
    script = (
        "import json, sys\n"
        "from rcgrpo_jax import main\n"
        "out = {p: main.parse_config(['main', f'--config={p}:tiny']).to_json_best_effort(sort_keys=True)"
        " for p in sys.argv[1:]}\n"
        "print(json.dumps(out))\n"
    )
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=REPO)
    run = subprocess.run(
        [sys.executable, "-c", script, *STAGE_FILES],
        cwd=str(tmp_path),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    there = json.loads(run.stdout.strip().splitlines()[-1])
    here = {
        p: main.parse_config(["main", f"--config={p}:tiny"]).to_json_best_effort(sort_keys=True) for p in STAGE_FILES
    }
    assert there == here and len(there) == 8
