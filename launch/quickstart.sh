#!/usr/bin/env bash
# The CPU reproduction: the paper's ablation in miniature, one command, one Python process.
#
#   bash launch/quickstart.sh [--seeds N] [--workdir DIR] [--budget quickstart|smoke] [--eval_split iid|test|train|dev] [--formulas]
#
# Sets up .venv (launch/setup_env.sh: package registries only, no model or data downloads), then runs
# experiments.ablation: world + tiny Qwen3 checkpoint -> base eval -> SFT and RCTP-FT -> GRPO and
# RC-GRPO from each (equal budgets, fixed seeds) -> greedy eval with BFCL's official checker -> DIR/report.md
# and DIR/plots/*.png. Default DIR: runs/ablation. A rerun with the same DIR resumes finished stages.
# Measure peak memory with:  /usr/bin/time -v bash launch/quickstart.sh   ("Maximum resident set size").
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORKDIR="$ROOT/runs/ablation"
ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --workdir) WORKDIR="$2"; shift 2 ;;
    --workdir=*) WORKDIR="${1#*=}"; shift ;;
    -h|--help) sed -n '2,12p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) ARGS+=("$1"); shift ;;
  esac
done
START=$(date +%s)
source "$ROOT/launch/setup_env.sh"
echo "setup: $(( $(date +%s) - START ))s"
cd "$ROOT"
export JAX_PLATFORMS=cpu TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
python -m experiments.ablation --workdir "$WORKDIR" ${ARGS[@]+"${ARGS[@]}"}
echo "total: $(( $(date +%s) - START ))s; report: $WORKDIR/report.md"
