#!/usr/bin/env bash
# The CPU reproduction over 3 seeds (the issue's goal (d)): quickstart.sh with --seeds 3, the `reproduce` budget
# and its own workdir.
#
#   bash launch/reproduce.sh [--workdir DIR] [any quickstart.sh / pipeline.ablation flag]
#
# Stage 1 is trained once (seed 0); every RL row runs with seeds 0, 1, 2 from it. report.json then holds the
# rows' means over seeds, their per-seed values and the paired comparison of RC-GRPO against GRPO from each
# stage-1 model (paired bootstrap over seeds and test tasks, and a sign test over seeds). The `reproduce` budget
# is the quickstart's (pipeline/budgets.py: the same stage 1 and RL rows, so it resumes a quickstart workdir) plus
# one control pair at seed 0: RCTP-FT+GRPO and RCTP-FT+RC-GRPO at the paper presets' RL settings (temperature
# 1.0, KL beta 0.1, i.i.d. reward tokens, G 5), with its zero-variance gap beside the budget's. The report lists
# every RL setting that differs from the paper presets. Default DIR: runs/reproduce.
# Measure with:  /usr/bin/time -v bash launch/reproduce.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec bash "$ROOT/launch/quickstart.sh" --workdir "$ROOT/runs/reproduce" --seeds 3 --budget reproduce "$@"
