"""`models.attention`: which kernel a model call uses, that the CPU path is `grouped_attention` unchanged,
that the arguments built for cuDNN's fused kernel mean the same attention (checked by giving them to the
library's XLA implementation: the cuDNN one cannot be lowered without a GPU), and that under the GPU presets'
mesh the cuDNN call gets q, k and v per shard, as the kernel's checks demand."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from rcgrpo_jax import models
from rcgrpo_jax.models import attention
from rcgrpo_jax.models.cache import attention_mask, init_cache, write_mask
from rcgrpo_jax.models.xla_attention import grouped_attention

pytestmark = pytest.mark.slow  # the fast lane skips it (pytest.ini)

B, T, N, G, DH = 3, 8, 4, 2, 8
SCALE = 1.0 / np.sqrt(DH)
LENGTHS = np.array([8, 5, 1])  # right-padded rows: full, partial, one token
# What "auto" picks for training on a GPU: the Pallas flash kernel where this JAX ships it (0.10, 0.11), cuDNN
# where it does not (0.12).
GPU_TRAINING = "cudnn" if attention.pallas_mha_unavailable() else "pallas"


def _qkv(s=T, dtype=jnp.float32, seed=0):
    rng = np.random.default_rng(seed)  # host arrays: no device program to compile for the inputs
    q, k, v = (rng.standard_normal(shape, np.float32) for shape in ((B, T, N, DH), (B, s, G, DH), (B, s, G, DH)))
    return tuple(jnp.asarray(x, dtype) for x in (q, k, v))


def _train_mask():
    """The no-cache mask `models.forward` builds for right-padded rows, and the real-token mask [B, T]."""
    valid = jnp.asarray(np.arange(T)[None] < LENGTHS[:, None])
    return attention_mask(valid, jnp.arange(T)), np.asarray(valid)


# ---------------------------------------------------------------------------------------------- selection


@pytest.mark.parametrize(
    "backend, value, dtype, head_dim, want",
    [
        ("cpu", "auto", "bfloat16", 128, "xla"),
        ("tpu", "auto", "bfloat16", 128, "xla"),
        ("gpu", "auto", "bfloat16", 128, GPU_TRAINING),
        ("gpu", "auto", "float16", 64, GPU_TRAINING),
        ("cuda", "auto", "bfloat16", 128, GPU_TRAINING),
        ("gpu", "auto", "float32", 128, "xla"),  # the fused kernels are picked for bf16/fp16 only
        ("gpu", "auto", "bfloat16", 256, "xla"),  # head_dim over 128
        ("gpu", "auto", "bfloat16", 100, "xla"),  # not a multiple of 8
        ("gpu", "auto", None, None, GPU_TRAINING),  # nothing known against it
        ("gpu", "xla", "bfloat16", 128, "xla"),
        ("cpu", "xla", "float32", 16, "xla"),
        ("gpu", "cudnn", "bfloat16", 128, "cudnn"),
    ],
)
def test_select_implementation(backend, value, dtype, head_dim, want):
    assert attention.select_implementation(backend, value, dtype=dtype, head_dim=head_dim) == want


@pytest.mark.parametrize(
    "backend, dtype, want", [("gpu", "bfloat16", "cudnn"), ("gpu", "float32", "xla"), ("cpu", None, "xla")]
)
def test_auto_over_a_cache_never_picks_pallas(backend, dtype, want):
    """A call over a cache (queries at an offset) is one the Pallas kernel refuses: auto takes cuDNN there."""
    assert attention.select_implementation(backend, "auto", dtype=dtype, head_dim=128, causal=False) == want
    assert attention.select_implementation(backend, "xla", dtype=dtype, causal=False) == "xla"


@pytest.mark.parametrize(
    "backend, dtype, head_dim, needle",
    [("cpu", "bfloat16", 128, "backend 'cpu'"), ("gpu", "float32", 128, "float32"), ("gpu", "bfloat16", 256, "256")],
)
def test_requested_cudnn_that_cannot_run_is_an_error_not_a_fallback(backend, dtype, head_dim, needle):
    with pytest.raises(ValueError, match="attention_impl: 'cudnn' cannot run here") as e:
        attention.select_implementation(backend, "cudnn", dtype=dtype, head_dim=head_dim)
    assert needle in str(e.value)


def test_unknown_value_is_rejected():
    with pytest.raises(ValueError, match="attention_impl: unknown value 'flash'"):
        attention.select_implementation("gpu", "flash")


def test_implementation_for_reads_the_model_config():
    base = models.ModelConfig("qwen2", 64, 32, 64, 1, 4, 2, 8, dtype="bfloat16")
    assert base.attention_impl == "auto"
    assert attention.implementation_for(base) == "xla"  # this machine's backend is the CPU
    assert attention.implementation_for(base, "gpu") == GPU_TRAINING
    assert attention.implementation_for(base, "gpu", causal=False) == "cudnn"
    assert attention.implementation_for(dataclasses.replace(base, dtype="float32"), "gpu") == "xla"
    assert attention.implementation_for(dataclasses.replace(base, attention_impl="xla"), "gpu") == "xla"


# ------------------------------------------------------------------------------------ the CPU path values


def test_xla_path_is_grouped_attention_bit_for_bit():
    q, k, v = _qkv()
    mask, _ = _train_mask()
    w = jnp.asarray(np.random.default_rng(1).standard_normal(q.shape, np.float32))

    def loss(fn):
        return jax.jit(jax.value_and_grad(lambda q, k, v: jnp.sum(fn(q, k, v) * w), (0, 1, 2)))

    ours = loss(lambda q, k, v: attention.attention(q, k, v, mask, SCALE, implementation="xla", causal=True))
    ref = loss(lambda q, k, v: grouped_attention(q, k, v, mask, SCALE))
    for a, b in zip(jax.tree.leaves(ours(q, k, v)), jax.tree.leaves(ref(q, k, v))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_model_forward_on_cpu_is_unchanged_by_the_setting():
    """`auto` resolves to the xla path here, so a tiny model's logits are the same as with `xla` (the path
    the parity tests against HF check)."""
    config = models.ModelConfig("qwen2", 97, 32, 64, 1, 4, 2, 8, attention_bias=True)
    params = models.init_params(config, jax.random.key(0))
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, 97, (B, T)), jnp.int32)
    token_mask = jnp.asarray(np.arange(T)[None] < LENGTHS[:, None])
    run = lambda cfg: jax.jit(lambda p: models.apply(cfg, p, tokens, attention_mask=token_mask))(params)
    auto, xla = run(config), run(dataclasses.replace(config, attention_impl="xla"))
    np.testing.assert_array_equal(np.asarray(auto), np.asarray(xla))


# ------------------------------------------------------------------------------- the cuDNN call's arguments


def test_causal_arguments_are_lengths_and_no_mask():
    q, k, v = _qkv()
    mask, _ = _train_mask()
    args = attention.cudnn_arguments(q, k, v, mask, SCALE, causal=True)
    assert set(args) == {"query", "key", "value", "scale", "is_causal", "query_seq_lengths", "key_value_seq_lengths"}
    assert args["is_causal"] is True and args["scale"] == pytest.approx(SCALE)
    # a full row: T; a row of L < T tokens: L + 1 (the last query's own slot), which only padding queries see
    np.testing.assert_array_equal(np.asarray(args["query_seq_lengths"]), [8, 6, 2])
    assert args["key_value_seq_lengths"] is args["query_seq_lengths"]
    assert args["query_seq_lengths"].dtype == jnp.int32


@pytest.mark.parametrize("dtype, rtol", [(jnp.float32, 1e-5), (jnp.bfloat16, 2e-2)])
def test_causal_arguments_mean_the_models_attention_at_real_tokens(dtype, rtol):
    """The library's XLA implementation, given the arguments built for cuDNN, equals grouped_attention at
    every real query: forward and gradients of a loss over real queries (what training reads)."""
    q, k, v = _qkv(dtype=dtype)
    mask, valid = _train_mask()
    w = np.random.default_rng(2).standard_normal(q.shape, np.float32) * valid[:, :, None, None]  # real queries

    def loss(fn):
        return jax.jit(jax.value_and_grad(lambda q, k, v: jnp.sum(fn(q, k, v).astype(jnp.float32) * w), (0, 1, 2)))

    def lib(q, k, v):
        args = attention.cudnn_arguments(q, k, v, mask, SCALE, causal=True)
        return jax.nn.dot_product_attention(**args, implementation="xla")

    ref_out = grouped_attention(q, k, v, mask, SCALE).astype(jnp.float32)
    got_out = lib(q, k, v).astype(jnp.float32)
    real = valid[:, :, None, None] & np.ones(q.shape, bool)
    scale = float(jnp.abs(ref_out).max())
    np.testing.assert_allclose(np.asarray(got_out)[real], np.asarray(ref_out)[real], atol=rtol * scale)
    for a, b in zip(
        jax.tree.leaves(loss(lib)(q, k, v)),
        jax.tree.leaves(loss(lambda *x: grouped_attention(*x, mask, SCALE))(q, k, v)),
    ):
        a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
        np.testing.assert_allclose(a, b, atol=rtol * max(float(np.abs(b).max()), 1e-6))


def test_cached_arguments_pass_the_mask_and_mean_the_same_attention():
    """Prefill: T queries at slots index.. of an S-slot cache whose rows hold holes (left padding of an
    earlier write); the mask goes to the kernel as it is."""
    s, index = 16, 5
    q, k, v = _qkv(s=s)
    cache = init_cache(models.ModelConfig("qwen2", 64, 32, 64, 1, N, G, DH), B, s)
    earlier = jnp.asarray(np.arange(index)[None] >= np.array([0, 2, 4])[:, None])  # left-padded first write
    cache = cache.replace(mask=cache.mask.at[:, :index].set(earlier), index=jnp.int32(index))
    token_mask = jnp.asarray(np.arange(T)[None] < LENGTHS[:, None])
    mask = attention_mask(write_mask(cache, token_mask), cache.index + jnp.arange(T))
    args = attention.cudnn_arguments(q, k, v, mask, SCALE, causal=False)
    assert set(args) == {"query", "key", "value", "scale", "mask"} and args["mask"] is mask
    got = jax.nn.dot_product_attention(**args, implementation="xla")
    ref = grouped_attention(q, k, v, mask, SCALE)
    np.testing.assert_allclose(np.asarray(got), np.asarray(ref), atol=1e-5 * float(jnp.abs(ref).max()))


def test_causal_arguments_need_as_many_queries_as_keys():
    q, k, v = _qkv(s=T + 4)
    with pytest.raises(ValueError, match="as many queries as keys"):
        attention.cudnn_arguments(q, k, v, jnp.ones((B, 1, T, T + 4), bool), SCALE, causal=True)


def test_cudnn_branch_calls_the_fused_kernel():
    """On this CPU the cudnn branch reaches cuDNN (which refuses: no GPU), so it really is taken; a single
    query stays on the xla path."""
    q, k, v = _qkv(dtype=jnp.bfloat16)
    mask, _ = _train_mask()
    with pytest.raises(RuntimeError, match="cuDNN"):
        jax.jit(lambda q, k, v: attention.attention(q, k, v, mask, SCALE, implementation="cudnn", causal=True))(q, k, v)
    one = q[:, :1], k, v, mask[:, :, :1]
    got = attention.attention(*one, SCALE, implementation="cudnn", causal=False)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(grouped_attention(*one, SCALE)))
    with pytest.raises(ValueError, match="'flash'"):
        attention.attention(q, k, v, mask, SCALE, implementation="flash")


# ------------------------------------------------------------- cuDNN under the GPU presets' mesh, per shard


def _cudnn_stand_in(monkeypatch) -> list[dict]:
    """Replaces `jax.nn.dot_product_attention` (cuDNN cannot run here) by a recorder of each cuDNN call that
    computes it with the library's XLA implementation, and returns the record. Each call is checked against
    what JAX's cuDNN path checks (jax/_src/cudnn/fused_attention_stablehlo.py: `check_layout`,
    `check_is_flash_attention`, and the partitioner's `_check_qkv_bias_mask_spec`, which is never reached
    when every mesh axis is Manual: custom_partitioning lowers such a call per device)."""
    calls: list[dict] = []
    library = jax.nn.dot_product_attention

    def record(query, key, value, *, implementation=None, **kw):
        assert implementation == "cudnn"
        q, k, v, n = (jax.typeof(x) for x in (query, key, value, kw["query_seq_lengths"]))
        assert all(t == jax.sharding.AxisType.Manual for t in q.sharding.mesh.axis_types)  # inside shard_map
        assert len(q.shape) == len(k.shape) == len(v.shape) == 4  # [B, T, N, Dh] (BTNH)
        assert q.dtype == k.dtype == v.dtype == jnp.bfloat16
        assert q.shape[0] == k.shape[0] == v.shape[0] and k.shape == v.shape  # batch; kv heads and length
        assert q.shape[3] == k.shape[3] and q.shape[3] % 8 == 0 and q.shape[3] <= attention.FUSED_MAX_HEAD_DIM
        assert n.dtype == jnp.int32 and n.shape == (q.shape[0],)  # one length per local row
        assert kw["key_value_seq_lengths"] is kw["query_seq_lengths"] and kw["is_causal"] is True
        calls.append({"q": q.shape, "k": k.shape, "v": v.shape})
        return library(query, key, value, implementation="xla", **kw)

    monkeypatch.setattr(jax.nn, "dot_product_attention", record)
    return calls


def test_cudnn_runs_per_shard_at_the_models_call_under_the_presets_mesh(monkeypatch):
    """The GPU presets' mesh (1 x 4 x 2: rows over fsdp, heads over tensor) and training rules: the attention
    layer's cuDNN call (what `attention_impl=cudnn` runs on a GPU) gets each shard's rows and heads with the
    whole sequence and head_dim, one layout for q, k and v, forward and backward, and the model's gradients
    equal the xla path's."""
    from configs import rc_grpo
    from rcgrpo_jax import sharding

    mesh = sharding.make_mesh(rc_grpo.get_config("qwen2_5_7b").mesh, jax.devices()[:8])
    assert dict(mesh.shape) == {"data": 1, "fsdp": 4, "tensor": 2}
    calls = _cudnn_stand_in(monkeypatch)
    on_gpu = attention.implementation_for
    monkeypatch.setattr(attention, "implementation_for", lambda c, causal=True: on_gpu(c, "gpu", causal=causal))
    rows, t = 8, 16
    config = models.ModelConfig("qwen2", 97, 64, 128, 1, 4, 2, 16, dtype="bfloat16", attention_impl="cudnn")
    params = models.init_params(config, jax.random.key(0))
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, 97, (rows, t)), jnp.int32)
    token_mask = jnp.asarray(np.arange(t)[None] < np.arange(rows)[:, None] + 9)  # right-padded, 9..16 tokens

    def grads(cfg):
        def loss(p):
            positions = jnp.maximum(jnp.cumsum(token_mask, axis=-1) - 1, 0).astype(jnp.int32)
            logits, _ = models.forward(cfg, p, tokens, positions, token_mask)
            return jnp.sum(jnp.where(token_mask[..., None], logits, 0.0) ** 2) / 1e3

        with jax.set_mesh(mesh), sharding.axis_rules(sharding.TRAIN_RULES.logical):
            placed = sharding.shard_params(params, mesh)
            return jax.jit(jax.grad(loss))(placed)

    got = grads(config)
    assert calls, "the cuDNN branch was not taken"
    assert set(map(tuple, (c["q"] for c in calls))) == {(rows // 4, t, 4 // 2, 16)}
    assert set(map(tuple, (c["k"] for c in calls))) == set(map(tuple, (c["v"] for c in calls))) == {(2, t, 1, 16)}
    want = grads(dataclasses.replace(config, attention_impl="xla"))
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
        np.testing.assert_allclose(a, b, atol=3e-2 * max(float(np.abs(b).max()), 1e-6))


def test_cudnn_takes_q_k_v_of_different_shardings(monkeypatch):
    """q, k and v arriving with three different shardings (the case JAX's cuDNN partitioner refuses) reach
    the kernel with one layout per shard, and the values are the model's attention at every real query."""
    from rcgrpo_jax import sharding

    calls = _cudnn_stand_in(monkeypatch)
    mesh = sharding.make_mesh({"data": 1, "fsdp": 4, "tensor": 2}, jax.devices()[:8])
    rng = np.random.default_rng(3)
    q, k, v = (jnp.asarray(rng.standard_normal((8, T, h, DH), np.float32), jnp.bfloat16) for h in (N, G, G))
    valid = jnp.asarray(np.arange(T)[None] < np.array([8, 5, 1, 8, 2, 7, 3, 6])[:, None])
    mask = attention_mask(valid, jnp.arange(T))
    fn = jax.jit(lambda q, k, v: attention.attention(q, k, v, mask, SCALE, implementation="cudnn", causal=True))
    with jax.set_mesh(mesh):
        specs = (P(("data", "fsdp"), None, "tensor"), P(None, None, "tensor"), P())
        got = fn(*(jax.device_put(x, NamedSharding(mesh, s)) for x, s in zip((q, k, v), specs)))
    assert [c["q"] for c in calls] == [(2, T, N // 2, DH)] and [c["v"] for c in calls] == [(2, T, G // 2, DH)]
    want = grouped_attention(q, k, v, mask, SCALE).astype(jnp.float32)
    real = np.asarray(valid)[:, :, None, None] & np.ones(q.shape, bool)
    scale = float(jnp.abs(want).max())
    np.testing.assert_allclose(np.asarray(got, np.float32)[real], np.asarray(want)[real], atol=2e-2 * scale)


def test_xla_path_exports_for_cuda():
    """The training forward and backward (xla path, bf16, remat) lower for CUDA from this CPU host: nothing
    CPU-only leaks into the GPU program."""
    config = models.ModelConfig("llama", 97, 32, 64, 2, 4, 2, 8, dtype="bfloat16", remat=True, attention_impl="xla")
    params = models.abstract_params(config)
    tokens = jax.ShapeDtypeStruct((2, 16), jnp.int32)
    token_mask = jax.ShapeDtypeStruct((2, 16), jnp.bool_)

    def loss(p, tokens, token_mask):
        positions = jnp.maximum(jnp.cumsum(token_mask, axis=-1) - 1, 0).astype(jnp.int32)
        logits, _ = models.forward(config, p, tokens, positions, token_mask)
        return jnp.mean(logits**2)

    exported = jax.export.export(jax.jit(jax.grad(loss)), platforms=["cuda"])(params, tokens, token_mask)
    assert exported.platforms == ("cuda",)
    text = exported.mlir_module()
    assert "stablehlo" in text and "cudnn" not in text.lower()


def test_pallas_on_a_jax_without_the_kernel_is_refused(monkeypatch):
    """jax 0.12 removed the Pallas flash kernel: 'pallas' names why and the alternatives; 'auto' takes cuDNN."""
    why = "jax 0.12.1 has no jax.experimental.pallas.ops.gpu.attention (removed in jax 0.12)"
    monkeypatch.setattr(attention, "pallas_mha_unavailable", lambda: why)
    with pytest.raises(ValueError, match="'pallas' cannot run here: jax 0.12.1 has no.*'auto', 'xla' or 'tokamax'"):
        attention.select_implementation("gpu", "pallas", dtype="bfloat16", head_dim=128)
    assert attention.select_implementation("gpu", "auto", dtype="bfloat16", head_dim=128) == "cudnn"
