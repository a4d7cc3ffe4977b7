#!/usr/bin/env bash
# The paper's pipeline on GPUs, stage by stage through rcgrpo_jax.main (one 8-GPU host per stage):
#   SFT -> exploration (the base model's own rollouts on the train tasks; those that score 0 join the
#   generated failures) -> RCTP-FT -> RC-GRPO from RCTP-FT and the GRPO baselines (SFT+GRPO, SFT+RC-GRPO, RCTP-FT+GRPO)
#   -> evaluation of the base model and of every RL row on the BFCL test split.
#
#   bash launch/pipeline.sh PRESET MODEL_DIR OUT_DIR [--dry-run]
#     PRESET     qwen2_5_7b | llama3_1_8b (configs/<stage>.py presets)
#     MODEL_DIR  the local HF checkpoint of the base model (e.g. Qwen2.5-7B-Instruct)
#     OUT_DIR    one sub-directory per stage; each stage's final policy is OUT_DIR/<stage>/hf
#     --dry-run  print the commands without running them
#
# Every stage resumes from its own checkpoints, so rerunning the script after an interruption continues.
# A stage stopped by SIGTERM or SIGINT saves and exits 75 (rcgrpo_jax.main.PREEMPTED_EXIT): the script then
# stops with exit 75 and never starts the next stage; rerun it (or let a supervisor requeue it) to resume.
# Any other failure stops it with that stage's exit code.
# Extra overrides for every stage can be passed in EXTRA (e.g. EXTRA="--config.train.max_steps=10").
# First the multi-GPU check (benchmarks/mesh_check.py: the preset's mesh over every local GPU, a psum, one SFT
# and one RL step of a tiny model on it); a failed check stops the script. RCGRPO_SKIP_MESH_CHECK=1 skips it.
# The stages run with the interpreter of the environment launch/setup_env.sh sets up (its RCGRPO_PYTHON,
# .venv-gpu/bin/python; PYTHON there is only the Python it reuses or builds from). RCGRPO_SETUP=0 uses the
# current environment as it is instead, and runs the stages (as --dry-run prints them) with PYTHON (default python).
# The XLA and NCCL settings the presets need live in rcgrpo_jax/runtime.py (GPU_ENV, XLA_GPU_FLAGS).
# For several hosts, launch/slurm.sbatch runs one stage per job with jax.distributed.
set -euo pipefail
if [ $# -lt 3 ]; then sed -n '2,24p' "${BASH_SOURCE[0]}"; exit 2; fi
PRESET="$1"; MODEL="$2"; OUT="$3"; DRY="${4:-}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
EXTRA="${EXTRA:-}"
STAGE_PY="${PYTHON:-python}"  # not PY: setup_env.sh sets that one for itself
PREEMPTED=75  # rcgrpo_jax.main.PREEMPTED_EXIT
stage() {  # stage NAME CMD...: runs CMD; a preempted or failed stage ends the script with its exit code
  local name="$1" rc=0; shift
  "$@" || rc=$?
  if [ "$rc" -eq "$PREEMPTED" ]; then
    echo "pipeline: stage $name was preempted (exit $PREEMPTED, checkpoint saved); rerun this script to resume it" >&2
    exit "$PREEMPTED"
  elif [ "$rc" -ne 0 ]; then
    echo "pipeline: stage $name failed (exit $rc); the later stages were not started" >&2
    exit "$rc"
  fi
}
run() {  # run STAGE_NAME CONFIG_FILE [overrides...]
  local name="$1" cfg="$2"; shift 2
  local cmd=("$STAGE_PY" -m rcgrpo_jax.main "--config=$ROOT/configs/$cfg.py:$PRESET" "--workdir=$OUT/$name" "$@")
  # shellcheck disable=SC2206
  [ -n "$EXTRA" ] && cmd+=($EXTRA)
  echo "+ ${cmd[*]}"
  if [ "$DRY" != "--dry-run" ]; then stage "$name" "${cmd[@]}"; fi
}
if [ "$DRY" != "--dry-run" ]; then
  # GPU mode (.venv-gpu; reuses a preinstalled CUDA jax): RCGRPO_GPU=0 for the CPU environment
  if [ "${RCGRPO_SETUP:-1}" != 0 ]; then
    RCGRPO_GPU="${RCGRPO_GPU:-1}" source "$ROOT/launch/setup_env.sh"
    STAGE_PY="$RCGRPO_PYTHON"
  fi
  cd "$ROOT"
fi
if [ "${RCGRPO_SKIP_MESH_CHECK:-0}" != 1 ]; then  # the multi-GPU check (see the header)
  mesh_check=("$STAGE_PY" -m benchmarks.mesh_check --preset "$PRESET" --workdir "$OUT/mesh_check")
  echo "+ ${mesh_check[*]}"
  if [ "$DRY" != "--dry-run" ]; then stage mesh_check "${mesh_check[@]}"; fi
fi
run sft sft "--config.model.path=$MODEL"
EXPLORED="$OUT/explore/rollouts.jsonl"
explore=("$STAGE_PY" -m rcgrpo_jax.train.exploration --preset "$PRESET" --model "$MODEL" --out "$EXPLORED" --source bfcl --group 4)
echo "+ ${explore[*]}"
if [ "$DRY" != "--dry-run" ] && [ ! -s "$EXPLORED" ]; then mkdir -p "$OUT/explore"; stage explore "${explore[@]}"; fi
run rctp_ft rctp_ft "--config.model.path=$MODEL" "--config.data.exploration_path=$EXPLORED"
for INIT in sft rctp_ft; do
  for ALGO in grpo rc_grpo; do
    run "${INIT}_${ALGO}" "$ALGO" "--config.model.path=$OUT/$INIT/hf" "--config.reference.path=$OUT/$INIT/hf"
  done
done
run eval_base eval "--config.model.path=$MODEL"
for INIT in sft rctp_ft; do
  for ALGO in grpo rc_grpo; do
    run "eval_${INIT}_${ALGO}" eval "--config.model.path=$OUT/${INIT}_${ALGO}/hf"
  done
done
