#!/usr/bin/env bash
# The whole test suite: sets up .venv (see setup_env.sh), then runs pytest on 8 fake CPU devices.
#   bash launch/test.sh            every test (CI)
#   bash launch/test.sh --fast     the unit tests only (`-m "not slow"`, a few minutes); no side env is built
# A full run (no --fast) also runs the gpu-image lane (below) unless pytest arguments are given.
# Other arguments go to pytest (bash launch/test.sh tests/rl -k gspo).
set -euo pipefail
FAST=0
if [[ "${1:-}" == "--fast" ]]; then
  FAST=1
  shift
fi
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/launch/setup_env.sh"
cd "$ROOT"
export JAX_PLATFORMS=cpu
# One code style (ruff.toml): a formatting or lint slip fails here, before the tests.
ruff format --check --quiet . || { echo "ruff format --check failed: run 'ruff format .'" >&2; exit 1; }
ruff check --quiet .
# tests/eval/test_agree.py checks our scorer against bfcl-eval's own `bfcl evaluate`, which runs in a side env
# (.venv-bench-bfcl, ~1 min to build): built here when the package registry answers, else the test skips.
if [[ "$FAST" == 0 ]] && ! bash launch/bench_env.sh bfcl --check >/dev/null 2>&1; then
  probe="$(mktemp -d)"
  if timeout 60 python -m pip download -q --no-deps --disable-pip-version-check -d "$probe" bfcl-eval==2026.3.23 \
      >/dev/null 2>&1; then
    bash launch/bench_env.sh bfcl >/dev/null \
      || echo "test.sh: building the bfcl side env failed; tests/eval/test_agree.py will skip" >&2
  else
    echo "test.sh: the package registry cannot be reached: no bfcl side env, tests/eval/test_agree.py will skip" >&2
  fi
  rm -rf "$probe"
fi
# The GPU image's versions (DESIGN.md, "The production path": jax 0.11.2, numpy 2.5.2, transformers 5.17.0 on
# Python 3.12, no torch; launch/gpu_image_packages.txt): a side env, .venv-bench-gpu-image (~75 s to build),
# runs the lowering proof at tiny shapes and the model, sampling and RL tests that need no HF oracle (torch)
# after the suite (GPU_IMAGE_TESTS: 110 s of tests on one core, ~1 min on 2 workers). Built when the registry
# answers and a Python 3.12 is here, else skipped with the reason printed; a failed build with both at hand
# fails the run.
GPU_IMAGE_TESTS=(
  tests/benchmarks/test_cuda_lower.py
  tests/models/test_attention_tokamax.py
  tests/models/test_attention_pallas.py::test_lowering_for_cuda_exports_the_triton_kernel
  tests/models/test_attention_select.py
  tests/models/test_config.py
  tests/models/test_linear.py
  tests/sampling/test_block_attention.py
  tests/sampling/test_row_shards.py
  tests/sampling/test_next_token.py
  tests/sampling/test_decode_tokamax.py::test_attend_reads_each_rows_own_slots
  tests/sampling/test_decode_tokamax.py::test_selection
  tests/sampling/test_decode_tokamax.py::test_lowering_for_cuda_is_tokamaxs_triton_kernel
  tests/rl/test_rl_losses.py
  tests/rl/test_rl_logprobs.py
  tests/rl/test_rl_diagnostics.py
  tests/rl/test_rl_shaping.py
  tests/rl/test_rl_filters.py
  tests/rl/test_rl_swap.py
  tests/test_runtime.py::test_xla_knows_every_flag_and_the_entry_points_set_them_in_time
)
gpu_image_py=""
if [[ "$FAST" == 1 ]]; then
  :
elif [[ $# -gt 0 ]]; then
  echo "test.sh: pytest arguments given: the gpu-image lane is not run" >&2
elif ! gpu_image_py="$(bash launch/bench_env.sh gpu-image --check 2>/dev/null)"; then
  gpu_image_py=""
  probe="$(mktemp -d)"
  if timeout 60 python -m pip download -q --no-deps --disable-pip-version-check --only-binary=:all: \
      --python-version 3.12 -d "$probe" jax==0.11.2 >/dev/null 2>&1; then
    rc=0
    gpu_image_py="$(bash launch/bench_env.sh gpu-image)" || rc=$?
    if [[ $rc == 3 ]]; then  # bench_env.sh printed why: no Python 3.12 here
      echo "test.sh: no Python 3.12: the gpu-image lane is skipped" >&2
      gpu_image_py=""
    elif [[ $rc != 0 ]]; then
      echo "test.sh: building the gpu-image side env failed (the registry answered)" >&2
      exit 1
    fi
  else
    echo "test.sh: the package registry cannot be reached: no gpu-image side env, the gpu-image lane is skipped" >&2
  fi
  rm -rf "$probe"
fi
# The suite must stay under 20 minutes on 2 cores. Most tests compile and run tiny programs on one thread, so
# one pytest-xdist worker per core (RCGRPO_TEST_WORKERS, default 2; 0 = in this process) about halves the wall
# time. --dist loadfile keeps each file on one worker, so a module's shared fixtures (the ablation smoke run,
# the two-process runs) are built once. The 25 slowest tests close the log.
# The fast lane deselects the tests marked slow (pytest.ini): whole stages, subprocesses, HF oracles.
select=()
[[ "$FAST" == 1 ]] && select=(-m "not slow")
python -m pytest -q -n "${RCGRPO_TEST_WORKERS:-2}" --dist loadfile --durations=25 "${select[@]}" tests "$@"
if [[ -n "$gpu_image_py" ]]; then
  echo "test.sh: the gpu-image lane: $("$gpu_image_py" -c 'import jax, sys; print("jax", jax.__version__, "on Python", sys.version.split()[0])')"
  "$gpu_image_py" -m pytest -q -p no:cacheprovider -n "${RCGRPO_TEST_WORKERS:-2}" --dist loadfile "${GPU_IMAGE_TESTS[@]}"
fi
