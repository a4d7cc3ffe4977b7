"""RCTP-FT (stage 1): a reward-conditioned trajectory policy on expert + failure trajectories, 1:1.

The first user message of each example ends with `[Reward Goal: <|high_reward|>]` or
`[Reward Goal: <|low_reward|>]`; the two reward tokens are added to the tokenizer and the embeddings
are resized before training (paper Table 11: lr 1e-5, batch 16, 5 epochs, AdamW).

  python -m rcgrpo_jax.main --config=configs/rctp_ft.py:tiny --workdir=/tmp/rctp
"""

from rcgrpo_jax.config_lib import common


def get_config(arg: str | None = None):
    preset = common.parse_preset(arg)
    c = common.base("rctp_ft", preset, lr=1e-5, trainer="supervised")
    c.data.kind = "rctp"  # expert (high) + failure (low) trajectories with the reward goal text
    c.train.epochs = 5
    c.add_reward_tokens = True
    return common.supervised_budget(c)
