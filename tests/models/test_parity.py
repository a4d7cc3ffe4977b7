"""Logit parity with HF transformers (torch CPU, fp32) on tiny random Qwen2, Qwen3 and LLaMA 3.1 models."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rcgrpo_jax.models import apply, load_hf
from tests.helpers.hf_models import ARCHS, VOCAB, hf_logits

pytestmark = pytest.mark.slow  # the fast lane skips it (pytest.ini)

TOL = 1e-4
T = 12
LENGTHS = (12, 7)  # two rows of a [2, 12] bucket; the second is padded

_apply = jax.jit(apply, static_argnums=0)


@functools.cache
def _rows():
    rng = np.random.default_rng(0)
    return [rng.integers(0, VOCAB, size=n) for n in LENGTHS]


@pytest.fixture(scope="module", params=sorted(ARCHS))
def case(request, hf_checkpoint):
    path, model = hf_checkpoint(request.param)
    config, params = load_hf(path)
    refs = [hf_logits(model, row[None])[0] for row in _rows()]  # each row alone, unpadded
    return request.param, config, params, model, refs


def test_config_matches_hf(case):
    arch, config, _, model, _ = case
    hf = model.config
    assert config.num_kv_heads == hf.num_key_value_heads
    assert config.tie_word_embeddings == hf.tie_word_embeddings
    assert config.head_dim == ARCHS[arch][1].get("head_dim", 64 // hf.num_attention_heads)
    assert config.model_type == hf.model_type and config.qk_norm == (hf.model_type == "qwen3")
    assert config.o_proj_bias == bool(hf.model_type == "qwen3" and hf.attention_bias)
    assert (config.rope_scaling is not None) == (arch == "llama3")


def test_unpadded_logits_match_hf(case):
    _, config, params, model, _ = case
    ids = np.random.default_rng(1).integers(0, VOCAB, size=(2, T))
    ours = np.asarray(_apply(config, params, jnp.asarray(ids)))
    ref = hf_logits(model, ids)
    assert ours.dtype == np.float32 and ours.shape == (2, T, VOCAB)
    assert np.abs(ref).max() > 1.0  # the reference is not trivially flat
    np.testing.assert_allclose(ours, ref, atol=TOL, rtol=0)


@pytest.mark.parametrize("side", ["left", "right"])
def test_padded_batch_matches_unpadded_hf(case, side):
    _, config, params, _, refs = case
    ids = np.zeros((2, T), np.int32)
    mask = np.zeros((2, T), bool)
    spans = []
    for b, row in enumerate(_rows()):
        start = T - len(row) if side == "left" else 0
        ids[b, start : start + len(row)] = row
        mask[b, start : start + len(row)] = True
        spans.append(slice(start, start + len(row)))
    ours = np.asarray(_apply(config, params, jnp.asarray(ids), attention_mask=jnp.asarray(mask)))
    for b, span in enumerate(spans):
        np.testing.assert_allclose(ours[b, span], refs[b], atol=TOL, rtol=0)
    assert np.isfinite(ours).all()  # padding rows stay finite too
