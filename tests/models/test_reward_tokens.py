"""Reward tokens: the resize (ids, grown shapes, untouched old rows, mean-initialised new rows, save/load) and the
per-rollout draw (shape, determinism, modes, the paper's Proposition 4.3 by Monte Carlo)."""

from __future__ import annotations

import dataclasses
import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tokenizers
import transformers

from rcgrpo_jax.models import (
    HIGH_REWARD_TOKEN,
    LOW_REWARD_TOKEN,
    ModelConfig,
    add_reward_tokens,
    init_params,
    load_hf,
    reward_tokens,
    save_hf,
)

WORDS = ["<unk>", "<|im_end|>"] + [f"w{i}" for i in range(22)]  # 24 tokens


def _tokenizer() -> transformers.PreTrainedTokenizerFast:
    model = tokenizers.models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>")
    tok = tokenizers.Tokenizer(model)
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<|im_end|>")


def _config(vocab_size: int, tied: bool) -> ModelConfig:
    return ModelConfig(
        model_type="qwen2",
        vocab_size=vocab_size,
        hidden_size=16,
        intermediate_size=24,
        num_layers=1,
        num_heads=2,
        num_kv_heads=1,
        head_dim=8,
        attention_bias=True,
        tie_word_embeddings=tied,
    )


def _rows(config, params):
    emb = np.asarray(params["embed"]["embedding"])
    head = None if config.tie_word_embeddings else np.asarray(params["lm_head"]["kernel"]).T
    return emb, head


@pytest.mark.parametrize("tied", [False, True])
def test_grows_when_vocab_is_full(tied):
    config = _config(len(WORDS), tied)
    params = init_params(config, jax.random.key(0))
    old_emb, old_head = _rows(config, params)
    new_config, new_params, tok, ids = add_reward_tokens(config, params, _tokenizer())
    assert ids == {HIGH_REWARD_TOKEN: 24, LOW_REWARD_TOKEN: 25}
    assert new_config.vocab_size == 26 == len(tok)
    assert dataclasses.replace(new_config, vocab_size=24) == config
    emb, head = _rows(new_config, new_params)
    assert emb.shape == (26, 16)
    np.testing.assert_array_equal(emb[:24], old_emb)
    np.testing.assert_allclose(emb[24:], np.broadcast_to(old_emb.mean(0), (2, 16)), rtol=1e-6, atol=1e-7)
    if tied:
        assert "lm_head" not in new_params
    else:
        assert head.shape == (26, 16)
        np.testing.assert_array_equal(head[:24], old_head)
        np.testing.assert_allclose(head[24:], np.broadcast_to(old_head.mean(0), (2, 16)), rtol=1e-6, atol=1e-7)
    # untouched: everything but the embedding / lm_head
    np.testing.assert_array_equal(
        new_params["layers"]["attn"]["q_proj"]["kernel"], params["layers"]["attn"]["q_proj"]["kernel"]
    )
    # they are special: not split, and dropped by skip_special_tokens
    enc = tok.encode(f"w3 {HIGH_REWARD_TOKEN} w4")
    assert enc == [5, 24, 6]
    assert HIGH_REWARD_TOKEN not in tok.decode(enc, skip_special_tokens=True)


def test_pads_grown_vocab_to_a_multiple():
    config = _config(len(WORDS), False)
    params = init_params(config, jax.random.key(1))
    old_emb, _ = _rows(config, params)
    new_config, new_params, _, ids = add_reward_tokens(config, params, _tokenizer(), pad_to_multiple_of=16)
    assert ids == {HIGH_REWARD_TOKEN: 24, LOW_REWARD_TOKEN: 25} and new_config.vocab_size == 32
    emb, head = _rows(new_config, new_params)
    assert emb.shape == head.shape == (32, 16)
    np.testing.assert_allclose(emb[24:], np.broadcast_to(old_emb.mean(0), (8, 16)), rtol=1e-6, atol=1e-7)


def test_reuses_padding_rows_when_ids_fit():
    """vocab_size 32 > 24 tokens (as in HF checkpoints): shapes stay, rows 24/25 become the mean of the
    24 real-token rows, the other padding rows are left alone."""
    config = _config(32, False)
    params = init_params(config, jax.random.key(2))
    old_emb, old_head = _rows(config, params)
    new_config, new_params, _, ids = add_reward_tokens(config, params, _tokenizer())
    assert new_config == config and ids == {HIGH_REWARD_TOKEN: 24, LOW_REWARD_TOKEN: 25}
    emb, head = _rows(new_config, new_params)
    assert emb.shape == head.shape == (32, 16)
    for new, old in ((emb, old_emb), (head, old_head)):
        np.testing.assert_array_equal(new[:24], old[:24])
        np.testing.assert_array_equal(new[26:], old[26:])
        np.testing.assert_allclose(new[24:26], np.broadcast_to(old[:24].mean(0), (2, 16)), rtol=1e-6, atol=1e-7)
        assert not np.allclose(old[24], old[:24].mean(0))  # the check above is not vacuous


def test_round_trip_and_idempotent(tmp_path):
    config = _config(len(WORDS), False)
    config, params, tok, ids = add_reward_tokens(config, init_params(config, jax.random.key(3)), _tokenizer())
    save_hf(config, params, tmp_path, tokenizer=tok)
    config2, params2 = load_hf(tmp_path)
    assert config2 == config
    for a, b in zip(jax.tree.leaves(params2), jax.tree.leaves(params)):
        np.testing.assert_array_equal(a, b)
    # (AutoTokenizer in transformers v5 would rebuild a Qwen2 BPE tokenizer from config.json's model_type.)
    tok2 = transformers.PreTrainedTokenizerFast.from_pretrained(tmp_path)
    assert {t: tok2.convert_tokens_to_ids(t) for t in ids} == ids
    assert tok2.encode(f"w0 {LOW_REWARD_TOKEN}") == [2, 25]
    assert transformers.AutoModelForCausalLM.from_pretrained(tmp_path).config.vocab_size == 26
    # Adding again (e.g. to a reloaded RCTP checkpoint) keeps the trained rows.
    trained = jax.tree.map(lambda x: x + 1.0, params2)
    config3, params3, tok3, ids3 = add_reward_tokens(config2, trained, tok2)
    assert config3 == config2 and ids3 == ids and len(tok3) == 26
    np.testing.assert_array_equal(params3["embed"]["embedding"], trained["embed"]["embedding"])


# ---------------------------------------------------------------- the per-rollout draw


class SampleTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_shape_dtype_determinism(self):
        for mode in reward_tokens.MODES:
            fn = self.variant(
                functools.partial(reward_tokens.sample, num_groups=6, group_size=5, p_high=0.5, mode=mode)
            )
            a = fn(jax.random.PRNGKey(3))
            chex.assert_shape(a, (6, 5))
            chex.assert_type(a, jnp.int32)
            np.testing.assert_array_equal(a, fn(jax.random.PRNGKey(3)))
            assert set(np.unique(a)) <= {reward_tokens.LOW, reward_tokens.HIGH}
            assert not np.array_equal(a, fn(jax.random.PRNGKey(4)))

    @chex.variants(with_jit=True, without_jit=True)
    def test_iid_frequency_and_extremes(self):
        fn = self.variant(functools.partial(reward_tokens.sample, num_groups=2000, group_size=5, mode="iid"))
        for p in (0.5, 0.2):
            share = float(np.mean(fn(jax.random.PRNGKey(0), p_high=p)))
            assert abs(share - p) < 4 * np.sqrt(p * (1 - p) / 10000), (p, share)
        assert np.all(fn(jax.random.PRNGKey(0), p_high=0.0) == 0)
        assert np.all(fn(jax.random.PRNGKey(0), p_high=1.0) == 1)

    @chex.variants(with_jit=True, without_jit=True)
    def test_stratified_has_both_tokens(self):
        for g in (2, 5):
            fn = self.variant(functools.partial(reward_tokens.sample, num_groups=500, group_size=g, mode="stratified"))
            for p in (0.0, 0.1, 0.5, 1.0):
                counts = np.asarray(fn(jax.random.PRNGKey(g), p_high=jnp.float32(p))).sum(axis=1)
                assert counts.min() >= 1 and counts.max() <= g - 1, (g, p)
        # with p = 1/2 the positions are balanced too
        a = reward_tokens.sample(jax.random.PRNGKey(9), 4000, 5, 0.5, "stratified")
        np.testing.assert_allclose(np.asarray(a).mean(axis=0), 0.5, atol=0.04)


def test_bad_mode():
    with pytest.raises(ValueError, match="iid, stratified"):
        reward_tokens.sample(jax.random.PRNGKey(0), 2, 2, 0.5, "random")


@pytest.mark.parametrize(
    "group_size,p,mu_h,mu_l", [(5, 0.5, 0.8, 0.2), (5, 0.3, 0.6, 0.5), (3, 0.5, 1.0, 0.0), (8, 0.7, 0.9, 0.05)]
)
def test_proposition_4_3_group_variance_bound(group_size, p, mu_h, mu_l):
    """With tokens ~ Bernoulli(p) and binary rewards of mean mu_h / mu_l given the token, the expected
    population variance of a group is >= (G-1)/G p(1-p)(mu_h - mu_l)^2 (RC-GRPO Prop. 4.3).
    By the law of total variance it equals (G-1)/G Var(R), with equality when mu_h, mu_l are 0/1."""
    n = 40000
    k_tok, k_rew = jax.random.split(jax.random.PRNGKey(42))
    tokens = reward_tokens.sample(k_tok, n, group_size, p, "iid")
    mu = jnp.where(tokens == reward_tokens.HIGH, mu_h, mu_l)
    rewards = jax.random.bernoulli(k_rew, mu).astype(jnp.float32)
    group_var = np.asarray(rewards.var(axis=1))
    mc, se = group_var.mean(), group_var.std() / np.sqrt(n)
    bound = (group_size - 1) / group_size * p * (1 - p) * (mu_h - mu_l) ** 2
    m = p * mu_h + (1 - p) * mu_l
    exact = (group_size - 1) / group_size * (p * mu_h + (1 - p) * mu_l - m**2)
    assert mc >= bound - 4 * se, (mc, bound)
    assert abs(mc - exact) < 4 * se, (mc, exact)
    assert exact >= bound - 1e-12


def test_token_of_maps_the_sampled_codes_to_their_tokens():
    assert reward_tokens.token_of(reward_tokens.HIGH) == reward_tokens.HIGH_REWARD_TOKEN == "<|high_reward|>"
    assert reward_tokens.token_of(reward_tokens.LOW) == reward_tokens.LOW_REWARD_TOKEN == "<|low_reward|>"
    codes = reward_tokens.sample(jax.random.key(0), 4, 5)
    assert {reward_tokens.token_of(c) for c in np.asarray(codes).ravel()} == set(reward_tokens.REWARD_TOKENS)
    with pytest.raises(ValueError, match="is 1 \\(high\\) or 0 \\(low\\)"):
        reward_tokens.token_of(2)


def test_a_tokenizer_knows_the_reward_tokens_only_with_both():
    """`reward_tokens.known_by`: the one test of a reward-conditioned tokenizer (the trainer's `auto`
    conditioning, the evaluation's `auto` goal, `model_prep.load`)."""
    tok = _tokenizer()
    assert not reward_tokens.known_by(tok)
    tok.add_special_tokens({"additional_special_tokens": [reward_tokens.HIGH_REWARD_TOKEN]})
    assert not reward_tokens.known_by(tok)  # the high token alone is not a reward-conditioned checkpoint's
    config = _config(len(WORDS), tied=True)
    _, _, both, _ = add_reward_tokens(config, init_params(config, jax.random.key(0)), _tokenizer())
    assert reward_tokens.known_by(both)
