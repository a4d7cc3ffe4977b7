"""The eval stage's config (configs/eval.py, and configs/awpo.py's `<preset>,eval`): `base(preset)`, the common
sections plus the `eval` section (`section()`).

eval.suite: one suite or several, comma-separated: multi_turn (the episodes of `eval.split` of `data.source`),
single_turn (BFCL's 13 single-turn categories) or bfcl_v4 (both; at most one of these three), api_bank
(API-Bank levels 1-3 from `eval.api_bank.path`) and mmlu_pro (MMLU-Pro from `eval.mmlu_pro.path`). eval.split: test | train | all for multi-turn (all = the 800 tasks);
single-turn entries are never trained on, so test and all both mean every entry (train is refused).
"""

from __future__ import annotations

import ml_collections
from ml_collections.config_dict import placeholder

from rcgrpo_jax.config_lib import common


def base(preset: str) -> ml_collections.ConfigDict:
    """The eval stage at `preset` (a name of common.PRESETS)."""
    c = common.base("eval", preset, lr=1e-5, trainer="eval")  # optim/train are unused but keep the checks uniform
    c.train.batch_size = 1
    c.train.grad_accum = 1
    c.model.build_tiny = False  # evaluating a random model means nothing: model.path is required ...
    c.eval = section()
    if preset == "tiny":  # the CPU world's episodes: short contexts and steps, one small prefill chunk
        c.model.build_tiny = True  # ... except for the oracle on tiny, which only needs a tokenizer
        c.eval.batch_size = 64
        c.eval.max_context = 2048
        c.eval.max_step_tokens = 128
        c.eval.prefill_chunk = 256
        c.eval.mmlu_pro.max_new_tokens = 64
    return c


def section() -> ml_collections.ConfigDict:
    """The `eval` section with its defaults."""
    c = ml_collections.ConfigDict()
    # multi_turn | single_turn | bfcl_v4 (both; overall = BFCL's offline weighting), api_bank, mmlu_pro; several
    # comma-separated run in one command (e.g. "bfcl_v4,api_bank,mmlu_pro"), at most one of the BFCL three
    c.suite = "multi_turn"
    # model (greedy decoding) | oracle (scripted ground truth: checks the scoring path) | replay (score
    # raw assistant texts made elsewhere, single- and multi-turn, never calling the model)
    c.policy = "model"
    # replay: the folder `bfcl generate` writes (its BFCL_v4_*_result.json files, found recursively), one
    # such file, or our JSONL {"id": ..., "output": ...}; steps are decoded by the model family's parser
    c.replay_path = ""
    # replay: an entry with no result in the files (absent, or on a line that does not decode) stops the run
    # (exit 2, after eval.json is written) unless this is True; then it is scored as a failure and the
    # table shows the missing count beside each category.
    c.allow_missing = False
    # Non-empty: also write this run's outputs as `bfcl generate` does, under DIR/<model>/<group>/, for
    # `bfcl evaluate` and `python -m rcgrpo_jax.eval.agree` (rcgrpo_jax.eval.bfcl_results)
    c.bfcl_results_dir = ""
    # The BFCL model name those files are written for; "" = the family's (hermes: Qwen/Qwen3-0.6B-FC,
    # whose handler decodes <tool_call> blocks; llama3_json: meta-llama/Llama-3.1-8B-Instruct-FC)
    c.bfcl_model = ""
    c.reward_token = "auto"  # auto (high if the tokenizer has the reward tokens) | high | low | none
    c.split = "test"  # test | train | all | rl | iid | dev (multi-turn; train, dev = tuning on the training side only)
    # > 0: the first N multi-turn tasks of the split, the first N entries of each single-turn category, API-Bank
    # level and MMLU-Pro subject
    c.max_tasks = -1
    c.batch_size = 32  # episodes per rollout batch
    c.max_context = 32768  # tokens per episode; past it: truncated
    c.max_step_tokens = 1024  # decode budget of one assistant step
    c.prefill_chunk = 2048
    c.render_mode = "auto"  # append | rerender | auto (as rl.render_mode)
    c.thinking = placeholder(bool)  # the template's enable_thinking (Qwen3); None = the template's default
    c.max_steps_per_turn = placeholder(int)  # None = the environment's cap (BFCL: 20); past it the turn ends
    # Categories reported apart and left out of `overall` (the world's held-out compositions).
    c.heldout_categories = ("compose_heldout",)
    # API-Bank (rcgrpo_jax/data/api_bank.py): DIR = a copy of the benchmark's api-bank/ folder (apis/,
    # init_database/, lv1-lv2-samples/, lv3_apis/) with its released test-data/level-3.json; levels: any of 1,2,3
    c.api_bank = ml_collections.ConfigDict({"path": "", "levels": "1,2,3"})
    # MMLU-Pro (rcgrpo_jax/eval/mmlu_pro.py): FILE_OR_DIR = the released test split (parquet or JSON lines), with
    # the validation split beside it for shots > 0 (the benchmark's script: 5); max_new_tokens: its 2048
    c.mmlu_pro = ml_collections.ConfigDict({"path": "", "shots": 0, "max_new_tokens": 2048})
    return c
