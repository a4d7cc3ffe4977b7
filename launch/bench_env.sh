#!/usr/bin/env bash
# Creates (on demand) or reuses a bench-only environment holding one benchmark peer:
#   trl    HF TRL's GRPOTrainer, the peer of `python -m benchmarks.grpo_step`
#   tunix  google-tunix's sampler, a peer of `python -m benchmarks.sampler`
#   bfcl   bfcl-eval's own `bfcl evaluate` CLI, the peer of `python -m rcgrpo_jax.eval.agree`
# None is ever a runtime dependency of the project; the benchmarks run them as a subprocess.
# Two more envs hold not a peer but the JAX the GPU runs, for CI lanes on a CPU host (launch/test.sh):
#   gpu-image  the GPU test box's versions (launch/gpu_image_packages.txt) on Python 3.12, without torch or CUDA
#   jax-0.12   the same with jax/jaxlib $JAX_NEXT (the lowering proof under the next JAX)
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
#
# gpu-image / jax-0.12: a plain venv (no layering: the project's interpreter is another Python) of a Python
# 3.12 (PYTHON312, else python3.12 on the PATH, else a pyenv 3.12; none: exit 3 with the reason, and
# launch/test.sh skips the lane). It installs, pinned, every line of launch/gpu_image_packages.txt whose
# version was read on the box, except torch and the CUDA plugin, plus flax, optax, orbax-checkpoint and chex
# at the record's versions (not read there; see the record); then the rest of setup.py's install_requires
# (ml-collections, tensorboardX and mpmath at launch/gpu_wheels.txt's pins; bfcl-eval at its pin with
# --no-deps, as on the box), tokamax (the `gpu` extra's pin), and pytest with pytest-xdist. pip resolves
# their dependencies (jax 0.11 and numpy 2.5 need Python 3.12).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
peer="${1:-}"
case "$peer" in
  trl|tunix|bfcl|gpu-image|jax-0.12) ;;
  -h|--help|"") sed -n '2,44p' "${BASH_SOURCE[0]}"; [ -n "$peer" ]; exit ;;
  *) echo "bench_env.sh: unknown peer '$peer' (trl, tunix, bfcl, gpu-image, jax-0.12)" >&2; exit 2 ;;
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
JAX_NEXT="0.12.1"
base="${PYTHON:-}"
layered=1
if [ "$peer" = gpu-image ] || [ "$peer" = jax-0.12 ]; then
  layered=0
  base=""
  for c in "${PYTHON312:-}" python3.12 "$HOME"/.pyenv/versions/3.12*/bin/python3.12 /usr/bin/python3.12; do
    if [ -n "$c" ] && "$c" -c 'import sys; assert sys.version_info[:2] == (3, 12)' >/dev/null 2>&1; then
      base="$(command -v "$c")"
      break
    fi
  done
  if [ -z "$base" ]; then
    echo "bench_env.sh: no Python 3.12 here (set PYTHON312): the $peer env needs one (jax 0.11 requires it)" >&2
    exit 3
  fi
elif [ -z "$base" ]; then
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
elif [ "$layered" = 0 ]; then
reqs="$(cd "$root" && "$base" - "$peer" "$JAX_NEXT" <<'PYEOF'
import ast, re, sys
peer, jax_next = sys.argv[1:]
unread_kept = {"flax", "optax", "orbax-checkpoint", "chex"}
never = re.compile(r"^(torch|jax-cuda.*|nvidia-.*|pip)$")
pins = {}
for raw in open("launch/gpu_image_packages.txt"):
    line, _, comment = raw.partition("#")
    name, sep, version = line.strip().partition("==")
    if not sep or never.match(name) or ("version not read" in comment and name not in unread_kept):
        continue
    pins[name] = version
if peer == "jax-0.12":
    pins["jax"] = pins["jaxlib"] = jax_next
for raw in open("launch/gpu_wheels.txt"):
    name, sep, version = raw.partition("#")[0].strip().partition("==")
    if sep and name in ("ml-collections", "tensorboardX", "mpmath"):
        pins[name] = version
for node in ast.walk(ast.parse(open("setup.py").read())):
    if isinstance(node, ast.keyword) and node.arg == "install_requires":
        rest = [r for r in ast.literal_eval(node.value) if re.split(r"[<>=!\[ ]", r)[0] not in pins]
    if isinstance(node, ast.keyword) and node.arg == "extras_require":
        extras = ast.literal_eval(node.value)
gpu = [r for r in extras["gpu"] if r.startswith("tokamax")]
print(" ".join([f"{n}=={v}" for n, v in pins.items()] + rest + gpu + ["pytest", "pytest-xdist", "hypothesis"]))
PYEOF
)"
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
nodeps=""
[ "$layered" = 0 ] && nodeps="$(grep -E '^bfcl-eval==' "$root/launch/gpu_wheels.txt")"
want="$(printf '%s\n%s\n' "$reqs${nodeps:+ --no-deps $nodeps}" "$("$base" -c 'import sys; print(sys.executable, sys.version)')" | sha256sum | cut -c1-16)"
if [ "$plan" = 1 ]; then
  printf 'peer: %s\nbench venv: %s\nbase interpreter: %s\npip install %s\n' "$peer" "$venv" "$base" "$reqs"
  [ -z "$nodeps" ] || printf 'pip install --no-deps %s\n' "$nodeps"
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
  if [ "$layered" = 1 ]; then
    purelib="$("$base" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    own="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    echo "$purelib" > "$own/_rcgrpo_base.pth"
  fi
  # shellcheck disable=SC2086  # the requirement lists hold pinned requirements without spaces
  if [ "$peer" = bfcl ]; then
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --ignore-installed "$BFCL_EVAL_PKG"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check $BFCL_EVAL_DEPS
    # The CLI must start: a missing import fails the build here, not in the agreement check.
    "$venv/bin/python" -c "import bfcl_eval.__main__"
  elif [ "$layered" = 0 ]; then
    # shellcheck disable=SC2086
    "$venv/bin/python" -m pip install -q --disable-pip-version-check $reqs
    # As on the box (launch/gpu_env.py's NO_DEPS): the benchmark without its hosted-model clients.
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps $nodeps
    # What the lane relies on: the JAX it names, and no torch (the image's CUDA torch is not the project's).
    "$venv/bin/python" -c "import jax, flax, optax, transformers, ml_collections; print('jax', jax.__version__)"
    if "$venv/bin/python" -c "import torch" >/dev/null 2>&1; then echo "bench_env.sh: torch got in" >&2; exit 1; fi
  else
    "$venv/bin/python" -m pip install -q --disable-pip-version-check $reqs
  fi
  echo "$want" > "$venv/.bench-stamp"
} >&2
echo "$venv/bin/python"
