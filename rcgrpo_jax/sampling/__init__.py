"""Jitted KV-cache sampling: prefill + one while_loop decode, greedy/temperature/top-k/top-p."""

from rcgrpo_jax.sampling.api import GenerateResult, generate
from rcgrpo_jax.sampling.decode_loop import Sampler, new_cache, right_pad, stop_table
from rcgrpo_jax.sampling.decode_step import DecodeCache, decode_weights
from rcgrpo_jax.sampling.next_token import SamplingParams, sample
from rcgrpo_jax.sampling.state import DecodeOutput, DecodeState

__all__ = [
    "DecodeCache",
    "DecodeOutput",
    "DecodeState",
    "GenerateResult",
    "Sampler",
    "SamplingParams",
    "decode_weights",
    "generate",
    "new_cache",
    "right_pad",
    "sample",
    "stop_table",
]
