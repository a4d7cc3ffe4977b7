"""Jitted KV-cache sampling: prefill + one while_loop decode, greedy/temperature/top-k/top-p."""

from rcgrpo_jax.sampling.sample_fns import SamplingParams, sample
from rcgrpo_jax.sampling.sampler import GenerateResult, Sampler, generate, left_pad, new_cache, stop_table
from rcgrpo_jax.sampling.state import DecodeOutput, DecodeState

__all__ = [
    "DecodeOutput",
    "DecodeState",
    "GenerateResult",
    "Sampler",
    "SamplingParams",
    "generate",
    "left_pad",
    "new_cache",
    "sample",
    "stop_table",
]
