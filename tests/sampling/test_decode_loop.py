"""The jitted sampler against HF transformers (PyTorch CPU) on tiny random Qwen2 and LLaMA checkpoints."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers

from rcgrpo_jax import models, sharding
from rcgrpo_jax.sampling import SamplingParams, buckets, decode_step, generate
from rcgrpo_jax.sampling.decode_loop import Sampler, new_cache, right_pad, stop_table
from rcgrpo_jax.sampling.next_token import filtered_logits
from rcgrpo_jax.sampling.session import DecodeSession
from rcgrpo_jax.sampling.session_ops import CapacityError
from tests.helpers.hf_sampling import NEW, PROMPT_LENS, SIZES, hf_greedy, hf_logprobs

pytestmark = pytest.mark.slow  # the fast lane skips it (pytest.ini)


def _hf_model(arch: str, path: str):
    common = dict(SIZES)
    if arch == "qwen2":
        cfg = transformers.Qwen2Config(**common)
        cls = transformers.Qwen2ForCausalLM
    else:
        cfg = transformers.LlamaConfig(
            **common,
            rope_parameters={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
                "rope_theta": 500000.0,
            },
        )
        cls = transformers.LlamaForCausalLM
    torch.manual_seed(0)
    model = cls(cfg).eval()
    model.save_pretrained(path)
    return model


@pytest.fixture(scope="module", params=["qwen2", "llama"])
def checkpoint(request, tmp_path_factory):
    path = str(tmp_path_factory.mktemp(request.param))
    hf = _hf_model(request.param, path)
    config, params = models.load_hf(path, dtype="float32")
    rng = np.random.default_rng(1)
    prompts = [rng.integers(1, 96, n).tolist() for n in PROMPT_LENS]
    return hf, config, params, prompts


def test_greedy_matches_hf_generate_and_full_forward_logprobs(checkpoint):
    hf, config, params, prompts = checkpoint
    want = hf_greedy(hf, prompts, NEW)
    res = generate(config, params, prompts, max_new_tokens=NEW)
    assert res.tokens == want
    assert res.lengths == [NEW] * len(prompts) and not any(res.stopped)
    for p, toks, lps in zip(prompts, res.tokens, res.logprobs):
        full = hf_logprobs(hf, p + toks)
        ref = full[np.arange(len(p) - 1, len(p) + NEW - 1), toks]
        np.testing.assert_allclose(lps, ref, atol=2e-4)


def test_stop_tokens_per_row_and_chunked_prefill(checkpoint):
    hf, config, params, prompts = checkpoint
    full = generate(config, params, prompts, max_new_tokens=NEW).tokens
    stops = [(row[4],) for row in full]  # each row stops at the first occurrence of its 5th token
    res = generate(config, params, prompts, max_new_tokens=NEW, stop_token_ids=stops, prefill_chunk=16)
    for row, stop, got, stopped in zip(full, stops, res.tokens, res.stopped):
        cut = row.index(stop[0]) + 1
        assert got == row[:cut] and stopped


def test_a_wide_prefill_block_attends_in_query_blocks(checkpoint):
    """Prompts of 150 and 9 tokens in one 192-wide block: its queries attend in QUERY_BLOCK pieces (the
    last one padded); the greedy tokens equal HF's and the log-probs a full forward."""
    from rcgrpo_jax.sampling import decode_step

    hf, config, params, _ = checkpoint
    rng = np.random.default_rng(5)
    prompts = [rng.integers(1, 96, n).tolist() for n in (150, 9)]
    assert buckets.length_bucket(150) == 192 and 192 % decode_step.QUERY_BLOCK > 0
    res = generate(config, params, prompts, max_new_tokens=6, prefill_chunk=256)
    assert res.tokens == hf_greedy(hf, prompts, 6)
    for p, toks, lps in zip(prompts, res.tokens, res.logprobs):
        full = hf_logprobs(hf, p + toks)
        np.testing.assert_allclose(lps, full[np.arange(len(p) - 1, len(p) + 5), toks], atol=2e-4)


def test_sampled_logprobs_are_of_the_filtered_distribution(checkpoint):
    _, config, params, prompts = checkpoint
    sp = SamplingParams(temperature=1.3, top_k=20, top_p=0.9)
    res = generate(
        config,
        params,
        prompts,
        max_new_tokens=NEW,
        temperature=sp.temperature,
        top_k=sp.top_k,
        top_p=sp.top_p,
        rng=jax.random.key(7),
    )
    again = generate(
        config,
        params,
        prompts,
        max_new_tokens=NEW,
        temperature=sp.temperature,
        top_k=sp.top_k,
        top_p=sp.top_p,
        rng=jax.random.key(7),
    )
    assert res.tokens == again.tokens  # same key, same draw
    for p, toks, lps in zip(prompts, res.tokens, res.logprobs):
        logits = models.apply(config, params, jnp.asarray([p + toks]))[0, len(p) - 1 : -1]
        vals, ids = filtered_logits(logits, sp)
        logp = np.asarray(jax.nn.log_softmax(vals, -1))
        ids = np.asarray(ids)
        for t, tok in enumerate(toks):
            (j,) = np.nonzero(ids[t] == tok)[0]
            np.testing.assert_allclose(lps[t], logp[t, j], atol=2e-4)


def test_session_append_continues_like_a_fresh_prompt(checkpoint):
    """Decode, append deltas of different lengths to the live cache, decode again; the span grows
    with the longest row (from a 16-slot start) and every row writes at its own length."""
    _, config, params, prompts = checkpoint
    sess = DecodeSession(
        config,
        params,
        len(prompts),
        capacity=72,
        sampling=SamplingParams(),
        max_new_tokens=8,
        prefill_chunk=16,
        min_span=16,
    )
    assert sess.span == 16
    sess.append(prompts)
    assert sess.span == 32 and sess.lengths.tolist() == list(PROMPT_LENS)  # the longest prompt is 20
    first = sess.decode([5, 8, 3, 6], ())
    deltas = [[5, 6, 7], [9], list(range(10, 30)), [40, 41]]
    sess.append(deltas)
    second = sess.decode([8] * 4, ())
    sess.append([[1, 2]] * 4)
    third = sess.decode([4] * 4, ())
    assert sess.stats["resizes"] == 2 and sess.span == 48  # 7 + 3 + 20 + 8 + 2 + 4 = 44 slots in row 2
    for i, p in enumerate(prompts):
        ctx = p + first[i][0] + deltas[i]
        assert second[i][0] == generate(config, params, [ctx], max_new_tokens=8).tokens[0]
        ctx = ctx + second[i][0] + [1, 2]
        ref = generate(config, params, [ctx], max_new_tokens=4)
        assert third[i][0] == ref.tokens[0]
        np.testing.assert_allclose(third[i][1], ref.logprobs[0], atol=2e-4)
        assert sess.lengths[i] == len(ctx) + 4
    with pytest.raises(CapacityError):
        sess.append([list(range(1, 31))] * 4)  # row 2 would hold 74 > 72 slots


@pytest.mark.parametrize("checkpoint", ["qwen2"], indirect=True)  # nothing here depends on the family
def test_session_truncate_and_select_shrink_the_span(checkpoint):
    """Rows leave (select) and contexts are cut (truncate): the span shrinks to the longest row plus a
    decode budget, and what is decoded next equals a fresh prompt of the kept context."""
    _, config, params, prompts = checkpoint
    sess = DecodeSession(
        config, params, 4, capacity=96, sampling=SamplingParams(), max_new_tokens=8, prefill_chunk=16, min_span=16
    )
    long = [prompts[i] + list(range(1, 41)) for i in range(4)]  # 43..60 tokens
    sess.append(long)
    assert sess.span == 64
    sess.select([0, 2, 0])  # rows of 43, 47, 43 tokens
    assert sess.rows == 3 and sess.lengths.tolist() == [43, 47, 43]
    sess.truncate([5, 30, 43])
    assert sess.lengths.tolist() == [5, 30, 43] and sess.span == 64  # 43 + 8 still needs 64
    sess.truncate([5, 30, 10])
    assert sess.span == 48  # 30 + 8 = 38 slots: bucket 48
    sess.append([[7, 8], [9], [11, 12, 13]])
    out = sess.decode([6, 6, 6], ())
    for ctx, (toks, lps, _) in zip([long[0][:5] + [7, 8], long[2][:30] + [9], long[0][:10] + [11, 12, 13]], out):
        ref = generate(config, params, [ctx], max_new_tokens=6)
        assert toks == ref.tokens[0]
        np.testing.assert_allclose(lps, ref.logprobs[0], atol=2e-4)


def test_generate_on_a_mesh_matches_single_device(checkpoint):
    _, config, params, prompts = checkpoint
    mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
    placed = sharding.shard_params(params, mesh, sharding.DECODE_RULES)
    res = generate(config, placed, prompts, max_new_tokens=NEW, mesh=mesh)
    assert res.tokens == generate(config, params, prompts, max_new_tokens=NEW).tokens


@pytest.mark.parametrize("checkpoint", ["qwen2"], indirect=True)  # nothing here depends on the family
def test_decode_weights_cast_once_split_per_layer_and_placed(checkpoint):
    """decode_weights: every leaf in the decode dtype, the layers as one pytree each (the stacked [L]
    axis gone from the values and the shardings), on the decode shardings; float32 decode weights
    generate exactly what the stacked params do."""
    from rcgrpo_jax.sampling import decode_weights

    _, config, params, prompts = checkpoint
    mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
    stacked_sh = sharding.param_shardings(
        jax.eval_shape(lambda: params), mesh, sharding.DECODE_RULES.params, sharding.DECODE_RULES.logical
    )
    train = sharding.shard_params(params, mesh, sharding.TRAIN_RULES)
    w = decode_weights(train, jnp.bfloat16, stacked_sh)
    assert len(w["layers"]) == config.num_layers and isinstance(w["layers"], tuple)
    assert {x.dtype for x in jax.tree.leaves(w)} == {jnp.dtype(jnp.bfloat16)}
    q = w["layers"][1]["attn"]["q_proj"]["kernel"]
    np.testing.assert_array_equal(
        np.asarray(q), np.asarray(params["layers"]["attn"]["q_proj"]["kernel"][1].astype(jnp.bfloat16))
    )
    assert (
        tuple(q.sharding.spec) == tuple(stacked_sh["layers"]["attn"]["q_proj"]["kernel"].spec)[1:] == (None, "tensor")
    )
    assert w["embed"]["embedding"].sharding.spec == stacked_sh["embed"]["embedding"].spec
    f32 = decode_weights(params, jnp.float32)
    assert (
        generate(config, f32, prompts, max_new_tokens=NEW).tokens
        == generate(config, params, prompts, max_new_tokens=NEW).tokens
    )


def test_decode_over_a_shorter_span_matches_a_longer_one(checkpoint):
    """Prefill and decode work on the cache's whole span: 48 and 96 slots give the same tokens,
    log-probs, lengths and valid slots (prompts appended at each row's own length, 0)."""
    _, config, params, prompts = checkpoint
    sampler = Sampler(config, 8, SamplingParams(temperature=1.0, top_k=20))
    tokens, counts = right_pad(prompts, 32)
    outs = []
    for span in (48, 96):
        cache = new_cache(config, len(prompts), span)
        logits, cache = sampler.prefill(params, jnp.asarray(tokens), jnp.asarray(counts), cache)
        assert np.asarray(cache.lengths).tolist() == list(PROMPT_LENS)
        out = sampler.decode(
            params,
            logits,
            cache,
            jnp.asarray(stop_table((), len(prompts))),
            jnp.full((len(prompts),), 8),
            jax.random.key(3),
        )
        outs.append(jax.device_get(out))
    short, full = outs
    np.testing.assert_array_equal(short.tokens, full.tokens)
    np.testing.assert_allclose(short.logprobs, full.logprobs, atol=1e-5)
    assert short.cache.lengths.tolist() == full.cache.lengths.tolist() == [n + 8 for n in PROMPT_LENS]
    for i, n in enumerate(short.cache.lengths):  # valid slots agree (attention over 48 vs 96: summation order)
        pairs = [(short.cache.keys(j)[i, :, :n], full.cache.keys(j)[i, :, :n]) for j in range(2)]
        pairs += [(short.cache.v[j][i, :, :n], full.cache.v[j][i, :, :n]) for j in range(2)]
        for x, y in pairs:
            np.testing.assert_allclose(x, y, atol=1e-5 * np.abs(y).max())


@pytest.mark.parametrize("checkpoint", ["qwen2"], indirect=True)  # nothing here depends on the family
def test_scatter_and_select_writes_decode_alike(checkpoint):
    """The decode step's two key/value writes (scatter: a GPU's; select: a CPU's) give the same tokens,
    log-probs and valid cache slots, rows of different lengths and budgets (one row idle)."""
    _, config, params, prompts = checkpoint
    tokens, counts = right_pad(prompts, 32)
    outs = []
    for write in ("scatter", "select"):
        sampler = Sampler(config, 8, SamplingParams(temperature=1.0), kv_write=write)
        logits, cache = sampler.prefill(params, jnp.asarray(tokens), jnp.asarray(counts), new_cache(config, 4, 48))
        budgets = jnp.asarray([8, 3, 0, 5])
        outs.append(
            jax.device_get(
                sampler.decode(params, logits, cache, jnp.asarray(stop_table((), 4)), budgets, jax.random.key(2))
            )
        )
    a, b = outs
    np.testing.assert_array_equal(a.tokens, b.tokens)
    # the two programs fuse differently: float32 rounding apart, at the scale of the values compared
    np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5 * np.abs(b.logprobs).max())
    assert a.cache.lengths.tolist() == b.cache.lengths.tolist() == [3 + 8, 11 + 3, 7, 20 + 5]
    for i, n in enumerate(a.cache.lengths):
        for x, y in (
            (a.cache.keys(1)[i, :, :n], b.cache.keys(1)[i, :, :n]),
            (a.cache.v[1][i, :, :n], b.cache.v[1][i, :, :n]),
        ):
            np.testing.assert_allclose(x, y, atol=1e-5 * np.abs(y).max())
    with pytest.raises(ValueError, match="kv_write"):
        decode_step.kv_write_for("gather")
    # auto: XLA's CPU scatter is in place for 32-bit caches, a float32 round trip for 16-bit ones (select)
    assert decode_step.kv_write_for("auto", "cpu", jnp.float32) == "scatter"
    assert decode_step.kv_write_for("auto", "cpu", jnp.bfloat16) == decode_step.kv_write_for("auto", "cpu") == "select"
    assert decode_step.kv_write_for("auto", "gpu", jnp.bfloat16) == "scatter"
    assert decode_step.kv_write_for("select", "gpu", jnp.float32) == "select"


def test_qwen3_greedy_matches_hf_generate(tmp_path):
    """Qwen3's per-head q/k RMSNorm in the decode step (head_dim 16, apart from hidden / heads = 8, GQA,
    biases on q, k, v and o, norm weights away from 1): greedy tokens equal HF transformers' generate and
    the sampler's log-probs a full forward."""
    cfg = transformers.Qwen3Config(**SIZES, head_dim=16, attention_bias=True)
    torch.manual_seed(0)
    hf = transformers.Qwen3ForCausalLM(cfg).eval()
    with torch.no_grad():
        for layer in hf.model.layers:
            for norm in (layer.self_attn.q_norm, layer.self_attn.k_norm):
                norm.weight.add_(0.3 * torch.randn_like(norm.weight))
    hf.save_pretrained(str(tmp_path))
    config, params = models.load_hf(str(tmp_path), dtype="float32")
    assert config.qk_norm
    rng = np.random.default_rng(1)
    prompts = [rng.integers(1, 96, n).tolist() for n in PROMPT_LENS]
    res = generate(config, params, prompts, max_new_tokens=NEW)
    assert res.tokens == hf_greedy(hf, prompts, NEW)
    for p, toks, lps in zip(prompts, res.tokens, res.logprobs):
        full = hf_logprobs(hf, p + toks)
        np.testing.assert_allclose(lps, full[np.arange(len(p) - 1, len(p) + NEW - 1), toks], atol=2e-4)
