"""Decode attention through tokamax's Triton flash attention with per-row key lengths (`decode_attention=tokamax`).

`attend(q, k, v, lengths)`: one decode step's queries q [B, G, R, Dh] (query head g * R + r) over a cache in
the ragged layout, k and v [B, G, S, Dh], row b over its first lengths[b] slots -> [B, G, R, Dh]. It calls
`tokamax.dot_product_attention` with (row, kv head) as its two batch axes, a group's R query heads as R
queries of one head, and `key_value_seq_lengths` = lengths: the cache is passed as it is (a reshape, no
copy), each (row, kv head) reads its keys once, and the kernel's key loop stops at the row's length.

Where it runs: traced for a GPU (a GPU backend, or `models.attention.lowering_for("cuda")`), tokamax's Pallas
Triton kernel (implementation "triton"; lowered from a CPU host under `tokamax.config.cross_compile`);
elsewhere tokamax's XLA reference implementation through the same call (what the CPU tests compare with the
dense decode). The Triton kernel needs a tokamax release that no longer calls `pl.dot` (removed from jax
0.11 on): `FIXED_RELEASE` or later, which PyPI serves for Python >= 3.12 only (setup.py's `gpu` extra pins
one there). `unavailable(gpu)` says why it cannot run. Per-shard calls under a mesh: `sampling.decode_step`.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import math

import jax

from rcgrpo_jax.models.attention import GPU_BACKENDS, pallas_interpret

FIXED_RELEASE = (0, 0, 13)  # the first tokamax release whose Triton attention does not call pl.dot
TRITON = "triton"  # tokamax's Pallas Triton flash attention (on a GPU)
REFERENCE = "xla"  # tokamax's XLA reference implementation (off a GPU)


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".")[:3] if p.isdigit())


def unavailable(gpu: bool = True) -> str | None:
    """Why the tokamax decode cannot run here (None when it can): tokamax must be installed, and on a GPU
    (`gpu`) be `FIXED_RELEASE` or later (earlier releases' Triton kernel calls `pl.dot`, which jax 0.11 and
    later lack); off a GPU any release's reference implementation serves."""
    if importlib.util.find_spec("tokamax") is None:
        return "tokamax is not installed (setup.py's gpu and test extras)"
    version = importlib.metadata.version("tokamax")
    if gpu and _release(version) < FIXED_RELEASE:
        fixed = ".".join(map(str, FIXED_RELEASE))
        return (
            f"tokamax {version}'s Triton attention calls pl.dot, which jax 0.11 removed: it needs tokamax >= "
            f"{fixed} (Python >= 3.12; setup.py's gpu extra pins it there)"
        )
    return None


def implementation() -> str:
    """The tokamax implementation a call traced now uses: `TRITON` when traced for a GPU, else `REFERENCE`."""
    return REFERENCE if pallas_interpret() else TRITON


def attend(q: jax.Array, k: jax.Array, v: jax.Array, lengths: jax.Array) -> jax.Array:
    """q [B, G, R, Dh] over k, v [B, G, S, Dh], row b over its first lengths[b] slots -> [B, G, R, Dh] (a row
    of length 0: a finite, meaningless output). Scale 1 / sqrt(Dh); logits and the softmax in float32."""
    import tokamax
    from absl import flags

    # tokamax (0.0.12) parses sys.argv as absl flags when the process has not: mark them parsed at their
    # defaults instead, as `models.attention.tokamax_attention` does.
    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
    impl = implementation()
    if impl == TRITON and (why := unavailable(gpu=True)):
        raise ValueError(f"decode_attention: 'tokamax' cannot be traced for a GPU: {why}")
    # Lowered from a host without a GPU: tokamax's device check would refuse the host's CPU device.
    host_only = impl == TRITON and str(jax.default_backend()).lower() not in GPU_BACKENDS
    cross = tokamax.config.cross_compile(True) if host_only else contextlib.nullcontext()
    with cross:
        out = tokamax.dot_product_attention(
            q[:, :, :, None, :],  # [B, G, T=R, N=1, Dh]
            k[:, :, :, None, :],  # [B, G, S, K=1, Dh]
            v[:, :, :, None, :],
            key_value_seq_lengths=lengths[:, None],  # broadcast over the kv-head batch axis
            scale=1.0 / math.sqrt(q.shape[-1]),
            implementation=impl,
        )
    return out[:, :, :, 0, :]
