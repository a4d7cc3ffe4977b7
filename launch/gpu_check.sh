#!/usr/bin/env bash
# One-shot accelerator check on a single H200 (or a host of several GPUs), offline. First the multi-GPU stage
# (benchmarks/mesh_check.py, ~2 min estimated, killed at 240 s; RCGRPO_SKIP_MESH_CHECK=1 skips it): qwen2_5_7b's
# mesh over every local GPU (--fit: fsdp over them when they cannot hold it, as one GPU cannot), a psum across
# them, one SFT and one RL step of a tiny model on it, and the XLA/NCCL settings the presets run with. Then, in
# order, most wanted first (benchmarks/gpu.py):
#   attention      every training attention that can run (XLA, cuDNN, tokamax's Mosaic GPU kernel, the Pallas
#                  Triton kernel where JAX ships it) at 4k and 16k tokens (Qwen2.5-7B heads: max difference from
#                  XLA, forward and backward times; `fastest_fwd_bwd` names the fastest, `override` the flag that
#                  takes it where it is not what `auto` picks, e.g. --config.model.attention_impl=cudnn; --skip attention
#                  leaves it out)
#   ragged_decode  the ragged (Pallas) against the dense XLA decode at the production decode shapes (tok/s,
#                  KV slots read, max log-prob difference, cache-sized copies in the program)
#   packed_attention  the packed append's block-pair attention against dense attention over the span, on one
#                  row shard at the production decode shapes (times, pairs computed, TFLOP/s, difference)
#   rl_step        the MFU of one RC-GRPO update step on 8 x 4096 tokens (Qwen2.5-1.5B-shaped)
#   prod_decode    the production decode (Qwen2.5-7B-shaped, bf16, 40 rows each reading an 8k-slot span)
#   decode         decode tokens/s of a Qwen2.5-1.5B-shaped model (batch 64; --decode-batches 1,16,64)
# First an "image_packages" row (every distribution python3 holds, and where launch/gpu_image_packages.txt,
# the project's record of the image, is wrong), then the environment: `launch/setup_env.sh --gpu` over
# python3's CUDA jax (reuse only: never a networked install), installing the missing wheels from
# RCGRPO_WHEELS=DIR (made by launch/wheels.sh on a networked machine; carry it with the tree). A setup that
# fails prints its row and the check still runs with what there is (each row reports its own error).
# Every line is JSON; all of them, after a dated header row, also go to GPU_CHECK_OUT (default
# runs/gpu_check/<UTC date>.jsonl). Within 12 minutes: the setup (~30 s; its import check included), the
# multi-GPU stage, then the measurements (started until 330 s, killed at 420 s; rows not started are reported as
# skipped). The exit code is the first failure's: the multi-GPU stage's, else the measurements'.
#   RCGRPO_WHEELS=DIR bash launch/gpu_check.sh     # from the repository root of the copied working tree
#   bash launch/gpu_check.sh --tiny                # the same script on tiny shapes (CPU smoke check)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$PWD"
PY="${PYTHON:-python3}"
OUTFILE="${GPU_CHECK_OUT:-$ROOT/runs/gpu_check/$(date -u +%Y%m%dT%H%M%SZ).jsonl}"
mkdir -p "$(dirname "$OUTFILE")"
: > "$OUTFILE"
emit() { echo "$1" | tee -a "$OUTFILE"; }  # one JSON line to stdout and the file
json() { "$PY" -c 'import json, sys; print(json.dumps(sys.argv[1]))' "$1"; }  # a string as JSON

emit "{\"bench\": \"gpu_check\", \"date_utc\": \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\", \"commit\": $(json "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"), \"args\": $(json "$*")}"
"$PY" "$ROOT/launch/gpu_env.py" installed 2>&1 | tee -a "$OUTFILE"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader 2>/dev/null \
  | sed 's/^/{"bench": "nvidia-smi", "gpu": "/; s/$/"}/' | tee -a "$OUTFILE" || true

# The environment: reuse python3's CUDA jax (RCGRPO_GPU_REUSE=1: no CUDA jax means no setup, not a download).
VENV="${VENV:-$ROOT/.venv-gpu}"
t0=$SECONDS
setup_log="$(PYTHON="$PY" VENV="$VENV" RCGRPO_GPU_REUSE=1 bash "$ROOT/launch/setup_env.sh" --gpu 2>&1)"
setup_rc=$?
if [ $setup_rc -eq 0 ]; then
  RUN_PY="$VENV/bin/python"
  emit "{\"bench\": \"setup_env\", \"ok\": true, \"s\": $((SECONDS - t0)), \"venv\": $(json "$VENV"), \"log\": $(json "$setup_log")}"
elif grep -q "no CUDA jax" <<< "$setup_log"; then
  RUN_PY="$PY"
  emit "{\"bench\": \"setup_env\", \"skipped\": $(json "$PY holds no CUDA jax: running with it as it is")}"
else
  RUN_PY="$PY"
  [ -x "$VENV/bin/python" ] && RUN_PY="$VENV/bin/python"
  emit "{\"bench\": \"setup_env\", \"ok\": false, \"error\": $(json "$setup_log"), \"running_with\": $(json "$RUN_PY")}"
fi

export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export TOKENIZERS_PARALLELISM=false
mesh_rc=0
if [ "${RCGRPO_SKIP_MESH_CHECK:-0}" = 1 ]; then
  emit '{"bench": "mesh_check", "skipped": "RCGRPO_SKIP_MESH_CHECK=1"}'
else
  timeout -k 10 240 "$RUN_PY" -m benchmarks.mesh_check --preset qwen2_5_7b --fit | tee -a "$OUTFILE"
  mesh_rc=${PIPESTATUS[0]}
  [ "$mesh_rc" -eq 124 ] && emit '{"bench": "mesh_check", "error": "killed at 240 s"}'
fi
# The RL step holds fp32 weights + AdamW moments (~25 GB) and 4k-token activations: let JAX take most
# of the 139 GiB rather than the default 75%.
export XLA_PYTHON_CLIENT_MEM_FRACTION="${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.92}"
timeout -k 10 420 "$RUN_PY" -m benchmarks.gpu --deadline-s 330 --attention "$@" | tee -a "$OUTFILE"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 124 ] && emit '{"bench": "gpu_check", "error": "killed at 420 s"}'
echo "gpu_check: wrote $OUTFILE" >&2
[ "$mesh_rc" -ne 0 ] && rc=$mesh_rc
exit "$rc"
