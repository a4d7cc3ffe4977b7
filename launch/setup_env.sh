#!/usr/bin/env bash
# Creates or reuses a virtual environment and installs everything the project needs.
#
#   source launch/setup_env.sh                  CPU (what test.sh and quickstart.sh source): .venv with CPU
#                                               jax, the CPU torch wheel (the tests' HF oracle), .[test]
#   RCGRPO_GPU=1 source launch/setup_env.sh     GPU (what pipeline.sh and slurm.sbatch source)
#   bash launch/setup_env.sh --gpu              the same, run directly
#   bash launch/setup_env.sh [--gpu] --print-plan   print what it would do (mode, venv, pip steps), do nothing
#
# GPU mode, in .venv-gpu (VENV overrides), never installs torch (only the CPU tests need it; PyPI's Linux
# wheel is the multi-GB CUDA build):
#   - reuse: when PYTHON already imports a CUDA jax (a jax_plugins.xla_cuda12/13 plugin and jax 0.10-0.11),
#     the venv is made with --system-site-packages and jax/jaxlib are pinned to the installed versions
#     (a pip constraint), so nothing reinstalls them; no pip upgrade either (the box may have no network:
#     put any missing wheels in a folder and set PIP_FIND_LINKS=that/folder PIP_NO_INDEX=1).
#     RCGRPO_GPU_REUSE=0 forces a fresh install, =1 forces reuse.
#   - install: otherwise, a plain venv with the `gpu` extra (CUDA 13 jax wheels; RCGRPO_GPU_EXTRA=gpu-cuda12
#     for hosts whose driver predates CUDA 13).
# A stamp of the install inputs lets a warm venv skip pip entirely (CPU: setup.py + this file).
set -euo pipefail
_rcgrpo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# Options only when run directly: a sourcing script's own arguments (test.sh passes pytest's) are not ours.
_rcgrpo_print_plan=0
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  for _a in "$@"; do
    case "$_a" in
      --gpu) RCGRPO_GPU=1 ;;
      --cpu) RCGRPO_GPU=0 ;;
      --print-plan) _rcgrpo_print_plan=1 ;;
      -h|--help) sed -n '2,21p' "${BASH_SOURCE[0]}"; exit 0 ;;
      *) echo "setup_env.sh: unknown option $_a (--gpu, --cpu, --print-plan)" >&2; exit 2 ;;
    esac
  done
fi

# Prints "<jax version> <jaxlib version>" when PY imports a CUDA jax of a supported version; fails otherwise.
# Looks for the CUDA plugin package rather than initialising a GPU, so it also answers on a login node.
_rcgrpo_system_cuda_jax() {
  "$1" - <<'PYEOF' 2>/dev/null
import importlib.util, sys
import jax, jaxlib
plugin = any(importlib.util.find_spec(f"jax_plugins.xla_cuda{v}") for v in (12, 13))
ok = plugin and (0, 10) <= tuple(int(x) for x in jax.__version__.split(".")[:2]) < (0, 12)
if ok:
    print(jax.__version__, jaxlib.__version__)
sys.exit(0 if ok else 1)
PYEOF
}

# Sets MODE, VENV, VENV_ARGS, CONSTRAINTS, WANT (the stamp) and STEPS: one pip call per entry, its
# arguments separated by newlines (so a repository path with spaces stays one argument).
_rcgrpo_step() { local IFS=$'\n'; STEPS+=("$*"); }
_rcgrpo_plan() {
  PY="${PYTHON:-python3}"
  STEPS=()
  CONSTRAINTS=""
  VENV_ARGS=""
  if [ "${RCGRPO_GPU:-0}" = "1" ]; then
    VENV="${VENV:-$_rcgrpo_root/.venv-gpu}"
    local extra="${RCGRPO_GPU_EXTRA:-gpu}" versions=""
    case "${RCGRPO_GPU_REUSE:-auto}" in
      0) ;;
      1) versions="$(_rcgrpo_system_cuda_jax "$PY" || true)"
         [ -n "$versions" ] || { echo "setup_env.sh: RCGRPO_GPU_REUSE=1 but $PY has no CUDA jax 0.10-0.11" >&2; return 1; } ;;
      *) versions="$(_rcgrpo_system_cuda_jax "$PY" || true)" ;;
    esac
    if [ -n "$versions" ]; then
      MODE=gpu-reuse
      VENV_ARGS="--system-site-packages"
      read -r _jax _jaxlib <<< "$versions"
      CONSTRAINTS="jax==$_jax jaxlib==$_jaxlib"
      # no build isolation: an isolated build would fetch setuptools from the index
      _rcgrpo_step install -q --no-build-isolation -c "$VENV/rcgrpo-constraints.txt" -e "$_rcgrpo_root"
    else
      MODE=gpu-install
      _rcgrpo_step install -q --upgrade pip
      _rcgrpo_step install -q -e "$_rcgrpo_root[$extra,test]"
    fi
    _rcgrpo_step install -q --no-deps bfcl-eval==2026.3.23
    WANT="$(cat "$_rcgrpo_root/setup.py" "$_rcgrpo_root/launch/setup_env.sh" \
      <(echo "$MODE $extra $CONSTRAINTS") | sha256sum | cut -d' ' -f1)"
  else
    MODE=cpu
    VENV="${VENV:-$_rcgrpo_root/.venv}"
    _rcgrpo_step install -q --upgrade pip
    # The test oracle: the CPU wheel these machines hold. Never an unpinned torch (multi-GB CUDA build).
    _rcgrpo_step install -q torch==2.13.0
    _rcgrpo_step install -q -e "$_rcgrpo_root[test]"
    # The benchmark itself, without its heavy dependency tree (see shared/BFCL.md).
    _rcgrpo_step install -q --no-deps bfcl-eval==2026.3.23
    WANT="$(cat "$_rcgrpo_root/setup.py" "$_rcgrpo_root/launch/setup_env.sh" | sha256sum | cut -d' ' -f1)"
  fi
  STAMP="$VENV/.rcgrpo_install_stamp"
}

_rcgrpo_plan
if [ "$_rcgrpo_print_plan" = "1" ]; then
  echo "mode=$MODE"
  echo "venv=$VENV"
  echo "venv_args=$VENV_ARGS"
  echo "constraints=$CONSTRAINTS"
  echo "stamp=$WANT"
  echo "up_to_date=$([ "$(cat "$STAMP" 2>/dev/null)" = "$WANT" ] && echo 1 || echo 0)"
  for _s in "${STEPS[@]}"; do echo "pip=${_s//$'\n'/ }"; done
  exit 0
fi

if [ ! -x "$VENV/bin/python" ]; then
  # shellcheck disable=SC2086
  "$PY" -m venv $VENV_ARGS "$VENV"
elif [ "$MODE" = gpu-reuse ] && ! grep -qi "include-system-site-packages *= *true" "$VENV/pyvenv.cfg"; then
  echo "setup_env.sh: $VENV exists without system site packages, so it cannot reuse $PY's CUDA jax;" \
    "remove it (or set VENV elsewhere) and rerun" >&2
  return 1 2>/dev/null || exit 1
fi
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
  if [ -n "$CONSTRAINTS" ]; then tr ' ' '\n' <<< "$CONSTRAINTS" > "$VENV/rcgrpo-constraints.txt"; fi
  for _s in "${STEPS[@]}"; do
    mapfile -t _args <<< "$_s"
    "$VENV/bin/python" -m pip "${_args[@]}"
  done
  echo "$WANT" > "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
