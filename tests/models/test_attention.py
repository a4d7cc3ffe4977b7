"""`xla_attention.grouped_attention` (our GQA attention with its own backward) against jax.nn.dot_product_attention,
the library function it replaced, and against values worked out by hand."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import parameterized

from rcgrpo_jax.models.xla_attention import grouped_attention

pytestmark = pytest.mark.slow  # the fast lane skips it (pytest.ini)

B, T, N, G, DH = 2, 7, 4, 2, 8
SCALE = 1.0 / np.sqrt(DH)


def _inputs(dtype=jnp.float32):
    kq, kk, kv, kw = jax.random.split(jax.random.key(0), 4)
    q = jax.random.normal(kq, (B, T, N, DH), dtype)
    k = jax.random.normal(kk, (B, T, G, DH), dtype)
    v = jax.random.normal(kv, (B, T, G, DH), dtype)
    w = jax.random.normal(kw, (B, T, N, DH), jnp.float32)  # weights of the scalar the gradients are of
    valid = jnp.array([[1, 1, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1, 1]], bool)  # right and left padding
    mask = (jnp.tril(jnp.ones((T, T), bool))[None] & valid[:, None, :])[:, None]
    mask = mask.at[1, 0, 0].set(False)  # row 1's first query (padding) sees no key at all
    return q, k, v, w, mask


class GroupedAttentionTest(parameterized.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.parameters(jnp.float32, jnp.bfloat16)
    def test_forward_equals_library(self, dtype):
        q, k, v, _, mask = _inputs(dtype)
        ours = self.variant(lambda q, k, v: grouped_attention(q, k, v, mask, SCALE))(q, k, v)
        ref = jax.nn.dot_product_attention(q, k, v, mask=mask, scale=SCALE)
        self.assertEqual(ours.dtype, dtype)
        np.testing.assert_allclose(np.asarray(ours, np.float32), np.asarray(ref, np.float32), atol=1e-6)
        self.assertTrue(np.isfinite(np.asarray(ours, np.float32)).all())

    @chex.variants(with_jit=True, without_jit=True)
    def test_gradients_equal_library_autodiff(self):
        q, k, v, w, mask = _inputs()
        loss = lambda attn: lambda q, k, v: jnp.sum(attn(q, k, v).astype(jnp.float32) * w)
        ours = self.variant(jax.grad(loss(lambda q, k, v: grouped_attention(q, k, v, mask, SCALE)), (0, 1, 2)))
        ref = jax.grad(loss(lambda q, k, v: jax.nn.dot_product_attention(q, k, v, mask=mask, scale=SCALE)), (0, 1, 2))
        for name, a, b in zip("qkv", ours(q, k, v), ref(q, k, v)):
            np.testing.assert_allclose(a, b, atol=2e-6, err_msg=name)
        # The query with no allowed key gets a finite output and no gradient.
        self.assertTrue(np.all(np.asarray(ours(q, k, v)[0])[1, 0] == 0))

    def test_hand_values(self):
        # One kv head, two query heads; keys 0 and 1 allowed. Head 0's query scores them 0 and ln 3 (weights
        # 1/4, 3/4); head 1's query scores both 0 (weights 1/2, 1/2). Values are 4 and 8.
        q = jnp.array([[[[0.0], [0.0]]]])  # [B=1, T=1, N=2, Dh=1]
        q = q.at[0, 0, 0, 0].set(np.log(3.0))
        k = jnp.array([[[[0.0]], [[1.0]], [[5.0]]]])  # [1, S=3, G=1, 1]; key 2 is masked out
        v = jnp.array([[[[4.0]], [[8.0]], [[100.0]]]])
        mask = jnp.array([[[[True, True, False]]]])
        out = grouped_attention(q, k, v, mask, 1.0)
        np.testing.assert_allclose(out[0, 0, :, 0], [0.25 * 4 + 0.75 * 8, 6.0], rtol=1e-6)
