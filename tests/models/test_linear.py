"""`layers.linear`: the dense layers' and output layer's dot with a backward laid out for XLA CPU. Forward and
gradients must equal plain `lax.dot_general` autodiff (same products, the weight gradient possibly summed
in another order), for both operand orders of its weight gradient, every dtype path, and through nn.Dense."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rcgrpo_jax.models import layers


def _plain(x, w, out_dtype=None):
    return jax.lax.dot_general(x, w, (((x.ndim - 1,), (0,)), ((), ())), preferred_element_type=out_dtype)


def _rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


@pytest.mark.parametrize("k,n", [(8, 24), (24, 8)])  # K <= N: dw = x^T dy; K > N: autodiff's (dy^T x)^T
@pytest.mark.parametrize("dtype,out_dtype", [("float32", None), ("bfloat16", None), ("bfloat16", "float32")])
def test_linear_matches_autodiff(k, n, dtype, out_dtype):
    kx, kw, kc = jax.random.split(jax.random.key(0), 3)
    x = jax.random.normal(kx, (3, 5, k)).astype(dtype)
    w = jax.random.normal(kw, (k, n)).astype(dtype)
    cot = jax.random.normal(kc, (3, 5, n))  # a generic cotangent, not just ones
    od = None if out_dtype is None else jnp.dtype(out_dtype)

    def loss(f):
        return lambda x, w: jnp.sum(f(x, w, od).astype(jnp.float32) * cot)

    y_new, y_old = layers.linear(x, w, od), _plain(x, w, od)
    assert y_new.dtype == y_old.dtype and np.array_equal(np.asarray(y_new, np.float32), np.asarray(y_old, np.float32))
    g_new = jax.grad(loss(layers.linear), (0, 1))(x, w)
    g_old = jax.grad(loss(_plain), (0, 1))(x, w)
    tol = 1e-6 if dtype == "float32" else 1e-2  # bf16 rounding of a sum taken in another order
    for a, b in zip(g_new, g_old):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert _rel(a.astype(jnp.float32), b.astype(jnp.float32)) < tol


def test_linear_weight_gradient_by_hand():
    x = jnp.arange(6.0).reshape(1, 3, 2)  # tokens t = 0..2, features (2t, 2t + 1)
    w = jnp.ones((2, 3))
    dx, dw = jax.grad(lambda x, w: jnp.sum(layers.linear(x, w)), (0, 1))(x, w)
    # d/dw sum_t x_t w = sum_t x_t for every output column; d/dx = row sums of w = 3.
    np.testing.assert_array_equal(dw, np.array([[6.0] * 3, [9.0] * 3]))
    np.testing.assert_array_equal(dx, np.full((1, 3, 2), 3.0))


def test_dense_hook_equals_plain_dense():
    x = jax.random.normal(jax.random.key(1), (2, 4, 16))
    plain = nn.Dense(32, use_bias=True)
    hooked = nn.Dense(32, use_bias=True, dot_general=layers._linear_dot_general)
    params = plain.init(jax.random.key(2), x)
    np.testing.assert_array_equal(hooked.apply(params, x), plain.apply(params, x))
    ga = jax.grad(lambda p: jnp.sum(hooked.apply(p, x) ** 2))(params)
    gb = jax.grad(lambda p: jnp.sum(plain.apply(p, x) ** 2))(params)
    for a, b in zip(jax.tree.leaves(ga), jax.tree.leaves(gb)):
        assert _rel(a, b) < 1e-6


def test_dense_hook_refuses_other_dots():
    x, w = jnp.ones((2, 3)), jnp.ones((2, 4))
    with pytest.raises(ValueError, match="unexpected dot"):
        layers._linear_dot_general(x, w, (((0,), (0,)), ((), ())))
