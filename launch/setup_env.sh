#!/usr/bin/env bash
# Creates or reuses a virtual environment and installs everything the project needs.
#
#   source launch/setup_env.sh                  CPU (what test.sh and quickstart.sh source): .venv with CPU
#                                               jax, the CPU torch wheel (the tests' HF oracle), .[test,serving]
#   RCGRPO_GPU=1 source launch/setup_env.sh     GPU (what pipeline.sh and slurm.sbatch source)
#   bash launch/setup_env.sh --gpu              the same, run directly
#   bash launch/setup_env.sh [--gpu] --print-plan   print what it would do (mode, venv, pip steps), do nothing
#
# GPU mode, in .venv-gpu (VENV overrides), never installs torch, jax, jaxlib or a CUDA plugin:
#   - reuse: when PYTHON (default python3) already imports a CUDA jax (a jax_plugins.xla_cuda12/13 plugin
#     and jax 0.10-0.11; the project's GPU box: python3 is itself a venv holding one), .venv-gpu is an
#     overlay of that environment (launch/gpu_env.py overlay): .pth files add the checkout and PYTHON's
#     site directories. Every run prints the versions of jax, flax, optax, orbax-checkpoint, chex and
#     transformers there against setup.py's requirements (launch/gpu_env.py versions: keep, install the
#     wheel list's pin, or REFUSED, which fails the setup). Then only the lines of launch/gpu_wheels.txt the
#     environment lacks, or pinning one of those found too old, are installed, --no-deps, wheels only, and
#     offline from RCGRPO_WHEELS=DIR when set (made by launch/wheels.sh DIR on a networked machine).
#     Nothing is built: no editable install. RCGRPO_GPU_REUSE=0 forces a fresh install, =1 forces reuse.
#   - install: otherwise, a plain venv with the `gpu` extra (CUDA 13 jax wheels; RCGRPO_GPU_EXTRA=gpu-cuda12
#     for hosts whose driver predates CUDA 13).
#   Both end with `launch/gpu_env.py check --gpu`: every module the package needs imports, and
#   jax.default_backend() == "gpu" (a CPU host prints "skipped: CPU host" and passes on the imports alone).
# A stamp of the install inputs lets a warm venv skip pip entirely (CPU: setup.py + this file; reuse mode
# asks gpu_env.py every run instead, the image being able to change under it).
# Sourced, it leaves $VENV/bin first on PATH and exports RCGRPO_PYTHON=$VENV/bin/python: the interpreter of
# the environment it set up, which launchers run (its own variables, PY among them, are not for callers).
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
      -h|--help) sed -n '2,27p' "${BASH_SOURCE[0]}"; exit 0 ;;
      *) echo "setup_env.sh: unknown option $_a (--gpu, --cpu, --print-plan)" >&2; exit 2 ;;
    esac
  done
fi

# Prints "<jax version> <jaxlib version>", then PY's sys.prefix, when PY imports a CUDA jax of a supported
# version; fails otherwise.
# Looks for the CUDA plugin package rather than initialising a GPU, so it also answers on a login node.
_rcgrpo_system_cuda_jax() {
  "$1" - <<'PYEOF' 2>/dev/null
import importlib.util, sys
import jax, jaxlib
plugin = any(importlib.util.find_spec(f"jax_plugins.xla_cuda{v}") for v in (12, 13))
ok = plugin and (0, 10) <= tuple(int(x) for x in jax.__version__.split(".")[:2]) < (0, 12)
if ok:
    print(jax.__version__, jaxlib.__version__)
    print(sys.prefix)
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
  PARENT=""
  WHEELS=""
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
      # Why an overlay: a venv made by a venv interpreter is a venv of the *base* interpreter, and with
      # --system-site-packages it sees the base's site-packages, not the parent venv's (no jax). Made
      # --without-pip by PY, .venv-gpu has the same interpreter version; its .pth files add the checkout
      # and PY's own site directories (their .pth files included), so it imports exactly PY's packages
      # plus the few installed into it. A target directory on PYTHONPATH would do the same but leak into
      # every child process and need exporting by every launcher; this keeps `$VENV/bin/python`.
      VENV_ARGS="--without-pip"
      read -r _jax _jaxlib <<< "${versions%%$'\n'*}"
      PARENT="${versions#*$'\n'}"
      CONSTRAINTS="jax==$_jax jaxlib==$_jaxlib"  # what the overlay must import afterwards, unchanged
      WHEELS="${RCGRPO_WHEELS:-}"
      if [ -n "$WHEELS" ]; then
        [ -d "$WHEELS" ] || { echo "setup_env.sh: RCGRPO_WHEELS=$WHEELS is not a directory" >&2; return 1; }
        WHEELS="$(cd "$WHEELS" && pwd)"
      fi
      # The pip call is planned at run time (_rcgrpo_reuse_pip): only what the environment lacks.
    else
      MODE=gpu-install
      _rcgrpo_step install -q --upgrade pip
      _rcgrpo_step install -q -e "$_rcgrpo_root[$extra,test]"
      _rcgrpo_step install -q --no-deps bfcl-eval==2026.3.23
    fi
    WANT="$(cat "$_rcgrpo_root/setup.py" "$_rcgrpo_root/launch/setup_env.sh" "$_rcgrpo_root/launch/gpu_env.py" \
      "$_rcgrpo_root/launch/gpu_wheels.txt" <(echo "$MODE $extra $CONSTRAINTS ${PARENT:-} ${WHEELS:-}") \
      | sha256sum | cut -d' ' -f1)"
  else
    MODE=cpu
    VENV="${VENV:-$_rcgrpo_root/.venv}"
    _rcgrpo_step install -q --upgrade pip
    # The test oracle: the CPU wheel these machines hold. Never an unpinned torch (multi-GB CUDA build).
    _rcgrpo_step install -q torch==2.13.0
    _rcgrpo_step install -q -e "$_rcgrpo_root[test,serving]"
    # The benchmark itself, without its heavy dependency tree (see shared/BFCL.md).
    _rcgrpo_step install -q --no-deps bfcl-eval==2026.3.23
    WANT="$(cat "$_rcgrpo_root/setup.py" "$_rcgrpo_root/launch/setup_env.sh" | sha256sum | cut -d' ' -f1)"
  fi
  STAMP="$VENV/.rcgrpo_install_stamp"
}

# gpu-reuse: the one pip call, its arguments one a line (none when nothing is missing): the lines of
# gpu_wheels.txt that PY_OR_VENV (the overlay once made, PY before) lacks or holds too old (gpu_env.py
# missing), --no-deps, wheels only.
_rcgrpo_reuse_pip() {
  local missing
  missing="$("$1" "$_rcgrpo_root/launch/gpu_env.py" missing "$_rcgrpo_root/launch/gpu_wheels.txt")" || return 1
  [ -n "$missing" ] || return 0
  printf '%s\n' install -q --no-deps --only-binary=:all:
  if [ -n "$WHEELS" ]; then printf '%s\n' --no-index --find-links "$WHEELS"; fi
  printf '%s\n' "$missing"
}

_rcgrpo_plan
if [ "$_rcgrpo_print_plan" = "1" ]; then
  echo "mode=$MODE"
  echo "venv=$VENV"
  echo "venv_args=$VENV_ARGS"
  echo "constraints=$CONSTRAINTS"
  echo "stamp=$WANT"
  echo "up_to_date=$([ "$(cat "$STAMP" 2>/dev/null)" = "$WANT" ] && echo 1 || echo 0)"
  if [ "$MODE" = gpu-reuse ]; then
    echo "parent=$PARENT"
    echo "wheels=${WHEELS:-none (the pip configuration)}"
    _py="$PY"; [ -x "$VENV/bin/python" ] && _py="$VENV/bin/python"
    # one line per checked library (a REFUSED one would fail the run, not the plan)
    _versions="$("$_py" "$_rcgrpo_root/launch/gpu_env.py" versions "$_rcgrpo_root/launch/gpu_wheels.txt")" || true
    while IFS= read -r _v; do [ -n "$_v" ] && echo "version=$_v"; done <<< "$_versions"
    _pip="$(_rcgrpo_reuse_pip "$_py")"
    if [ -n "$_pip" ]; then STEPS=("$_pip"); fi
  fi
  for _s in "${STEPS[@]}"; do echo "pip=${_s//$'\n'/ }"; done
  if [ "$MODE" != cpu ]; then echo "check=$VENV/bin/python $_rcgrpo_root/launch/gpu_env.py check --gpu"; fi
  exit 0
fi

if [ "$MODE" = gpu-reuse ]; then
  if [ -e "$VENV" ] && [ "$(cat "$VENV/rcgrpo-parent.txt" 2>/dev/null)" != "$PARENT" ]; then
    echo "setup_env.sh: $VENV is not an overlay of $PY's environment ($PARENT): remove it (or set VENV" \
      "elsewhere) and rerun" >&2
    return 1 2>/dev/null || exit 1
  fi
  if [ ! -x "$VENV/bin/python" ]; then
    # shellcheck disable=SC2086
    "$PY" -m venv $VENV_ARGS "$VENV"
  fi
  "$PY" "$_rcgrpo_root/launch/gpu_env.py" overlay "$VENV" "$_rcgrpo_root"  # cheap: refreshed every time
  # Every time (metadata reads, no imports): what the image holds against setup.py, then what is missing.
  if ! "$VENV/bin/python" "$_rcgrpo_root/launch/gpu_env.py" versions "$_rcgrpo_root/launch/gpu_wheels.txt"; then
    return 1 2>/dev/null || exit 1
  fi
  _pip="$(_rcgrpo_reuse_pip "$VENV/bin/python")"
  if [ -n "$_pip" ]; then
    mapfile -t _args <<< "$_pip"
    # PY's pip, run by the overlay's interpreter, installs into the overlay; a PY without pip gets the
    # bundled one (ensurepip: no network).
    "$VENV/bin/python" -m pip --version > /dev/null 2>&1 || "$VENV/bin/python" -m ensurepip -q
    PIP_DISABLE_PIP_VERSION_CHECK=1 "$VENV/bin/python" -m pip "${_args[@]}"
  fi
  echo "$WANT" > "$STAMP"
else
  if [ ! -x "$VENV/bin/python" ]; then
    # shellcheck disable=SC2086
    "$PY" -m venv $VENV_ARGS "$VENV"
  fi
  if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
    for _s in "${STEPS[@]}"; do
      mapfile -t _args <<< "$_s"
      "$VENV/bin/python" -m pip "${_args[@]}"
    done
    echo "$WANT" > "$STAMP"
  fi
fi
if [ "$MODE" != cpu ]; then
  "$VENV/bin/python" "$_rcgrpo_root/launch/gpu_env.py" check --gpu
fi
export RCGRPO_PYTHON="$VENV/bin/python"
export PATH="$VENV/bin:$PATH"
