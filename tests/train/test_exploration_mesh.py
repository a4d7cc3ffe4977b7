"""The exploration stage on the mesh, in the stage's dtype (`train.exploration.collect(config=...)`): the policy's
weights sharded over the 8 fake devices by the decode rules, in the config's decode dtype; the records those
rollouts make are the ones one device makes; `--preset` selects the RL stages' config; and the dry run plans it
(`dry_run.exploration`) at its shapes."""

from __future__ import annotations

import types

import jax
import jax.numpy as jnp
import ml_collections
import pytest

from rcgrpo_jax import models
from rcgrpo_jax.data import sources, trajectories
from rcgrpo_jax.train import dry_run, exploration, memory

MESH = (1, 4, 2)  # data, fsdp, tensor: the GPU presets' shape on 8 devices
SMALL = exploration.Settings(group_size=2, batch_tasks=2, max_step_tokens=16, max_context=2048, temperature=0.0)


def world_tasks(n: int):
    data = ml_collections.ConfigDict(
        {"source": "world", "max_examples": -1, "world": {"seed": 0, "train_per_type": 64, "test_per_type": 16}}
    )
    return sources.tasks(data, "train")[:n]


def config_for(dtype: str):
    c = exploration.preset_config("tiny")
    c.model.dtype = c.model.decode_dtype = dtype
    c.mesh.data, c.mesh.fsdp, c.mesh.tensor = MESH
    return c


def collect(ckpt, monkeypatch, **kwargs):
    """The records of `exploration.collect` over 2 world tasks x 2 rollouts, and the weights its policies got."""
    seen = []

    class Recording(exploration.ModelPolicy):
        def __init__(self, config, params, **kw):
            seen.append(params)
            super().__init__(config, params, **kw)

    monkeypatch.setattr(exploration, "ModelPolicy", Recording)
    s = SMALL
    records = exploration.collect(
        ckpt,
        world_tasks(2),
        group_size=s.group_size,
        batch_tasks=s.batch_tasks,
        max_step_tokens=s.max_step_tokens,
        max_context=s.max_context,
        temperature=s.temperature,
        keep="all",
        source="world",
        **kwargs,
    )
    return records, seen


@pytest.mark.slow  # three runs of the rollout engine, each compiling its programs (~60 s on 2 cores)
def test_collect_runs_on_the_mesh_in_the_stage_dtype(tiny_ckpt, monkeypatch):
    records, seen = collect(tiny_ckpt, monkeypatch, config=config_for("bfloat16"))
    assert seen, "collect made no policy"
    leaves = jax.tree.leaves(seen[0])
    assert {leaf.dtype for leaf in leaves} == {jnp.dtype(jnp.bfloat16)}  # the weights as the config decodes
    devices = set(jax.devices())
    assert all(leaf.sharding.device_set == devices for leaf in leaves)  # on the whole mesh, not one device
    split = [leaf for leaf in leaves if leaf.sharding.shard_shape(leaf.shape) != leaf.shape]
    assert split, "no weight is split over the mesh"
    assert all("tensor" in str(leaf.sharding.spec) for leaf in split)  # the decode rules: tensor-parallel only
    whole = sum(leaf.size for leaf in leaves) * 2
    per_device = memory.shard_bytes(leaves, [leaf.sharding for leaf in leaves])
    assert whole / 2 <= per_device < whole  # tensor 2 halves what splits; nothing is split over fsdp

    # The records: one per rollout, in task order, in the trajectory format, labelled by their reward.
    tasks = world_tasks(2)
    assert [r["id"] for r in records] == [t.id for t in tasks for _ in range(2)]
    for r in records:
        trajectories.validate_record(r)
        assert r["kind"] == ("failure" if r["reward"] == 0.0 else "rollout")

    # Float32 (the tiny preset's dtype), greedy: the mesh's records are those of one device (config=None,
    # mesh=None: the CPU ablation's call), message for message.
    on_mesh, seen32 = collect(tiny_ckpt, monkeypatch, config=config_for("float32"))
    alone, seen_alone = collect(tiny_ckpt, monkeypatch)
    assert {leaf.dtype for leaf in jax.tree.leaves(seen32[0])} == {jnp.dtype(jnp.float32)}
    assert {len(leaf.sharding.device_set) for leaf in jax.tree.leaves(seen_alone[0])} == {1}
    assert on_mesh == alone and len(alone) == 4


def test_preset_selects_the_rl_stages_config(monkeypatch, tmp_path):
    got = {}
    monkeypatch.setattr(exploration, "collect", lambda path, tasks, **kw: got.update(kw, path=path) or [])
    out = tmp_path / "x.jsonl"
    argv = ["--model", "/m", "--out", str(out), "--source", "world", "--tasks", "2"]
    exploration.main(["--preset", "qwen2_5_7b", *argv])
    c = got["config"]
    assert (c.model.dtype, c.model.decode_dtype) == ("bfloat16", "bfloat16")
    assert (c.mesh.data, c.mesh.fsdp, c.mesh.tensor) == (1, -1, 2) and c.sharding.decode_rules == "decode"
    assert got["group_size"] == exploration.DEFAULT.group_size and out.exists()
    exploration.main(argv)
    assert got["config"] is None  # no preset: the tiny preset's float32 on one device (`collect`)
    with pytest.raises(SystemExit):
        exploration.main(["--preset", "no_such_preset", *argv])


def test_stage_config_says_what_exploration_runs():
    c = exploration.stage_config(exploration.preset_config("qwen2_5_7b"), SMALL)
    assert c.train.batch_size == c.rl.rollout_chunk == 4 and c.rl.rollout_rows == c.rl.rollout_slice == 0
    assert (c.rl.group_size, c.rl.max_context, c.rl.max_step_tokens) == (2, 2048, 16)
    assert (c.rl.temperature, c.rl.top_k, c.rl.top_p) == (0.0, 0, 1.0)
    assert c.rl.prefill_chunk == exploration.preset_config("qwen2_5_7b").rl.prefill_chunk  # the RL stages'
    with pytest.raises(Exception, match="RL stage config"):
        exploration.stage_config(ml_collections.ConfigDict({"model": {}}))


@pytest.mark.slow  # compiles the rollout programs at exploration's shapes (~30 s on 2 cores)
def test_dry_run_plans_exploration(tiny_ckpt):
    config = config_for("bfloat16")
    config.model.path = tiny_ckpt
    plan = dry_run.exploration(config, SMALL)
    gb = plan["per_device_gb"]
    assert plan["mesh"] == dict(zip(("data", "fsdp", "tensor"), MESH)) and plan["devices"] == 8
    assert set(plan["resident_gb"]) == {"decode_weights", "kv_cache"}
    assert gb["update"] == gb["reference"] == 0.0 and min(gb[p] for p in ("prefill", "session", "decode")) > 0
    assert (
        plan["peak_gb"]
        == gb["peak"]
        == pytest.approx(
            max(gb[p] + plan["resident_during_gb"][p] for p in ("cast", "prefill", "session", "decode")), rel=1e-9
        )
    )
    assert plan["fits"] and plan["rollout"]["decode_dtype"] == "bfloat16"

    # Hand-computed sizes: 4 rollouts -> 8 rows (the sampler's row multiple, a multiple of data x fsdp);
    # capacity = max_context + the tiny preset's prefill chunk (256). The KV cache is split 8 ways (rows over data x fsdp, KV heads over tensor),
    # the next-token logits 4 ways (rows).
    cfg = models.ModelConfig.from_hf(tiny_ckpt)
    rows, capacity = 8, 2048 + 256
    assert (plan["rollout"]["rows"], plan["rollout"]["capacity"]) == (rows, capacity)
    kv = 2 * cfg.num_layers * rows * cfg.num_kv_heads * cfg.head_dim * capacity * 2 / 8  # bf16
    extra = (rows * cfg.vocab_size * 4 + 4 * rows) / 4  # float32 logits and int32 lengths, rows split 4 ways
    assert plan["resident_gb"]["kv_cache"] == pytest.approx((kv + extra) / 1e9, rel=1e-9)
    whole = sum(x.size for x in jax.tree.leaves(models.abstract_params(cfg))) * 2  # bf16 weights
    weights = plan["resident_gb"]["decode_weights"] * 1e9
    assert whole / 2 <= weights < whole  # tensor-parallel: split where the dims allow
    assert gb["cast"] == pytest.approx(weights / 1e9, rel=1e-9)  # as loaded (bf16, the same shards) beside the copy


def test_an_rl_dry_run_refuses_an_exploration_that_does_not_fit(monkeypatch):
    """`stages.TRAINERS['rl']`'s dry run is the RL step's plan with exploration's beside it, exploration on the
    RL run's plan (its resolved config, its mesh) sharing its compiled programs; an exploration over the budget
    stops it naming the stage (the plans themselves are stubbed: their sizes are tested above)."""
    from rcgrpo_jax import stages
    from rcgrpo_jax.config_fields import MemoryFitError
    from rcgrpo_jax.train import rl_setup

    assert stages.TRAINERS["rl"].dry_run is dry_run.rl_with_exploration
    plan = {"peak_gb": 50.0, "budget_gb": 100.0, "fits": True}
    run, seen = types.SimpleNamespace(config="resolved", mesh="mesh"), {}
    monkeypatch.setattr(dry_run, "dry_plan", lambda config: run)
    monkeypatch.setattr(rl_setup, "abstract_model", lambda r: "model")

    def rl_run(r, model, program_bytes):
        seen["rl"] = (r, model, program_bytes)
        return {"peak_gb": 10.0, "budget_gb": 100.0}

    def exploration(config, *, mesh, program_bytes):
        seen["exploration"] = (config, mesh, program_bytes)
        return plan

    monkeypatch.setattr(dry_run, "rl_run", rl_run)
    monkeypatch.setattr(dry_run, "exploration", exploration)
    assert dry_run.rl_with_exploration(None) == {"peak_gb": 10.0, "budget_gb": 100.0, "exploration": plan}
    assert seen["rl"][:2] == (run, "model") and seen["exploration"][:2] == ("resolved", "mesh")
    assert isinstance(seen["rl"][2], dry_run.ProgramBytes) and seen["exploration"][2] is seen["rl"][2]
    plan.update(peak_gb=150.0, fits=False)
    with pytest.raises(MemoryFitError, match="exploration"):
        dry_run.rl_with_exploration(None)
