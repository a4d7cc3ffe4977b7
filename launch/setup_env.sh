#!/usr/bin/env bash
# Creates or reuses .venv and installs everything the project needs. Sourced by test.sh and quickstart.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
PY="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
# A stamp of the install inputs lets a warm .venv skip pip entirely.
STAMP="$VENV/.rcgrpo_install_stamp"
WANT="$(cat "$ROOT/setup.py" "$ROOT/launch/setup_env.sh" | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
  "$VENV/bin/python" -m pip install -q --upgrade pip
  # The test oracle: the CPU wheel these machines hold. Never an unpinned torch (multi-GB CUDA build).
  "$VENV/bin/python" -m pip install -q "torch==2.13.0"
  "$VENV/bin/python" -m pip install -q -e "$ROOT[test]"
  # The benchmark itself, without its heavy dependency tree (see shared/BFCL.md).
  "$VENV/bin/python" -m pip install -q --no-deps "bfcl-eval==2026.3.23"
  echo "$WANT" > "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
