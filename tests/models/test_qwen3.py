"""Qwen3 specifics. Logit parity with HF's Qwen3ForCausalLM (tied and untied, head_dim != hidden/heads,
GQA, left/right padding) and the save_hf round trip run in test_parity.py / test_hf_io.py over the
`qwen3_*` entries of conftest.ARCHS. Here: the published architectures (the presets' config.json
fields) against the model cards' parameter counts, Qwen3's `attention_bias` (q, k, v and o) through
config.json, and KV-cache prefill + decode of right-padded prompts against HF's full forward."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rcgrpo_jax.config_lib import common
from rcgrpo_jax.models import ModelConfig, abstract_params, forward, init_cache, load_hf, positions_from_mask
from tests.helpers.hf_models import VOCAB, hf_logits

TOL = 1e-4

# Model cards (huggingface.co/Qwen/...): "Number of Parameters" and "(Non-Embedding)", in billions, with
# the precision they are published at. The cards count both embedding matrices (input and untied output).
CARDS = {
    "qwen3_1_7b": (1.7, 1.4, 0.05),
    "qwen3_4b": (4.0, 3.6, 0.05),
    "qwen3_8b": (8.2, 6.95, 0.05),
}


@pytest.mark.parametrize("preset", sorted(CARDS))
def test_published_architectures_have_the_model_cards_sizes(preset):
    config = ModelConfig.from_hf(common.hf_architecture(preset))
    assert config.model_type == "qwen3" and config.qk_norm and not config.attention_bias and not config.o_proj_bias
    assert config.head_dim == 128 and config.num_kv_heads == 8
    assert config.tie_word_embeddings == (preset != "qwen3_8b")
    shapes = abstract_params(config)
    assert shapes["layers"]["attn"]["q_norm"]["scale"].shape == (config.num_layers, 128)
    assert "bias" not in shapes["layers"]["attn"]["q_proj"] and "bias" not in shapes["layers"]["attn"]["o_proj"]
    total = sum(math.prod(x.shape) for x in jax.tree.leaves(shapes))
    embedding = sum(
        math.prod(shapes[k][n].shape) for k, n in (("embed", "embedding"), ("lm_head", "kernel")) if k in shapes
    )
    card_total, card_non_embedding, precision = CARDS[preset]
    assert abs(total / 1e9 - card_total) < precision
    assert abs((total - embedding) / 1e9 - card_non_embedding) < (0.005 if preset == "qwen3_8b" else precision)


def test_attention_bias_covers_all_four_projections_and_round_trips():
    hf = {**common.hf_architecture("qwen3_8b"), "attention_bias": True}
    config = ModelConfig.from_hf(hf)
    assert config.attention_bias and config.o_proj_bias
    attn = abstract_params(config)["layers"]["attn"]
    assert all("bias" in attn[n] for n in ("q_proj", "k_proj", "v_proj", "o_proj"))
    assert attn["o_proj"]["bias"].shape == (config.num_layers, config.hidden_size)
    out = config.to_hf()
    assert out["architectures"] == ["Qwen3ForCausalLM"] and out["attention_bias"] is True
    assert ModelConfig.from_hf(out) == config
    plain = ModelConfig.from_hf(common.hf_architecture("qwen3_8b"))
    assert ModelConfig.from_hf(plain.to_hf()) == plain and plain.to_hf()["attention_bias"] is False


def test_qwen2_keeps_its_bias_layout():
    qwen2 = ModelConfig.from_hf(common.hf_architecture("qwen2_5_7b"))
    assert qwen2.attention_bias and not qwen2.o_proj_bias and not qwen2.qk_norm
    attn = abstract_params(qwen2)["layers"]["attn"]
    assert "bias" in attn["q_proj"] and "bias" not in attn["o_proj"] and "q_norm" not in attn


def test_sliding_window_qwen3_is_rejected():
    with pytest.raises(ValueError, match="use_sliding_window"):
        ModelConfig.from_hf({**common.hf_architecture("qwen3_1_7b"), "use_sliding_window": True})


_forward = jax.jit(forward, static_argnums=0)


@pytest.mark.parametrize("arch", ["qwen3_tied", "qwen3_untied"])
def test_cache_decode_of_right_padded_prompts_matches_hf_full_forward(arch, hf_checkpoint):
    """Prompts of 5 and 3 tokens right-padded into a 5-slot bucket, then 5 decode steps of one token each:
    every row's logits equal HF's forward over that row's unpadded tokens."""
    path, model = hf_checkpoint(arch)
    config, params = load_hf(path)
    seqs = np.random.default_rng(5).integers(0, VOCAB, size=(2, 10)).astype(np.int32)
    prompt_len = np.array([5, 3])
    bucket = np.zeros((2, 5), np.int32)
    mask = np.arange(5)[None] < prompt_len[:, None]
    bucket[mask] = seqs[:, :5][mask]
    cache = init_cache(config, 2, 16)
    logits, cache = _forward(
        config, params, jnp.asarray(bucket), positions_from_mask(jnp.asarray(mask)), jnp.asarray(mask), cache
    )
    got = [[np.asarray(logits)[b, mask[b]]] for b in range(2)]
    count = prompt_len.copy()
    for _ in range(5):
        tok = seqs[np.arange(2), count][:, None]
        logits, cache = _forward(
            config, params, jnp.asarray(tok), jnp.asarray(count[:, None]), jnp.ones((2, 1), bool), cache
        )
        for b in range(2):
            got[b].append(np.asarray(logits)[b])
        count = count + 1
    assert int(cache.index) == 10 and not bool(cache.mask[1, 3]) and not bool(cache.mask[1, 4])
    for b in range(2):
        ref = hf_logits(model, seqs[b : b + 1, : count[b]])[0]
        assert np.abs(ref).max() > 1.0
        np.testing.assert_allclose(np.concatenate(got[b]), ref, atol=TOL * np.abs(ref).max(), rtol=0)
