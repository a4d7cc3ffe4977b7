"""Selection rules and the log-probs they report, on hand-computed distributions."""

import math

import chex
import hypothesis.extra.numpy as hnp
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import parameterized
from hypothesis import given, settings
from hypothesis import strategies as st

from rcgrpo_jax.sampling import buckets
from rcgrpo_jax.sampling.next_token import SamplingParams, filtered_logits, sample

LOG4 = np.log(np.array([[0.1, 0.2, 0.3, 0.4]], np.float32))


class SampleTest(parameterized.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_greedy_token_and_logprob(self):
        logits = jnp.array([[1.0, 2.0, 3.0], [5.0, 0.0, 0.0]])
        tok, lp = self.variant(lambda l: sample(l, jax.random.key(0), SamplingParams()))(logits)
        np.testing.assert_array_equal(tok, [2, 0])
        lse0 = 3.0 + math.log(1 + math.exp(-1) + math.exp(-2))
        lse1 = 5.0 + math.log(1 + 2 * math.exp(-5))
        np.testing.assert_allclose(lp, [3.0 - lse0, 5.0 - lse1], rtol=1e-6)

    @chex.variants(with_jit=True, without_jit=True)
    def test_top_k_renormalises(self):
        fn = self.variant(lambda l, k: sample(l, k, SamplingParams(1.0, top_k=2)))
        for seed in range(8):
            tok, lp = fn(jnp.asarray(LOG4), jax.random.key(seed))
            assert int(tok[0]) in (2, 3)
            want = {2: math.log(3 / 7), 3: math.log(4 / 7)}[int(tok[0])]
            np.testing.assert_allclose(lp[0], want, rtol=1e-5)

    @chex.variants(with_jit=True, without_jit=True)
    def test_top_p_keeps_smallest_prefix(self):
        # sorted probs 0.4, 0.3, 0.2, 0.1: mass before each 0, 0.4, 0.7, 0.9 -> keep {3, 2} at p=0.5
        vals, ids = self.variant(lambda l: filtered_logits(l, SamplingParams(1.0, top_p=0.5)))(jnp.asarray(LOG4))
        np.testing.assert_array_equal(ids[0], [3, 2, 1, 0])
        np.testing.assert_allclose(jax.nn.softmax(vals[0]), [4 / 7, 3 / 7, 0, 0], atol=1e-6)

    def test_tiny_top_p_and_top_k_one_are_greedy(self):
        logits = jax.random.normal(jax.random.key(1), (16, 50)) * 3
        for params in (SamplingParams(0.7, top_k=1), SamplingParams(1.3, top_p=1e-6)):
            tok, lp = sample(logits, jax.random.key(2), params)
            np.testing.assert_array_equal(tok, jnp.argmax(logits, -1))
            np.testing.assert_allclose(lp, 0.0, atol=1e-6)

    def test_temperature_frequencies_match_softmax(self):
        logits = jnp.asarray(LOG4) * 2.0  # at T=2 this is back to probs 0.1..0.4
        keys = jax.random.split(jax.random.key(3), 20000)
        tok, lp = jax.vmap(lambda k: sample(logits, k, SamplingParams(2.0)))(keys)
        freq = np.bincount(np.asarray(tok[:, 0]), minlength=4) / len(keys)
        np.testing.assert_allclose(freq, [0.1, 0.2, 0.3, 0.4], atol=0.015)
        np.testing.assert_allclose(np.exp(lp[:, 0]), np.array([0.1, 0.2, 0.3, 0.4])[np.asarray(tok[:, 0])], rtol=1e-5)


@settings(max_examples=25, deadline=None)
@given(
    logits=hnp.arrays(np.float32, (3, 12), elements=st.floats(-8, 8, width=32)),
    top_k=st.sampled_from([None, 1, 3, 12]),
    top_p=st.sampled_from([None, 0.3, 0.9, 1.0]),
    seed=st.integers(0, 2**16),
)
def test_sampled_token_is_a_kept_candidate(logits, top_k, top_p, seed):
    params = SamplingParams(0.8, top_k=top_k, top_p=top_p)
    vals, ids = filtered_logits(jnp.asarray(logits), params)
    tok, lp = sample(jnp.asarray(logits), jax.random.key(seed), params)
    probs = np.asarray(jax.nn.softmax(vals, -1))
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-5)
    for row in range(3):
        kept = {int(i): p for i, p, v in zip(ids[row], probs[row], vals[row]) if np.isfinite(v)}
        assert int(tok[row]) in kept
        np.testing.assert_allclose(np.exp(lp[row]), kept[int(tok[row])], rtol=1e-4)


def test_buckets():
    assert [buckets.length_bucket(n) for n in (1, 16, 17, 33, 48, 49, 100, 129, 200)] == [
        16,
        16,
        32,
        48,
        48,
        64,
        128,
        192,
        256,
    ]
    # rows: multiples of 8 (and of the batch sharding), not powers of two: 160 episodes stay 160 rows
    assert [buckets.batch_bucket(n) for n in (0, 1, 3, 8, 9, 129, 160)] == [8, 8, 8, 8, 16, 136, 160]
    assert buckets.batch_bucket(160, multiple=4) == 160
    assert buckets.batch_bucket(3, multiple=16) == 16 and buckets.batch_bucket(17, multiple=12) == 24
    # spans: a length bucket of what the rows need, at least MIN_SPAN, at most the capacity
    assert [buckets.span_bucket(n, 20_000) for n in (0, 256, 257, 5000, 12289)] == [256, 256, 384, 6144, 16384]
    assert buckets.span_bucket(16_500, 16_896) == 16_896 and buckets.span_bucket(10, 64) == 64
    with pytest.raises(ValueError, match="capacity"):
        buckets.span_bucket(65, 64)
