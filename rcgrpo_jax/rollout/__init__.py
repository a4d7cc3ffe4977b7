"""Multi-turn rollouts: the batched engine, per-episode records, model and scripted policies."""

from rcgrpo_jax.rollout.engine import EpisodeSpec, Policy, RolloutConfig, StepSample, run_episodes, with_reward_goal
from rcgrpo_jax.rollout.episode import RENDER_ERROR, Episode, Sample
from rcgrpo_jax.rollout.policies import KEEP, SHRINK, ModelPolicy, ScriptedPolicy, oracle_texts

__all__ = [
    "KEEP",
    "RENDER_ERROR",
    "SHRINK",
    "Episode",
    "EpisodeSpec",
    "ModelPolicy",
    "Policy",
    "RolloutConfig",
    "Sample",
    "ScriptedPolicy",
    "StepSample",
    "oracle_texts",
    "run_episodes",
    "with_reward_goal",
]
