#!/usr/bin/env bash
# The whole test suite: sets up .venv (see setup_env.sh), then runs pytest on 8 fake CPU devices.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/launch/setup_env.sh"
cd "$ROOT"
export JAX_PLATFORMS=cpu
python -m pytest -q tests "$@"
