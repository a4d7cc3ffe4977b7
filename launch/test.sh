#!/usr/bin/env bash
# The whole test suite: sets up .venv (see setup_env.sh), then runs pytest on 8 fake CPU devices.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/launch/setup_env.sh"
cd "$ROOT"
export JAX_PLATFORMS=cpu
# One code style (ruff.toml): a formatting or lint slip fails here, before the tests.
ruff format --check --quiet . || { echo "ruff format --check failed: run 'ruff format .'" >&2; exit 1; }
ruff check --quiet .
# The 25 slowest tests close the log: the suite must stay under 20 minutes on 2 cores.
python -m pytest -q --durations=25 tests "$@"
