#!/usr/bin/env bash
# The CPU reproduction over 3 seeds of the whole pipeline (stage 1 included): the quickstart's budget, each seed
# from its own base checkpoint through SFT, exploration, RCTP-FT and the four RL rows; the controls at seed 0.
#
#   bash launch/reproduce.sh [--workdir DIR] [--seeds N] [--jobs J] [--formulas]
#
# Each seed is one process (`python -m experiments.ablation --only_seed S`), J at a time. Default 1: two
# side by side on this 2-core machine took 1.6 s an SFT step each (with other work running), where one alone on
# an idle machine takes 0.33 s, as XLA's threads of both fight over the cores; J > 1 is for machines with cores
# to spare. Then one run over all seeds finds every stage done and writes DIR/report.md and report.json: each
# row's mean and spread over seeds (stage 1's beside RL's), the paired bootstrap of every RL row against its
# init and of RC-GRPO against GRPO, the controls and the curves under DIR/plots. Default DIR: runs/reproduce.
# --formulas: every seed also runs RCTP-FT+GRPO with the dr_grpo and with the rloo advantage (nothing else changed;
# experiments.ablation.FORMULA_ROWS), reported beside RCTP-FT+GRPO with paired intervals; a rerun with it over a
# finished DIR trains only those rows.
# Measure with:  /usr/bin/time -v bash launch/reproduce.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORKDIR="$ROOT/runs/reproduce"
SEEDS=3
JOBS=1
FORMULAS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --workdir) WORKDIR="$2"; shift 2 ;;
    --workdir=*) WORKDIR="${1#*=}"; shift ;;
    --seeds) SEEDS="$2"; shift 2 ;;
    --seeds=*) SEEDS="${1#*=}"; shift ;;
    --jobs) JOBS="$2"; shift 2 ;;
    --jobs=*) JOBS="${1#*=}"; shift ;;
    --formulas) FORMULAS=(--formulas); shift ;;
    -h|--help) sed -n '2,16p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "reproduce.sh: unknown option $1 (--workdir, --seeds, --jobs, --formulas)" >&2; exit 2 ;;
  esac
done
START=$(date +%s)
source "$ROOT/launch/setup_env.sh"
cd "$ROOT"
export JAX_PLATFORMS=cpu TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
mkdir -p "$WORKDIR"
run_seed() {
  python -m experiments.ablation --budget reproduce --workdir "$WORKDIR" --seeds "$SEEDS" --only_seed "$1" \
    ${FORMULAS[@]+"${FORMULAS[@]}"} > "$WORKDIR/seed_$1.log" 2>&1 || { echo "seed $1 failed: see $WORKDIR/seed_$1.log" >&2; return 1; }
  echo "seed $1 done ($(( $(date +%s) - START ))s)"
}
running=0
failed=0
for (( s = 0; s < SEEDS; s++ )); do  # seed 0 first: it also runs the controls, the longest
  if (( running >= JOBS )); then
    wait -n || failed=1
    running=$(( running - 1 ))
  fi
  run_seed "$s" &
  running=$(( running + 1 ))
done
while (( running > 0 )); do
  wait -n || failed=1
  running=$(( running - 1 ))
done
[ "$failed" = 0 ] || exit 1
python -m experiments.ablation --budget reproduce --workdir "$WORKDIR" --seeds "$SEEDS" ${FORMULAS[@]+"${FORMULAS[@]}"}
echo "total: $(( $(date +%s) - START ))s wall; report: $WORKDIR/report.md"
