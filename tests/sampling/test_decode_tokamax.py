"""`decode_attention=tokamax` (`sampling.tokamax_decode`): tokamax's attention with per-row key lengths over the
ragged cache layout. On this CPU it runs tokamax's XLA reference and must equal the dense XLA decode; traced for
CUDA it is tokamax's Triton kernel where tokamax has the `pl.dot` fix (>= 0.0.13), an error naming it elsewhere."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks import cuda_lower
from rcgrpo_jax import models, sharding
from rcgrpo_jax.models.attention import lowering_for
from rcgrpo_jax.sampling import SamplingParams, decode_step, generate, tokamax_decode
from rcgrpo_jax.sampling.decode_loop import Sampler, new_cache, right_pad, stop_table
from rcgrpo_jax.sampling.decode_step import select_decode_attention
from tests.helpers.tiny_sizes import TINY_QWEN2

CONFIG = TINY_QWEN2  # 4 query heads over 2 kv heads, head_dim 8
PROMPTS = [[3, 9, 27], [5] * 11, [7, 1, 4, 1, 5, 9, 2], list(range(1, 21))]


def _close(x, y, rel):
    """Equal up to `rel` of the largest magnitude of the values compared."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    np.testing.assert_allclose(x, y, rtol=0, atol=rel * max(np.abs(y).max(), 1e-30))


def _dense(q, k, v, lengths):
    """float64 softmax(q k^T / sqrt(Dh)) v of row b over its first lengths[b] slots: q [B, G, R, Dh]."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    out = np.zeros(q.shape)
    for b, n in enumerate(lengths):
        s = np.einsum("grd,gsd->grs", q[b], k[b, :, :n]) / np.sqrt(q.shape[-1])
        w = np.exp(s - s.max(-1, keepdims=True))
        out[b] = np.einsum("grs,gsd->grd", w / w.sum(-1, keepdims=True), v[b, :, :n])
    return out


@pytest.mark.parametrize("dtype, rel", [(jnp.float32, 1e-5), (jnp.bfloat16, 2e-2)])
def test_attend_reads_each_rows_own_slots(dtype, rel):
    """Slots past a row's length hold huge keys and values: they take no part in its output."""
    rng = np.random.default_rng(0)
    b, g, r, s, dh = 3, 2, 4, 96, 16
    q = rng.standard_normal((b, g, r, dh))
    k, v = rng.standard_normal((2, b, g, s, dh))
    lengths = np.array([1, 37, 96], np.int32)
    for i, n in enumerate(lengths):
        k[i, :, n:], v[i, :, n:] = 1e3, 1e3
    cast = [jnp.asarray(a, dtype) for a in (q, k, v)]
    got = tokamax_decode.attend(*cast, jnp.asarray(lengths))
    assert got.shape == (b, g, r, dh) and got.dtype == dtype
    want = _dense(*(np.asarray(a, np.float32) for a in cast), lengths)
    _close(got, want, rel)


def test_selection(monkeypatch):
    assert tokamax_decode.unavailable(gpu=False) is None  # tokamax is in the test extra: its reference runs here
    assert select_decode_attention("cpu", "tokamax", head_dim=8) == "tokamax"  # forced off a GPU: the reference
    assert select_decode_attention("cpu") == "xla"
    # a JAX without the Pallas decode kernel (0.12): auto on a GPU takes tokamax where it can run there
    monkeypatch.setattr(decode_step, "ragged_kernel_unavailable", lambda: "jax 0.12.1 has no decode_attention")
    fused = "xla" if tokamax_decode.unavailable(gpu=True) else "tokamax"
    assert select_decode_attention("gpu") == select_decode_attention("cuda", head_dim=128) == fused
    # a tokamax without the pl.dot fix: auto decodes densely on a GPU, and tokamax is refused there with why
    monkeypatch.setattr(tokamax_decode.importlib.metadata, "version", lambda name: "0.0.12")
    why = tokamax_decode.unavailable(gpu=True)
    assert why.startswith("tokamax 0.0.12's Triton attention calls pl.dot") and ">= 0.0.13" in why
    assert tokamax_decode.unavailable(gpu=False) is None
    assert select_decode_attention("gpu", head_dim=128) == "xla"
    with pytest.raises(ValueError, match="decode_attention: 'tokamax' cannot run: tokamax 0.0.12's Triton"):
        select_decode_attention("gpu", "tokamax", head_dim=128)
    monkeypatch.setattr(tokamax_decode.importlib.util, "find_spec", lambda name: None)
    assert "not installed" in tokamax_decode.unavailable(gpu=False)


def test_lowering_for_cuda_is_tokamaxs_triton_kernel():
    """Traced for CUDA from this CPU (the lowering proof's context): the Triton custom call where tokamax has
    the pl.dot fix; where it has not, an error naming the release it needs, never a silent reference."""
    sds = jax.ShapeDtypeStruct
    b, g, r, s, dh = 4, 2, 7, 256, 128  # Qwen2.5-7B's group of 7 query heads per kv head
    args = (sds((b, g, r, dh), jnp.bfloat16), *(sds((b, g, s, dh), jnp.bfloat16),) * 2, sds((b,), jnp.int32))
    with lowering_for("cuda"):
        assert tokamax_decode.implementation() == tokamax_decode.TRITON
        if why := tokamax_decode.unavailable(gpu=True):
            with pytest.raises(ValueError, match="cannot be traced for a GPU: tokamax .* calls pl.dot"):
                jax.jit(tokamax_decode.attend).trace(*args)
            assert "0.0.13" in why
            return
        exp = cuda_lower.export_for_cuda(jax.jit(tokamax_decode.attend), args)
    assert cuda_lower.custom_calls(exp.mlir_module()) == [cuda_lower.TRITON_CALL]
    assert exp.out_avals[0].shape == (b, g, r, dh)
    assert tokamax_decode.implementation() == tokamax_decode.REFERENCE  # back on the CPU


@pytest.mark.slow
def test_decode_call_equals_xla():
    """One sampled decode call on each path (span 96): rows of different lengths and budgets (one idle): the
    same tokens, and log-probs, next-token logits and cache equal up to float32 rounding."""
    params = models.init_params(CONFIG, jax.random.key(0))
    tokens, counts = right_pad(PROMPTS, 20)
    budgets = jnp.asarray([8, 3, 0, 5])
    outs = {}
    for layout in ("xla", "tokamax"):
        sampler = Sampler(CONFIG, 8, SamplingParams(temperature=1.0))
        cache = new_cache(CONFIG, 4, 96, layout=layout)
        logits, cache = sampler.prefill(params, jnp.asarray(tokens), jnp.asarray(counts), cache)
        out = sampler.decode(params, logits, cache, jnp.asarray(stop_table((), 4)), budgets, jax.random.key(2))
        outs[layout] = jax.device_get(out)
    a, b = outs["tokamax"], outs["xla"]
    assert a.cache.layout == "tokamax" and a.cache.k[0].shape == (4, 2, 96, 8)
    np.testing.assert_array_equal(a.tokens, b.tokens)
    _close(a.logprobs, b.logprobs, 1e-5)
    _close(a.logits, b.logits, 1e-5)
    assert a.cache.lengths.tolist() == b.cache.lengths.tolist() == [3 + 8, 11 + 3, 7, 20 + 5]
    for i, n in enumerate(b.cache.lengths):
        for j in range(CONFIG.num_layers):
            _close(a.cache.keys(j)[i, :, :n], b.cache.keys(j)[i, :, :n], 1e-5)
            _close(a.cache.v[j][i, :, :n], b.cache.v[j][i, :, :n], 1e-5)


@pytest.mark.slow
def test_on_a_mesh_equals_single_device_xla():
    """Rows over data x fsdp and kv heads over tensor: tokamax's call runs per shard (shard_map)."""
    params = models.init_params(CONFIG, jax.random.key(0))
    mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
    placed = sharding.shard_params(params, mesh, sharding.DECODE_RULES)
    on_mesh = generate(CONFIG, placed, PROMPTS, max_new_tokens=12, mesh=mesh, decode_attention="tokamax")
    single = generate(CONFIG, params, PROMPTS, max_new_tokens=12, decode_attention="xla")
    assert on_mesh.tokens == single.tokens
    for a, b in zip(on_mesh.logprobs, single.logprobs):  # tensor-parallel sums: rounding over 12 steps
        _close(a, b, 1e-4)
