"""`attention_impl="pallas"`: JAX's Pallas Triton flash attention. On this CPU it runs in Pallas interpret
mode, where it must equal the XLA path (`grouped_attention`) at every real query, forward and gradients
(through the kernel's own custom VJP); traced `lowering_for("cuda")` it becomes a Triton custom call that
exports for CUDA."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks import cuda_lower
from rcgrpo_jax import config_checks, config_fields, models
from rcgrpo_jax.models import attention
from rcgrpo_jax.models.cache import attention_mask
from rcgrpo_jax.models.xla_attention import grouped_attention

# The fast lane skips it (pytest.ini); a JAX without the kernel (0.12 removed it) has nothing to test here.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(attention.pallas_mha_unavailable()), reason=str(attention.pallas_mha_unavailable())),
]

B, T, N, G, DH = 3, 24, 6, 2, 16  # GQA (3 query heads per kv head); T = 24 is padded to a 32 block
SCALE = 1.0 / np.sqrt(DH)


def _valid() -> np.ndarray:
    """Real tokens [B, T]: a right-padded row, a left-padded row with a hole, and a full row."""
    valid = np.ones((B, T), bool)
    valid[0, 17:] = False
    valid[1, :5] = False
    valid[1, 11] = False
    return valid


def _inputs(dtype=jnp.float32):
    rng = np.random.default_rng(0)
    shapes = ((B, T, N, DH), (B, T, G, DH), (B, T, G, DH), (B, T, N, DH))
    q, k, v, w = (jnp.asarray(rng.standard_normal(s, np.float32), dtype) for s in shapes)
    valid = _valid()
    w = w * jnp.asarray(valid, dtype)[:, :, None, None]  # the loss reads real queries only, as training does
    return q, k, v, w, attention_mask(jnp.asarray(valid), jnp.arange(T)), valid


def _close(got, want, rtol):
    """Equal up to rtol of the compared tensor's magnitude."""
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    scale = float(np.max(np.abs(want)))
    assert scale > 0
    np.testing.assert_allclose(got, want, rtol=0, atol=rtol * scale)


@pytest.mark.parametrize("dtype, rtol", [(jnp.float32, 1e-5), (jnp.bfloat16, 3e-2)])
def test_pallas_equals_xla_forward_and_gradients(dtype, rtol):
    q, k, v, w, mask, valid = _inputs(dtype)

    def run(fn):
        def loss(q, k, v):
            out = fn(q, k, v)
            return jnp.sum(out.astype(jnp.float32) * w.astype(jnp.float32)), out

        return jax.jit(jax.value_and_grad(loss, (0, 1, 2), has_aux=True))(q, k, v)

    (loss_p, out_p), grads_p = run(
        lambda q, k, v: attention.attention(q, k, v, mask, SCALE, implementation="pallas", causal=True)
    )
    (loss_x, out_x), grads_x = run(lambda q, k, v: grouped_attention(q, k, v, mask, SCALE))
    real = valid[:, :, None, None]
    _close(np.where(real, out_p.astype(jnp.float32), 0), np.where(real, out_x.astype(jnp.float32), 0), rtol)
    np.testing.assert_allclose(float(loss_p), float(loss_x), rtol=rtol * 10, atol=rtol * float(jnp.abs(loss_x)))
    for name, gp, gx in zip("qkv", grads_p, grads_x):
        assert gp.shape == gx.shape and gp.dtype == gx.dtype, name
        _close(gp, gx, rtol * 3)


def test_model_forward_matches_xla_at_real_tokens():
    """A tiny Qwen3-style model (q/k norms, GQA) gives the same logits at every real token on either path."""
    config = models.ModelConfig("qwen3", 61, 32, 64, 2, 4, 2, 16)
    params = models.init_params(config, jax.random.key(0))
    rng = np.random.default_rng(1)
    tokens = jnp.asarray(rng.integers(0, 61, (2, 20)), jnp.int32)
    token_mask = np.ones((2, 20), bool)
    token_mask[0, 13:] = False

    def logits(cfg):
        positions = jnp.maximum(jnp.cumsum(token_mask, axis=-1) - 1, 0).astype(jnp.int32)
        fn = jax.jit(lambda p: models.forward(cfg, p, tokens, positions, jnp.asarray(token_mask))[0])
        return np.asarray(fn(params))

    got = logits(dataclasses.replace(config, attention_impl="pallas"))
    want = logits(dataclasses.replace(config, attention_impl="xla"))
    _close(got[token_mask], want[token_mask], 1e-5)


def test_selection_and_config_check():
    assert attention.select_implementation("cpu", "pallas") == "pallas"  # interpret mode off a GPU
    assert attention.select_implementation("gpu", "pallas", dtype="bfloat16", head_dim=96) == "pallas"
    assert attention.select_implementation("cpu", "auto", dtype="bfloat16", head_dim=128) == "xla"  # CPU unchanged
    # auto's training kernel on a GPU (the one the lowering proof lowers), not for a call over a cache
    assert attention.select_implementation("gpu", "auto", dtype="bfloat16", head_dim=128) == "pallas"
    assert attention.select_implementation("gpu", "auto", dtype="bfloat16", head_dim=128, causal=False) == "cudnn"
    assert "pallas" in attention.IMPLEMENTATIONS
    from configs import sft

    config = sft.get_config("tiny")
    config.model.attention_impl = "pallas"
    config_checks.check(config, 1)  # accepted
    config.model.attention_impl = "flash"
    with pytest.raises(config_fields.ConfigError, match="model.attention_impl.*auto, xla, cudnn, pallas"):
        config_checks.check(config, 1)


def test_cache_call_is_refused():
    """The kernel's causal mask counts queries and keys from slot 0: a forward over a cache cannot use it."""
    q, k, v, _, mask, _ = _inputs()
    with pytest.raises(ValueError, match="no-cache causal attention.*'xla'"):
        attention.attention(q, k, v, mask, SCALE, implementation="pallas", causal=False)
    with pytest.raises(ValueError, match="24 queries over 32 keys"):
        attention.pallas_attention(q, jnp.pad(k, ((0, 0), (0, 8), (0, 0), (0, 0))), v, mask, SCALE)


def test_lowering_for_cuda_exports_the_triton_kernel():
    """Off a GPU the kernel interprets; traced for CUDA it is one Triton call forward and backward."""
    assert attention.pallas_interpret()
    with attention.lowering_for("cuda"):
        assert not attention.pallas_interpret()
    assert attention.pallas_interpret()
    q, k, v, w, mask, _ = _inputs(jnp.bfloat16)

    def grads(q, k, v):
        fn = lambda q, k, v: jnp.sum(attention.pallas_attention(q, k, v, mask, SCALE).astype(jnp.float32) * w)
        return jax.grad(fn, (0, 1, 2))(q, k, v)

    check = jax.export.DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton")
    with attention.lowering_for("cuda"), cuda_lower.on_target():  # jax 0.11 asks which GPU: an abstract H200
        exported = jax.export.export(jax.jit(grads), platforms=["cuda"], disabled_checks=[check])(q, k, v)
    text = exported.mlir_module()
    assert text.count("__gpu$xla.gpu.triton") >= 2  # the forward kernel and the backward's
    assert "mha_forward" in text and "mha_backward" in text
