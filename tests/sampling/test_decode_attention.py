"""The decode attention selection (xla | ragged) and the ragged path (JAX's Pallas GPU decode kernel over a
cache in its layout; Pallas interpret mode on this CPU) against the XLA path and HF transformers."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers

from rcgrpo_jax import models, sharding
from rcgrpo_jax.sampling import SamplingParams, decode_step, generate
from rcgrpo_jax.sampling.decode_loop import Sampler, new_cache, right_pad, stop_table
from rcgrpo_jax.sampling.decode_step import cache_layout, init_cache, ragged_blocks, select_decode_attention
from rcgrpo_jax.sampling.session import DecodeSession
from tests.helpers.hf_sampling import NEW, PROMPT_LENS, hf_greedy, hf_logprobs
from tests.helpers.hf_sampling import SIZES as SAMPLER_SIZES

pytestmark = pytest.mark.slow  # the fast lane skips it (pytest.ini)

# test_sampler's tiny Qwen2 at hidden 64: head_dim 64 / 4 = 16, a shape the GPU kernel takes (a power of two >= 16)
SIZES = {**SAMPLER_SIZES, "hidden_size": 64}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("qwen2_hd16"))
    torch.manual_seed(0)
    hf = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**SIZES)).eval()
    hf.save_pretrained(path)
    config, params = models.load_hf(path, dtype="float32")
    assert config.head_dim == 16
    rng = np.random.default_rng(1)
    return hf, config, params, [rng.integers(1, 96, n).tolist() for n in PROMPT_LENS]


def _close(x, y, rel=1e-5):
    """Equal up to float32 rounding at the scale of the values compared."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    np.testing.assert_allclose(x, y, rtol=0, atol=rel * max(np.abs(y).max(), 1e-30))


def test_selection():
    assert select_decode_attention("cpu") == "xla"  # the CPU keeps the dense path
    assert select_decode_attention("gpu") == select_decode_attention("cuda", head_dim=128) == "ragged"
    assert select_decode_attention("gpu", head_dim=48) == "xla"  # Qwen3-tiny's head_dim: not a power of two
    assert select_decode_attention("gpu", "xla", head_dim=128) == "xla"
    assert select_decode_attention("cpu", "ragged", head_dim=16) == "ragged"  # forced: interpret mode
    with pytest.raises(ValueError, match="head_dim 48"):
        select_decode_attention("gpu", "ragged", head_dim=48)
    with pytest.raises(ValueError, match="head_dim 8"):
        select_decode_attention("cpu", "ragged", head_dim=8)
    with pytest.raises(ValueError, match="decode_attention"):
        select_decode_attention("gpu", "pallas")
    # (block_k, k_splits): the session's spans (multiples of 128 from 256) all take 128-slot blocks
    assert ragged_blocks(256) == (128, 2) and ragged_blocks(384) == (128, 3) and ragged_blocks(8192) == (128, 16)
    assert ragged_blocks(16896) == (128, 12)  # the production capacity: 132 blocks in 12 splits
    assert ragged_blocks(96) == (32, 3) and ragged_blocks(48) == (16, 3) and ragged_blocks(40) is None


def test_selection_on_a_jax_without_the_kernel(monkeypatch):
    """jax 0.12 removed the Pallas decode kernel: without a tokamax that can take over (test_decode_tokamax),
    auto decodes densely there, and ragged is refused with why."""
    from rcgrpo_jax.sampling import decode_step, tokamax_decode

    assert decode_step.ragged_kernel_unavailable() is None  # this JAX (0.10, 0.11) ships it
    why = "jax 0.12.1 has no jax.experimental.pallas.ops.gpu.decode_attention (removed in jax 0.12)"
    monkeypatch.setattr(decode_step, "ragged_kernel_unavailable", lambda: why)
    monkeypatch.setattr(tokamax_decode, "unavailable", lambda gpu=True: "tokamax is not installed")
    assert select_decode_attention("gpu") == select_decode_attention("gpu", head_dim=128) == "xla"
    with pytest.raises(ValueError, match="decode_attention: 'ragged' cannot run: jax 0.12.1 has no"):
        select_decode_attention("gpu", "ragged", head_dim=128)


def test_cache_layouts(model):
    _, config, _, _ = model
    assert cache_layout(config) == ("ragged" if jax.default_backend() == "gpu" else "xla")
    xla, ragged = init_cache(config, 3, 48), init_cache(config, 3, 48, layout="ragged")
    assert xla.k[0].shape == (3, 2, 16, 48) and ragged.k[0].shape == ragged.v[0].shape == (3, 2, 48, 16)
    assert xla.span == ragged.span == 48 and (xla.k_slot_axis, ragged.k_slot_axis) == (3, 2)
    assert xla.keys(1).shape == ragged.keys(1).shape == (3, 2, 48, 16)
    with pytest.raises(ValueError, match="layout"):
        init_cache(config, 3, 48, layout="bshd")


def test_ragged_greedy_equals_xla_and_hf(model):
    hf, config, params, prompts = model
    xla = generate(config, params, prompts, max_new_tokens=NEW, decode_attention="xla")
    ragged = generate(config, params, prompts, max_new_tokens=NEW, decode_attention="ragged")
    assert ragged.tokens == xla.tokens == hf_greedy(hf, prompts, NEW)
    for p, toks, a, b in zip(prompts, ragged.tokens, ragged.logprobs, xla.logprobs):
        _close(a, b)
        full = hf_logprobs(hf, p + toks)
        np.testing.assert_allclose(a, full[np.arange(len(p) - 1, len(p) + NEW - 1), toks], atol=2e-4)


def test_ragged_decode_call_equals_xla(model):
    """One sampled decode call on each layout (span 96: kernel blocks of 32 in 3 splits): rows of different
    lengths and budgets (one idle): the same tokens, log-probs, next-token logits, lengths and valid slots."""
    _, config, params, prompts = model
    span = 96
    tokens, counts = right_pad(prompts, 20)
    budgets = jnp.asarray([8, 3, 0, 5])
    outs = {}
    for layout in ("xla", "ragged"):
        sampler = Sampler(config, 8, SamplingParams(temperature=1.0))
        cache = new_cache(config, 4, span, layout=layout)
        logits, cache = sampler.prefill(params, jnp.asarray(tokens), jnp.asarray(counts), cache)
        out = sampler.decode(params, logits, cache, jnp.asarray(stop_table((), 4)), budgets, jax.random.key(2))
        outs[layout] = jax.device_get(out)
    a, b = outs["ragged"], outs["xla"]
    assert a.cache.layout == "ragged" and b.cache.layout == "xla"
    np.testing.assert_array_equal(a.tokens, b.tokens)
    _close(a.logprobs, b.logprobs)
    _close(a.logits, b.logits)
    assert a.cache.lengths.tolist() == b.cache.lengths.tolist() == [3 + 8, 11 + 3, 7, 20 + 5]
    for i, n in enumerate(b.cache.lengths):
        for j in range(config.num_layers):
            _close(a.cache.keys(j)[i, :, :n], b.cache.keys(j)[i, :, :n])
            _close(a.cache.v[j][i, :, :n], b.cache.v[j][i, :, :n])


def test_ragged_session_multi_turn_equals_xla(model):
    """A session appending and decoding over two turns, its span growing from 40 slots (no kernel block
    fits: the XLA attention reads the ragged layout) to 64 (the kernel; the ragged layout's K resized on its
    own slot axis): the same tokens and log-probs as the XLA session."""
    _, config, params, prompts = model
    results = {}
    for mode in ("xla", "ragged"):
        s = DecodeSession(
            config,
            params,
            4,
            160,
            sampling=SamplingParams(temperature=1.0),
            max_new_tokens=16,
            prefill_chunk=32,
            rng=jax.random.key(7),
            span=40,
            min_span=32,
            decode_attention=mode,
        )
        assert s.layout == mode and s.cache.layout == mode
        s.append(prompts)
        assert s.span == 40 and ragged_blocks(40) is None
        got = [s.decode([10, 16, 4, 12], ())]
        s.append([[5] * 30, [6] * 3, [], [7] * 17])
        got.append(s.decode([16, 2, 16, 9], ()))
        assert s.stats["resizes"] >= 1 and s.span == 64 and ragged_blocks(64) == (64, 1)
        results[mode] = got
    for turn_a, turn_b in zip(results["ragged"], results["xla"]):
        for (ta, la, sa), (tb, lb, sb) in zip(turn_a, turn_b):
            assert ta == tb and sa == sb
            if len(lb):
                _close(la, lb)


def test_ragged_on_a_mesh_equals_single_device_xla(model):
    """Rows over data x fsdp and kv heads over tensor: the kernel runs per shard (shard_map)."""
    _, config, params, prompts = model
    mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
    placed = sharding.shard_params(params, mesh, sharding.DECODE_RULES)
    on_mesh = generate(config, placed, prompts, max_new_tokens=NEW, mesh=mesh, decode_attention="ragged")
    single = generate(config, params, prompts, max_new_tokens=NEW, decode_attention="xla")
    assert on_mesh.tokens == single.tokens
    for a, b in zip(on_mesh.logprobs, single.logprobs):  # tensor-parallel sums: rounding over 12 steps
        _close(a, b, rel=1e-4)


def test_kernel_block_skipping_reads_only_each_rows_slots():
    """The contract the planner counts on: a row's key blocks past roundup(kv_seq_len, block_k) take no part
    (on a GPU the kernel skips them: no loads). Poisoned with NaN, they leave every row's output finite
    and equal to attention over its own slots alone; a row of length 0 (a decode row that is done) gives 0."""
    rng = np.random.default_rng(0)
    b, g, r, s, dh = 3, 2, 2, 384, 16
    q = jnp.asarray(rng.standard_normal((b, g * r, dh)), jnp.float32)
    k = rng.standard_normal((b, g, s, dh)).astype(np.float32)
    v = rng.standard_normal((b, g, s, dh)).astype(np.float32)
    lens = np.array([1, 130, 0], np.int32)
    for i, n in enumerate(lens):  # whole blocks of 128 past each row's length: NaN
        k[i, :, -(-n // 128) * 128 :] = np.nan
        v[i, :, -(-n // 128) * 128 :] = np.nan
    out = np.asarray(decode_step._ragged_attention(q, jnp.asarray(k), jnp.asarray(v), jnp.asarray(lens), (128, 3)))
    assert np.isfinite(out).all()
    np.testing.assert_array_equal(out[2], 0.0)
    for i, n in enumerate(lens[:2]):
        qi = np.asarray(q[i]).reshape(g, r, dh)
        scores = np.einsum("grd,gsd->grs", qi, k[i, :, :n]) / np.sqrt(dh)
        w = np.exp(scores - scores.max(-1, keepdims=True))
        want = np.einsum("grs,gsd->grd", w / w.sum(-1, keepdims=True), v[i, :, :n]).reshape(g * r, dh)
        _close(out[i], want)
