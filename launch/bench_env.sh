#!/usr/bin/env bash
# Creates (on demand) or reuses a bench-only environment holding one benchmark peer:
#   trl    HF TRL's GRPOTrainer, the peer of `python -m rcgrpo_jax.bench.grpo_step`
#   tunix  google-tunix's sampler, a peer of `python -m rcgrpo_jax.bench.sampler`
#   bfcl   bfcl-eval's own `bfcl evaluate` CLI, the peer of `python -m rcgrpo_jax.eval.agree`
# None is ever a runtime dependency of the project; the benchmarks run them as a subprocess.
#
#   bash launch/bench_env.sh trl                prints the env's interpreter (creating the env first)
#   bash launch/bench_env.sh tunix --print-plan prints what it would do, does nothing
#   bash launch/bench_env.sh tunix --check      prints the interpreter if the env is built and current,
#                                               else exits 1; never builds (no network needed)
#
# The env (BENCH_VENV, default .venv-bench-<peer> in the repository) is a plain venv layered over the
# project's interpreter (PYTHON, default .venv/bin/python, else python3): a .pth file puts that
# interpreter's site-packages after the env's own, so the peer runs on the project's torch / jax /
# transformers wherever its pins allow, and pip adds only what it needs beyond them (setup.py's
# `bench-<peer>` extra; tunix pins an older transformers, which then shadows the project's in its env
# only). A stamp of the inputs lets a warm env skip pip. Progress goes to stderr, the path to stdout.
#
# bfcl: bfcl-eval==2026.3.23 itself goes in with --no-deps, then the packages its `bfcl evaluate` CLI
# imports on the way to scoring (BFCL_EVAL_DEPS below: the API clients that constants/model_config imports,
# tree-sitter for Java/JavaScript, pandas/typer/tabulate for the runner; qwen-agent, which the Qwen API handler
# imports at module level, and soundfile, which qwen-agent imports). Left out of its pin list, as
# evaluate never imports them offline: vllm/sglang (extras, generation only), sentence-transformers,
# faiss-cpu, rank_bm25 (the memory categories' retrieval backends), google-search-results (web search),
# huggingface_hub (the project's serves), and its numpy==1.26.4 / filelock / networkx pins (the project's
# versions serve; pip reports the mismatch and evaluate runs on them).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
peer="${1:-}"
case "$peer" in
  trl|tunix|bfcl) ;;
  -h|--help|"") sed -n '2,26p' "${BASH_SOURCE[0]}"; [ -n "$peer" ]; exit ;;
  *) echo "bench_env.sh: unknown peer '$peer' (trl, tunix, bfcl)" >&2; exit 2 ;;
esac
plan=0
check=0
case "${2:-}" in
  --print-plan) plan=1 ;;
  --check) check=1 ;;
  "") ;;
  *) echo "bench_env.sh: unknown option $2 (--print-plan, --check)" >&2; exit 2 ;;
esac
venv="${BENCH_VENV:-$root/.venv-bench-$peer}"
base="${PYTHON:-}"
if [ -z "$base" ]; then
  if [ -x "$root/.venv/bin/python" ]; then base="$root/.venv/bin/python"; else base="$(command -v python3)"; fi
fi
BFCL_EVAL_PKG="bfcl-eval==2026.3.23"
BFCL_EVAL_DEPS="mpmath==1.3.0 tree_sitter==0.21.3 tree-sitter-java==0.21.0 tree-sitter-javascript==0.21.4 \
pandas tabulate>=0.9.0 python-dotenv>=1.0.1 overrides tenacity>=8.5.0 requests openai>=1.86.0 anthropic>=0.75.0 \
mistralai==1.7.0 cohere==5.18.0 google-genai>=1.52.0 writer-sdk>=2.1.0 boto3 datamodel-code-generator==0.25.7 \
beautifulsoup4 html2text qwen-agent soundfile"
# The pinned requirements of setup.py's bench-<peer> extra (read, not imported: setup.py runs setup()).
if [ "$peer" = bfcl ]; then
  reqs="$BFCL_EVAL_PKG (--no-deps) $BFCL_EVAL_DEPS"
else
reqs="$(cd "$root" && "$base" - "bench-$peer" <<'PYEOF'
import ast, sys
for node in ast.walk(ast.parse(open("setup.py").read())):
    if isinstance(node, ast.keyword) and node.arg == "extras_require":
        print(" ".join(ast.literal_eval(node.value)[sys.argv[1]]))
        sys.exit(0)
sys.exit("setup.py has no extras_require")
PYEOF
)"
fi
want="$(printf '%s\n%s\n' "$reqs" "$("$base" -c 'import sys; print(sys.executable, sys.version)')" | sha256sum | cut -c1-16)"
if [ "$plan" = 1 ]; then
  printf 'peer: %s\nbench venv: %s\nbase interpreter: %s\npip install %s\n' "$peer" "$venv" "$base" "$reqs"
  exit 0
fi
if [ -f "$venv/.bench-stamp" ] && [ "$(cat "$venv/.bench-stamp")" = "$want" ]; then
  echo "$venv/bin/python"
  exit 0
fi
if [ "$check" = 1 ]; then
  echo "bench_env.sh: no current $peer env at $venv (build it: bash launch/bench_env.sh $peer)" >&2
  exit 1
fi
{
  "$base" -m venv --clear "$venv"
  purelib="$("$base" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  own="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  echo "$purelib" > "$own/_rcgrpo_base.pth"
  # shellcheck disable=SC2086  # the requirement lists hold pinned requirements without spaces
  if [ "$peer" = bfcl ]; then
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --ignore-installed "$BFCL_EVAL_PKG"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check $BFCL_EVAL_DEPS
    # The CLI must start: a missing import fails the build here, not in the agreement check.
    "$venv/bin/python" -c "import bfcl_eval.__main__"
  else
    "$venv/bin/python" -m pip install -q --disable-pip-version-check $reqs
  fi
  echo "$want" > "$venv/.bench-stamp"
} >&2
echo "$venv/bin/python"
