"""DAPO: clip-higher (eps_low 0.2, eps_high 0.28), token-mean loss, no KL term, the dynamic-sampling
group filter (groups whose rewards are all equal carry no group-relative signal and get no loss; DAPO
resamples to refill the batch, we keep shapes fixed and mask them, counted in dapo_frac_dropped), and
the soft overlong punishment on the response length: an episode whose sampled tokens (the model's own, not
the prompt or tool output: rl.shaping.response_lengths) reach the last eighth of L_max loses up to 1 reward.
L_max = rl.shaping.dapo_overlong.max_len, in response tokens; 0 = rl.max_context (our choice: a multi-turn
episode has no response budget of its own, and DAPO's 20480 / 4096 was set for single-turn maths answers).
"""

from rcgrpo_jax.config_lib import common, rl_stage


def get_config(arg: str | None = None):
    c = rl_stage.base("dapo", common.parse_preset(arg), estimator="grpo")
    c.rl.loss.ppo_clip.eps_high = 0.28
    c.rl.loss.ppo_clip.kl_beta = 0.0
    c.rl.loss.ppo_clip.agg_mode = "token-mean"
    c.rl.group_filter.name = "dapo"
    c.rl.shaping.name = "dapo_overlong"
    c.rl.shaping.dapo_overlong.cache_len = int(c.rl.shaping.dapo_overlong.max_len or c.rl.max_context) // 8
    return c
