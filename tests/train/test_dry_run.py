"""The dry run's memory plan: one JSON object as the command's last line, with the per-device phases, the
resident buffers and the peak, checked against hand-computed sizes on a tiny RL config (8 fake devices)."""

from __future__ import annotations

import dataclasses
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rcgrpo_jax import main, models
from rcgrpo_jax.train import dry_run, exploration, memory
from tests.helpers import train as train_helpers

pytestmark = pytest.mark.slow  # the fast lane skips it (pytest.ini)

SMALL_RL = (  # a tiny RL step: 20 rollouts (5 tasks x 4), 16-token steps, a 192-token context, 64-wide prefill
    "--config.data.buckets=(128,256)",
    "--config.rl.max_context=192",
    "--config.rl.max_step_tokens=16",
    "--config.rl.prefill_chunk=64",
    "--config.train.batch_size=20",
    "--config.rl.rollout_chunk=20",
    "--config.train.grad_accum=5",
    "--config.rl.num_minibatches=1",
)


def test_rl_dry_run_prints_the_memory_plan_last(tiny_ckpt, capsys, monkeypatch):
    monkeypatch.delenv("XLA_PYTHON_CLIENT_MEM_FRACTION", raising=False)  # JAX's default allocator fraction
    argv = ["main", "--config=configs/rc_grpo.py:tiny", f"--config.model.path={tiny_ckpt}", *SMALL_RL, "--dry_run"]
    assert main.cli(argv) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    report = json.loads(last)
    gb = report["per_device_gb"]
    assert set(gb) == {*memory.PHASES, "resident", "peak"}
    assert isinstance(report["fits"], bool) and report["limit_gb"] == pytest.approx(0.75 * 141.0)
    resident = report["resident_gb"]
    assert set(resident) == {"train_state", "reference", "decode_weights", "kv_cache"}
    assert gb["resident"] == pytest.approx(sum(resident.values()), rel=1e-9)
    during = report["resident_during_gb"]
    training = resident["train_state"] + resident["reference"]
    assert during["update"] == during["reference"] == pytest.approx(training, rel=1e-9)
    assert during["cast"] == pytest.approx(training + resident["decode_weights"], rel=1e-9)
    assert during["prefill"] == during["session"] == during["decode"] == pytest.approx(gb["resident"], rel=1e-9)
    assert gb["peak"] == pytest.approx(max(gb[p] + during[p] for p in memory.PHASES), rel=1e-9)
    assert report["fits"] == (gb["peak"] <= report["limit_gb"]) and min(gb.values()) > 0
    assert "stand-in" in report["attention"]
    programs = report["programs_gb"]
    prefill = ("append_all_gb", "append_rows_gb", "prefill_packed_gb", "append_packed_gb")
    assert gb["prefill"] == max(programs[k] for k in prefill)
    assert gb["session"] == max(programs["copy_rows_gb"], programs["take_rows_gb"])

    # Hand-computed sizes (the tiny preset's mesh is one device: every buffer is whole on it).
    config = models.ModelConfig.from_hf(tiny_ckpt)
    n_params = sum(x.size for x in jax.tree.leaves(models.abstract_params(config)))
    n_params += 2 * config.hidden_size * (1 if config.tie_word_embeddings else 2)  # the 2 reward tokens' rows
    rows, capacity = 24, 192 + 64  # 20 rollouts -> a multiple of 8; max_context + max(prefill_chunk, 16)
    assert report["rollout"] == {
        "rows": rows,
        "capacity": capacity,
        "prefill_width": 64,
        "max_new_tokens": 16,
        "sub_batch_rows": 16,  # the largest row bucket (1, 2, 4, ...) below 24
        "copy_rows": 24,  # the 18 siblings of 6 groups of 4 -> bucket 32, capped at the 24 rows
        "packed_tokens": 192,  # one fresh row of max_context tokens, packed (one row shard: token_bucket(192))
        "prefill_pairs": 8,  # its 3 query blocks of 64 see 1, 2 and 3 key blocks: 6 -> pair_bucket 8
        "append_blocks": 8,  # those tokens in blocks of 32 on one shard: 6 -> row_bucket 8
        "append_pairs": 16,  # each block over the whole capacity: 8 x 256 / 128 key slots -> 16
        "decode_dtype": "float32",  # the tiny preset decodes in its compute dtype
    }
    kv = 2 * config.num_layers * rows * config.num_kv_heads * config.head_dim * capacity * 4 + 4 * rows
    logits = rows * (config.vocab_size + 2) * 4  # the session's next-token logits, resident with the cache
    assert resident["kv_cache"] == pytest.approx((kv + logits) / 1e9, rel=1e-9)
    assert resident["decode_weights"] == pytest.approx(n_params * 4 / 1e9, rel=1e-9)
    assert resident["reference"] == pytest.approx(n_params * 4 / 1e9, rel=1e-9)
    assert resident["train_state"] == pytest.approx(3 * n_params * 4 / 1e9, rel=0.01)  # params + 2 moments
    # The cast's transient is the decode-dtype copy on the training shards: here float32, one device, so the
    # parameters' size again.
    assert programs["cast_gb"] == pytest.approx(n_params * 4 / 1e9, rel=0.05)

    # The exploration stage's plan beside it (`dry_run.exploration`), at the command's default shapes: one row
    # per rollout of a batch, the RL config's prefill chunk, the base model (no reward tokens).
    explore, d = report["exploration"], exploration.DEFAULT
    assert explore["settings"] == dataclasses.asdict(d)
    new = explore["rollout"]["max_new_tokens"]
    assert (explore["rollout"]["rows"], explore["rollout"]["capacity"]) == (32, d.max_context + max(64, new))
    n_base = sum(x.size for x in jax.tree.leaves(models.abstract_params(config)))  # float32, on one device
    assert explore["resident_gb"]["decode_weights"] == pytest.approx(n_base * 4 / 1e9, rel=1e-9)
    assert explore["fits"] and explore["peak_gb"] >= explore["resident_gb"]["kv_cache"] > resident["kv_cache"]


def test_the_footprint_attention_sizes_a_fused_kernel():
    """The gradient of a model attention call compiled with the plan's attention (`dry_run.planned_model`:
    `models.attention.FOOTPRINT`) allocates no [B, G, T, R, S] probabilities (the dense XLA attention's f32
    tensor), and its temporaries grow linearly in T."""
    from rcgrpo_jax.models import attention as attention_lib

    b, g, r, dh = 1, 2, 2, 16
    config = dry_run.planned_model(models.ModelConfig("qwen3", 61, 32, 64, 2, 4, 2, 16, attention_impl="xla"))
    assert attention_lib.implementation_for(config) == attention_lib.FOOTPRINT

    def temp(t: int, planned: bool) -> int:
        q = jax.ShapeDtypeStruct((b, t, g * r, dh), jnp.float32)
        kv = jax.ShapeDtypeStruct((b, t, g, dh), jnp.float32)
        mask = jax.ShapeDtypeStruct((b, 1, t, t), jnp.bool_)
        impl = attention_lib.FOOTPRINT if planned else "xla"

        def loss(q, k, v, mask):
            return jnp.sum(attention_lib.attention(q, k, v, mask, 0.25, implementation=impl, causal=True) ** 2)

        compiled = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(q, kv, kv, mask).compile()
        return int(compiled.memory_analysis().temp_size_in_bytes)

    probs = b * g * 512 * r * 512 * 4
    assert temp(512, False) >= probs  # the CPU attention holds its probabilities
    assert temp(512, True) < probs / 8
    assert temp(1024, True) <= 2.5 * max(temp(512, True), 1)  # O(T), not O(T^2)


def test_sft_dry_run_has_the_same_shape(tiny_ckpt, data_path):
    report = dry_run.supervised(train_helpers.make_config(tiny_ckpt, data_path))
    gb = report["per_device_gb"]
    assert set(gb) == {*memory.PHASES, "resident", "peak"}
    assert all(gb[p] == 0.0 for p in memory.PHASES if p != "update")  # SFT has no rollout phase
    assert gb["resident"] == pytest.approx(report["params_gb"] + report["opt_state_gb"], rel=1e-9)
    assert gb["peak"] == pytest.approx(gb["update"] + gb["resident"], rel=1e-9) == report["peak_gb"]
    assert report["fits"] and np.isfinite(gb["peak"])


def test_rl_start_up_refuses_what_cannot_fit(tiny_ckpt, tmp_path, monkeypatch):
    """As SFT: the RL trainer checks the dry run's memory plan before any state is made, on the run it set up
    (`train.rl_setup`): the config is checked once."""
    from configs import rc_grpo
    from rcgrpo_jax.config_fields import MemoryFitError
    from rcgrpo_jax.train import rl_config, rl_trainer

    checks = []
    checked = rl_config.checked
    monkeypatch.setattr(rl_config, "checked", lambda *a, **k: checks.append(1) or checked(*a, **k))

    c = rc_grpo.get_config("tiny")
    c.model.path = tiny_ckpt
    c.data.buckets = (128, 256)
    c.rl.max_context, c.rl.max_step_tokens, c.rl.prefill_chunk = 192, 16, 64
    c.train.batch_size, c.rl.rollout_chunk, c.train.grad_accum, c.rl.num_minibatches = 20, 20, 5, 1
    c.memory.device_bytes = 10**6  # 1 MB at JAX's default fraction: nothing fits
    with pytest.raises(MemoryFitError, match="GB over the"):
        rl_trainer.run(c, str(tmp_path))
    assert not os.path.exists(tmp_path / "checkpoints")
    assert len(checks) == 1


def test_a_program_lowered_again_at_the_same_shapes_is_compiled_once():
    program_bytes = dry_run.ProgramBytes()
    f = jax.jit(lambda x: x * 2)
    a = program_bytes(f.lower(jax.ShapeDtypeStruct((64,), jnp.float32)))
    b = program_bytes(f.lower(jax.ShapeDtypeStruct((64,), jnp.float32)))
    c = program_bytes(f.lower(jax.ShapeDtypeStruct((128,), jnp.float32)))
    assert program_bytes.compiled == 2 and a == b and c > a
