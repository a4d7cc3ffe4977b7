"""The decoder (Qwen2/Qwen2.5, Qwen3 and LLaMA 3/3.1) and the pure functions around it.

Layers are stacked with `nn.scan`, so every per-layer param has a leading [L] axis (the HF mapping in
hf_io stacks/unstacks it) and compile time does not grow with depth. With `config.remat` each layer is
rematerialised in the backward pass.

Param tree (plain nested dict):
  embed/embedding [V, D]
  layers/{input_norm,post_attn_norm}/scale [L, D]
  layers/attn/{q,k,v}_proj/{kernel [L, D, H*Dh], bias [L, H*Dh] (qwen2; qwen3 with attention_bias)}
  layers/attn/o_proj/{kernel [L, H*Dh, D], bias [L, D] (qwen3 with attention_bias)}
  layers/attn/{q,k}_norm/scale [L, Dh] (qwen3)
  layers/mlp/{gate,up}_proj/kernel [L, D, F]; layers/mlp/down_proj/kernel [L, F, D]
  final_norm/scale [D];  lm_head/kernel [D, V] (untied only)
"""

from __future__ import annotations

import functools

import flax.core
import flax.linen as nn
import jax
import jax.numpy as jnp

from rcgrpo_jax.models.cache import KVCache, attention_mask, write_kv, write_mask
from rcgrpo_jax.models.config import ModelConfig
from rcgrpo_jax.models.layers import INIT_STD, Block, RMSNorm
from rcgrpo_jax.sharding import constrain

Params = dict


class LMHead(nn.Module):
    """The untied output projection, a separate module so its param is lm_head/kernel [D, V]."""

    config: ModelConfig

    @nn.compact
    def __call__(self) -> jax.Array:
        c = self.config
        return self.param("kernel", nn.initializers.normal(INIT_STD), (c.hidden_size, c.vocab_size), c.jnp_param_dtype)


class Decoder(nn.Module):
    config: ModelConfig

    @nn.compact
    def __call__(self, tokens, positions, mask, kv=None, index=None, return_hidden=False):
        """tokens/positions [B, T]; mask [B, 1, T, S]; kv = (k, v) [L, B, S, Hkv, Dh] or None.

        Returns (logits [B, T, V] f32 or hidden [B, T, D], (k_new, v_new) [L, B, T, Hkv, Dh]).
        """
        c = self.config
        embed = nn.Embed(
            c.vocab_size,
            c.hidden_size,
            dtype=c.jnp_dtype,
            param_dtype=c.jnp_param_dtype,
            embedding_init=nn.initializers.normal(INIT_STD),
            name="embed",
        )
        # Gather the table over 'fsdp' before the lookup (as FSDP does for every weight), so the lookup
        # lands batch-sharded instead of forcing XLA to rematerialise the activations.
        table = constrain(embed.embedding, ("act_vocab", None)).astype(c.jnp_dtype)
        x = constrain(jnp.take(table, tokens, axis=0), ("batch", "seq", "hidden"))
        block = nn.remat(Block, prevent_cse=False) if c.remat else Block
        layers = nn.scan(
            block,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            in_axes=(nn.broadcast, nn.broadcast, 0, nn.broadcast),
            length=c.num_layers,
            unroll=c.num_layers if c.scan_unroll < 1 else min(c.scan_unroll, c.num_layers),
        )(c, name="layers")
        x, new_kv = layers(x, positions, mask, kv, index)
        x = RMSNorm(c.rms_norm_eps, c.jnp_dtype, c.jnp_param_dtype, name="final_norm")(x)
        if return_hidden:
            return x, new_kv
        if c.tie_word_embeddings:
            w = embed.embedding.T
        else:
            w = LMHead(c, name="lm_head")()
        logits = jnp.dot(x, w.astype(c.jnp_dtype), preferred_element_type=jnp.float32)
        return constrain(logits, ("batch", "seq", "act_vocab")), new_kv


def _module(config: ModelConfig) -> Decoder:
    return Decoder(config)


@functools.partial(jax.jit, static_argnums=0)
def init_params(config: ModelConfig, rng: jax.Array) -> Params:
    """Random params (HF-style normal(0.02) init), as a plain nested dict. Jitted: one compile per config
    instead of many eager ops; jit it again with out_shardings to initialise straight onto a mesh."""
    tokens = jnp.zeros((1, 1), jnp.int32)
    mask = attention_mask(jnp.ones((1, 1), bool), jnp.zeros((1,), jnp.int32))
    variables = _module(config).init(rng, tokens, tokens, mask)
    return flax.core.unfreeze(variables["params"])


def abstract_params(config: ModelConfig) -> Params:
    """ShapeDtypeStructs of the params, without allocating anything."""
    return jax.eval_shape(init_params, config, jax.random.key(0))


def forward(
    config: ModelConfig,
    params: Params,
    tokens: jax.Array,
    positions: jax.Array,
    token_mask: jax.Array,
    cache: KVCache | None = None,
    *,
    return_hidden: bool = False,
):
    """One pass over T tokens per row. Returns (logits [B, T, V] f32 | hidden [B, T, D], cache | None).

    Without a cache, query t attends to the valid tokens at or before t. With a cache, the T tokens go to
    slots [index, index + T) and attend to every valid slot not after their own; index advances by T.
    """
    t = tokens.shape[1]
    module_params = {"params": params}
    if cache is None:
        mask = attention_mask(token_mask.astype(bool), jnp.arange(t))
        out, _ = _module(config).apply(module_params, tokens, positions, mask, return_hidden=return_hidden)
        return out, None
    mask = attention_mask(write_mask(cache, token_mask), cache.index + jnp.arange(t))
    out, (k_new, v_new) = _module(config).apply(
        module_params, tokens, positions, mask, (cache.k, cache.v), cache.index, return_hidden=return_hidden
    )
    return out, write_kv(cache, k_new, v_new, token_mask)


def positions_from_mask(attention_mask: jax.Array) -> jax.Array:
    """RoPE positions that skip padding: the i-th real token of a row gets position i (pads get 0)."""
    m = attention_mask.astype(jnp.int32)
    return jnp.maximum(jnp.cumsum(m, axis=-1) - 1, 0) * m


def apply(config: ModelConfig, params: Params, input_ids: jax.Array, *, attention_mask: jax.Array | None = None):
    """HF-style full forward: logits [B, T, V] float32. Left/right padding gives each row the logits of
    its unpadded sequence (at the real tokens)."""
    if attention_mask is None:
        attention_mask = jnp.ones(input_ids.shape, bool)
    logits, _ = forward(config, params, input_ids, positions_from_mask(attention_mask), attention_mask)
    return logits


def output_embedding(config: ModelConfig, params: Params) -> jax.Array:
    """[D, V]: the lm_head kernel, or the tied input embedding transposed."""
    if config.tie_word_embeddings:
        return params["embed"]["embedding"].T
    return params["lm_head"]["kernel"]
