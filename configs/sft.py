"""SFT baseline: fine-tune on expert trajectories only (paper Table 12, the baselines: lr 1e-5, batch 16, 2 epochs,
AdamW). The optimizer's other settings (warmup 3%, cosine to 0, betas, eps, weight decay 0, clip norm 1.0:
rcgrpo_jax/config_lib/common.py) are this project's choices; docs/paper_vs_code.md lists them.

  python -m rcgrpo_jax.main --config=configs/sft.py:tiny --workdir=/tmp/sft
  python -m rcgrpo_jax.main --config=configs/sft.py:qwen2_5_7b --config.model.path=/models/Qwen2.5-7B-Instruct \
      --config.data.path=/data/sft.jsonl --workdir=/ckpt/sft
"""

from rcgrpo_jax.config_lib import common


def get_config(arg: str | None = None):
    preset = common.parse_preset(arg)
    c = common.base("sft", preset, lr=1e-5, trainer="supervised")
    c.data.kind = "expert"
    # True when the SFT data carry a reward-goal slot (datasets.sft_records(reward_slot="random"): each expert
    # with a token drawn at random, so the tokens mean nothing yet): the two tokens join the tokenizer.
    c.add_reward_tokens = False
    return common.supervised_budget(c)
