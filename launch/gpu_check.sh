#!/usr/bin/env bash
# One-shot accelerator check on a single H200 (no network, no pip): decode tokens/s of a random
# Qwen2.5-1.5B-shaped model at batch 1/16/64 with the fraction of the HBM bound, the production decode
# (Qwen2.5-7B-shaped, bf16, 40 rows each reading an 8k-slot span: tok/s, HBM fraction, peak memory), the MFU of one
# RC-GRPO update step on 8 x 4096 tokens, and cuDNN's fused attention against the XLA path at 4k and
# 16k tokens (Qwen2.5-7B heads: max difference, forward and backward times; --skip attention leaves it
# out), and the ragged (Pallas) against the dense XLA decode at the production decode shapes (tok/s, KV slots
# read, max log-prob difference, cache-sized copies in the program; --skip ragged_decode). Needs only what the box has: jax with its CUDA plugin, flax, optax, numpy, ml_collections and
# absl (the preflight line lists any that are missing). Prints JSON lines (rcgrpo_jax/bench/gpu.py) and
# finishes in under 8 minutes: measurements not started by --deadline-s are reported as skipped, and the
# whole run is killed at 470 s.
#   bash launch/gpu_check.sh            # run from the repository root (the copied working tree)
#   bash launch/gpu_check.sh --tiny     # the same script on tiny shapes (CPU smoke check)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY="${PYTHON:-python3}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export TOKENIZERS_PARALLELISM=false
# The RL step holds fp32 weights + AdamW moments (~25 GB) and 4k-token activations: let JAX take most
# of the 139 GiB rather than the default 75%.
export XLA_PYTHON_CLIENT_MEM_FRACTION="${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.92}"

# Preflight: report (as JSON) the modules the package needs that this machine lacks; the measurement
# that needs one then prints its own error row instead of stopping the others.
"$PY" - <<'PYEOF'
import importlib.util, json, sys
mods = ["jax", "flax", "optax", "numpy", "ml_collections", "absl"]
missing = [m for m in mods if importlib.util.find_spec(m) is None]
print(json.dumps({"bench": "preflight", "python": sys.version.split()[0], "missing_modules": missing}), flush=True)
PYEOF
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader 2>/dev/null \
  | sed 's/^/{"bench": "nvidia-smi", "gpu": "/; s/$/"}/' || true

timeout -k 10 470 "$PY" -m rcgrpo_jax.bench.gpu --deadline-s 400 --attention "$@"
rc=$?
[ $rc -eq 124 ] && echo '{"bench": "gpu_check", "error": "killed at 470 s"}'
exit $rc
