"""The explicit KV cache and the attention masks built from it.

The cache is a plain pytree passed into and returned from `forward`. The batch shares one write index:
a call with T tokens writes slots [index, index + T) for every row. Which slots hold real tokens is
recorded per row in `mask`, so left padding, right padding and holes (e.g. padding in the middle of a
multi-turn context) cost slots but are never attended to. RoPE positions are passed explicitly, so slot
numbers and positions are independent.

Writing past `max_len` cannot be detected inside jit (dynamic_update_slice clamps the start); callers
size the cache for prompt + generation.
"""

from __future__ import annotations

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp

from rcgrpo_jax.models.config import ModelConfig


@flax.struct.dataclass
class KVCache:
    k: jax.Array  # [L, B, S, Hkv, Dh]
    v: jax.Array  # [L, B, S, Hkv, Dh]
    mask: jax.Array  # [B, S] bool: the slot holds a real token
    index: jax.Array  # int32 scalar: next write slot, shared by the batch

    @property
    def max_len(self) -> int:
        return self.k.shape[2]


def init_cache(config: ModelConfig, batch_size: int, max_len: int, dtype: Any = None) -> KVCache:
    shape = (config.num_layers, batch_size, max_len, config.num_kv_heads, config.head_dim)
    dtype = jnp.dtype(dtype or config.dtype)
    return KVCache(
        k=jnp.zeros(shape, dtype),
        v=jnp.zeros(shape, dtype),
        mask=jnp.zeros((batch_size, max_len), bool),
        index=jnp.zeros((), jnp.int32),
    )


def attention_mask(kv_valid: jax.Array, q_slots: jax.Array) -> jax.Array:
    """[B, 1, T, S] bool: query t may attend to slot s if s is valid and s <= q_slots[t].

    A query always sees its own slot, so a padding query (whose slot is invalid) still has one key and
    its softmax row stays finite on every attention backend; nothing real attends to padding.
    """
    slots = jnp.arange(kv_valid.shape[-1])
    not_after = slots[None, :] <= q_slots[:, None]  # [T, S]
    own = slots[None, :] == q_slots[:, None]
    allowed = (kv_valid[:, None, :] & not_after[None]) | own[None]
    return allowed[:, None]


def write_mask(cache: KVCache, token_mask: jax.Array) -> jax.Array:
    """The cache's slot mask after writing `token_mask` [B, T] at the current index."""
    return jax.lax.dynamic_update_slice(cache.mask, token_mask.astype(bool), (0, cache.index))


def write_kv(cache: KVCache, k_new: jax.Array, v_new: jax.Array, token_mask: jax.Array) -> KVCache:
    """Writes the new keys/values [L, B, T, Hkv, Dh] at the index and advances it by T."""
    start = (0, 0, cache.index, 0, 0)
    return KVCache(
        k=jax.lax.dynamic_update_slice(cache.k, k_new.astype(cache.k.dtype), start),
        v=jax.lax.dynamic_update_slice(cache.v, v_new.astype(cache.v.dtype), start),
        mask=write_mask(cache, token_mask),
        index=cache.index + k_new.shape[2],
    )
