"""KV cache: prefill + decode (token by token and in chunks) reproduces the full forward, with padding
on either side and holes in the middle of the context."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rcgrpo_jax.models import (
    Llama3RopeScaling,
    ModelConfig,
    apply,
    forward,
    init_cache,
    init_params,
    output_embedding,
)
from rcgrpo_jax.sharding import path_str
from tests.helpers.numerics import assert_trees_close

pytestmark = pytest.mark.slow  # the fast lane skips it (pytest.ini)

TOL = 1e-4
CONFIG = ModelConfig(
    model_type="llama",
    vocab_size=64,
    hidden_size=32,
    intermediate_size=48,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
    rope_theta=500000.0,
    rope_scaling=Llama3RopeScaling(8.0, 1.0, 4.0, 16),
)
MAX_LEN = 16

_forward = jax.jit(forward, static_argnums=0, static_argnames="return_hidden")
_apply = jax.jit(apply, static_argnums=0)


@pytest.fixture(scope="module")
def params():
    """Random params with O(1) activations, so logits differ clearly between positions."""
    base = init_params(CONFIG, jax.random.key(0))
    keys = iter(jax.random.split(jax.random.key(1), len(jax.tree.leaves(base))))

    def perturb(path, x):
        noise = jax.random.normal(next(keys), x.shape, x.dtype)
        return 1.0 + 0.1 * noise if "norm" in path_str(path) else 0.3 * noise

    return jax.tree_util.tree_map_with_path(perturb, base)


@pytest.fixture(scope="module")
def seqs():
    return np.random.default_rng(0).integers(0, CONFIG.vocab_size, size=(2, 10)).astype(np.int32)


@pytest.fixture(scope="module")
def full(params, seqs):
    return np.asarray(_apply(CONFIG, params, jnp.asarray(seqs)))


def _step(params, cache, tokens, positions, mask):
    return _forward(CONFIG, params, jnp.asarray(tokens), jnp.asarray(positions), jnp.asarray(mask), cache)


@pytest.mark.parametrize("chunk", [1, 3])
def test_prefill_then_decode_matches_full_forward(params, seqs, full, chunk):
    cache = init_cache(CONFIG, 2, MAX_LEN)
    pos = np.broadcast_to(np.arange(10), (2, 10))
    logits, cache = _step(params, cache, seqs[:, :4], pos[:, :4], np.ones((2, 4), bool))
    np.testing.assert_allclose(np.asarray(logits), full[:, :4], atol=TOL, rtol=0)
    for t in range(4, 10, chunk):
        logits, cache = _step(params, cache, seqs[:, t : t + chunk], pos[:, t : t + chunk], np.ones((2, chunk), bool))
        np.testing.assert_allclose(np.asarray(logits), full[:, t : t + chunk], atol=TOL, rtol=0)
    assert int(cache.index) == 10
    np.testing.assert_array_equal(np.asarray(cache.mask), np.arange(MAX_LEN)[None].repeat(2, 0) < 10)


@pytest.mark.parametrize("side", ["left", "right"])
def test_padded_prompts_and_holes_match_unpadded_rows(params, seqs, full, side):
    """Row 0: a 4-token prompt; row 1: a 2-token prompt padded to the 4-slot bucket. Then 6 decode steps,
    in which row 1 skips step 2 (a masked slot, e.g. a finished row or a hole between turns)."""
    prompt_len = (4, 2)
    bucket = np.zeros((2, 4), np.int32)
    mask = np.zeros((2, 4), bool)
    for b, n in enumerate(prompt_len):
        cols = slice(4 - n, 4) if side == "left" else slice(0, n)
        bucket[b, cols], mask[b, cols] = seqs[b, :n], True
    positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0)
    cache = init_cache(CONFIG, 2, MAX_LEN)
    logits, cache = _step(params, cache, bucket, positions, mask)
    np.testing.assert_array_equal(np.asarray(cache.mask)[:, :4], mask)
    got = [[np.asarray(logits)[b, mask[b]]] for b in range(2)]

    count = np.array(prompt_len)  # real tokens seen per row = next position
    for step in range(6):
        live = np.array([True, step != 2])
        tok = seqs[np.arange(2), np.minimum(count, 9)][:, None]
        logits, cache = _step(params, cache, tok, count[:, None], live[:, None])
        for b in range(2):
            if live[b]:
                got[b].append(np.asarray(logits)[b])
        count = count + live
    assert int(cache.index) == 10
    assert bool(cache.mask[1, 4 + 2]) is False  # the skipped step's slot is invalid

    for b in range(2):  # causal: the unpadded row's logits are a prefix of the full forward
        np.testing.assert_allclose(np.concatenate(got[b]), full[b, : count[b]], atol=TOL, rtol=0)


def test_hidden_times_output_embedding_is_logits(params, seqs, full):
    pos = np.broadcast_to(np.arange(10), (2, 10))
    hidden, cache = _forward(
        CONFIG, params, jnp.asarray(seqs), jnp.asarray(pos), jnp.ones((2, 10), bool), return_hidden=True
    )
    assert cache is None and hidden.shape == (2, 10, CONFIG.hidden_size)
    logits = np.asarray(hidden) @ np.asarray(output_embedding(CONFIG, params))
    np.testing.assert_allclose(logits, full, atol=TOL, rtol=0)


def test_init_cache_shapes():
    cache = init_cache(CONFIG, 3, 7, dtype=jnp.bfloat16)
    assert cache.k.shape == cache.v.shape == (2, 3, 7, 2, 8)
    assert cache.k.dtype == jnp.bfloat16 and cache.mask.shape == (3, 7) and not cache.mask.any()
    assert cache.index.dtype == jnp.int32 and cache.index.shape == () and cache.max_len == 7


def test_remat_gives_the_same_loss_and_grads(params, seqs):
    import dataclasses

    def loss(config, p):
        return jnp.mean(jax.nn.log_softmax(apply(config, p, jnp.asarray(seqs)))[..., 0])

    grad = jax.jit(jax.value_and_grad(loss, argnums=1), static_argnums=0)
    (v0, g0), (v1, g1) = grad(CONFIG, params), grad(dataclasses.replace(CONFIG, remat=True), params)
    np.testing.assert_allclose(v1, v0, rtol=1e-6)
    # float32 rounding of the recomputed forward: a tolerance relative to each gradient's own scale (a fixed
    # atol of 1e-6 failed a clean-clone CI run on 1 element of 2048, off by 1.08e-6)
    assert_trees_close(g1, g0, rtol=1e-5, scaled_atol=1e-5)
    assert float(jnp.abs(g0["layers"]["attn"]["q_proj"]["kernel"]).max()) > 0
    remat_config = dataclasses.replace(CONFIG, remat=True)
    traced = [
        str(jax.make_jaxpr(jax.grad(loss, argnums=1), static_argnums=0)(c, params)) for c in (CONFIG, remat_config)
    ]
    assert "remat" not in traced[0] and "remat" in traced[1]  # remat is really applied
