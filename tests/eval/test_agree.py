"""Our scorer agrees with BFCL's own `bfcl evaluate` on a sample of every category: the oracle's result set
and a perturbed one (dropped, duplicated and reordered calls, wrong values and types, extra text, empty
turns). Needs the bfcl side environment (`bash launch/bench_env.sh bfcl`, which launch/test.sh builds when
the package registry can be reached); without it the test is skipped with the reason."""

from __future__ import annotations

import json
import subprocess

import pytest

from rcgrpo_jax import chat
from rcgrpo_jax.envs import bfcl
from rcgrpo_jax.eval import agree, bfcl_results, single_turn

PYTHON = agree.side_python()
SAMPLE = 14  # per category: 13 single-turn + 4 multi-turn categories -> 238 entries per set

pytestmark = pytest.mark.skipif(
    PYTHON is None, reason="no bfcl side environment (build it: bash launch/bench_env.sh bfcl)"
)
pytestmark = [pytestmark, pytest.mark.slow]  # the fast lane skips it (pytest.ini)


# The two sets under two model names whose handler (QwenFCHandler) decodes the same <tool_call> blocks, so
# one `bfcl evaluate` (its start-up is most of its time) scores both.
MODELS = {"oracle": "Qwen/Qwen3-0.6B-FC", "perturbed": "Qwen/Qwen3-1.7B-FC"}


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    root = tmp_path_factory.mktemp("agree")
    parser = chat.get_parser("hermes")
    for kind, model in MODELS.items():
        files = agree.make_set(str(root), model, parser, kind, SAMPLE)
        assert len(files) == len(single_turn.CATEGORIES) + len(bfcl.CATEGORIES)
    return agree.check(str(root), list(MODELS.values()), "hermes", PYTHON)["models"]


@pytest.mark.parametrize("kind", list(MODELS))
def test_bfcl_evaluate_agrees_with_ours(reports, kind, capsys):
    out = reports[MODELS[kind]]
    with capsys.disabled():
        print(f"\n[{kind}]")
        agree.print_report(out)  # the table, in the log
    cats = out["categories"]
    assert set(cats) == set(single_turn.CATEGORIES) | {f"multi_turn_{c}" for c in bfcl.CATEGORIES}
    assert all(c["n"] == min(SAMPLE, single_turn.ENTRY_COUNTS.get(k, SAMPLE)) for k, c in cats.items())
    assert out["disagree"] == 0, {k: c["disagree_ids"] for k, c in cats.items() if c["disagree_ids"]}
    assert all(c["bfcl"] == c["ours"] for c in cats.values())
    if kind == "oracle":  # the sample holds none of the six unanswerable entries
        assert all(c["ours"] == 1.0 for c in cats.values())
    else:  # the perturbations fail entries in every scored category (not a set that passes everything)
        assert all(c["ours"] < 1.0 for c in cats.values())


# The package's own writer (`BaseHandler.write`, what `bfcl generate` calls) on the same lines.
_WRITE = """
import json, sys
from pathlib import Path
from bfcl_eval.eval_checker.eval_runner import get_handler
rows = [json.loads(x) for x in open(sys.argv[1])]
get_handler(sys.argv[2]).write(rows, result_dir=Path(sys.argv[3]), update_mode=True)
"""


def test_our_files_equal_the_package_writer_byte_for_byte(tmp_path):
    model = MODELS["perturbed"]
    rows = agree.set_rows(chat.get_parser("hermes"), "perturbed", 3)
    mine = bfcl_results.write_entries(tmp_path / "ours", model, rows)
    dump = tmp_path / "rows.jsonl"
    dump.write_text("".join(json.dumps(r) + "\n" for r in rows[::-1]))  # its writer sorts them itself
    env = {"BFCL_PROJECT_ROOT": str(tmp_path / "project"), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [PYTHON, "-c", _WRITE, str(dump), model, str(tmp_path / "theirs")], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    theirs = sorted((tmp_path / "theirs").rglob("*_result.json"))
    assert [p.relative_to(tmp_path / "theirs") for p in theirs] == [p.relative_to(tmp_path / "ours") for p in mine]
    for a, b in zip(mine, theirs):
        assert a.read_bytes() == b.read_bytes(), a.name
