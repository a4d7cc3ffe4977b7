"""The SFT step and loop on the tiny checkpoint: sharded == unsharded, accumulation is exact, the loss
goes down on its data, the final HF export loads in transformers."""

from __future__ import annotations

import os

import jax
import numpy as np
import pytest
from transformers import AutoTokenizer

from rcgrpo_jax import multihost, sharding
from rcgrpo_jax.chat import end_of_turn_ids
from rcgrpo_jax.models.hf_io import load_hf
from rcgrpo_jax.train import dry_run, model_prep, optim, sft, sft_data
from rcgrpo_jax.train import logging as log_lib
from rcgrpo_jax.train import state as state_lib
from tests.helpers import train as train_helpers

pytestmark = pytest.mark.slow  # the fast lane skips it (pytest.ini)


def _one_step(config, ckpt, data, mesh_axes, grad_accum):
    """Loads the tiny model onto `mesh_axes`, takes one SFT step on batch 0; returns (metrics, params)."""
    mesh = sharding.make_mesh(mesh_axes)
    model_cfg = model_prep.model_config(config, ckpt)
    abstract_params = jax.eval_shape(lambda: load_hf(ckpt)[1])
    p_sh = model_prep.param_shardings(abstract_params, mesh, "train")
    params = load_hf(ckpt, dtype="float32", mesh=mesh, rules=sharding.TRAIN_RULES)[1]
    tx = optim.make_optimizer(config.optim, 10)
    lr_fn = optim.schedule(config.optim.lr, 10, 0.0, 1.0)
    abstract = state_lib.abstract_state(abstract_params, tx)
    state_sh = state_lib.state_shardings(abstract, mesh, p_sh, tx)
    batch = data.batch(0)
    shape = (grad_accum, batch["tokens"].shape[0] * batch["tokens"].shape[1] // grad_accum, batch["tokens"].shape[2])
    batch = {k: v.reshape(shape) for k, v in batch.items()}
    step = sft.compile_step(
        sft.make_train_step(model_cfg, tx, lr_fn, 256), abstract, state_sh, shape, mesh, sharding.TRAIN_RULES.logical
    )
    with jax.set_mesh(mesh):
        state = jax.device_put(state_lib.create(params, tx, jax.random.PRNGKey(0)), state_sh)
        state, metrics = step(state, multihost.place(batch, sharding.batch_sharding(mesh, 3, row_dim=1)))
    return jax.device_get(metrics), jax.device_get(state.params)


@pytest.fixture(scope="module")
def small_data(tiny_ckpt, tokenizer, data_path):
    return sft_data.build_data(
        sft_data.read_jsonl(data_path),
        tokenizer,
        end_of_turn_ids(tokenizer),
        buckets=(64, 128),
        batch_size=8,
        grad_accum=1,
        seed=0,
    )


def test_sharded_step_equals_unsharded(tiny_ckpt, data_path, small_data):
    config = train_helpers.make_config(tiny_ckpt, data_path)
    m1, p1 = _one_step(config, tiny_ckpt, small_data, {"data": 1, "fsdp": 1, "tensor": 1}, grad_accum=1)
    m8, p8 = _one_step(config, tiny_ckpt, small_data, {"data": 2, "fsdp": 2, "tensor": 2}, grad_accum=2)
    assert (
        m1["loss_tokens"]
        == m8["loss_tokens"]
        == sum(int(small_data.loss_mask[j][1:].sum()) for j in small_data.indices(0))
    )
    np.testing.assert_allclose(m8["loss"], m1["loss"], rtol=1e-5)
    np.testing.assert_allclose(m8["grad_norm"], m1["grad_norm"], rtol=1e-4)
    # A random-init model predicts about uniformly: the loss starts near log(vocab).
    assert abs(m1["loss"] - np.log(len(AutoTokenizer.from_pretrained(tiny_ckpt)))) < 1.0
    # One Adam step moves a parameter by at most ~lr: the difference is compared to that scale
    lr = float(config.optim.lr)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=3e-3 * lr), p1, p8)


def test_tiny_sft_lowers_the_loss_and_exports_hf(tiny_ckpt, data_path, tmp_path, compile_cache):
    config = train_helpers.make_config(
        tiny_ckpt, data_path, train__max_steps=30, checkpoint__export_hf=True, checkpoint__every_steps=100
    )
    out = sft.run(config, str(tmp_path))
    assert out["reason"] == "done" and out["step"] == 30
    rows = log_lib.read_metrics(str(tmp_path / log_lib.METRICS_FILE))
    assert [r["step"] for r in rows] == list(range(1, 31))
    losses = [r["loss"] for r in rows]
    assert all(r["finite"] == 1 for r in rows)
    assert np.mean(losses[-3:]) < np.mean(losses[:3]) - 1.0, losses
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["30"]  # final save
    import torch
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(str(tmp_path / "hf"), dtype=torch.float32)
    ours = load_hf(str(tmp_path / "hf"))[1]
    np.testing.assert_allclose(hf.model.norm.weight.detach().numpy(), np.asarray(ours["final_norm"]["scale"]))
    assert AutoTokenizer.from_pretrained(str(tmp_path / "hf")).chat_template


def test_dry_run_reports_memory_and_start_up_refuses_what_cannot_fit(tiny_ckpt, data_path, tmp_path):
    from rcgrpo_jax.config_fields import MemoryFitError

    config = train_helpers.make_config(tiny_ckpt, data_path)
    report = dry_run.supervised(config)
    n_params = sum(x.size for x in jax.tree.leaves(jax.eval_shape(lambda: load_hf(tiny_ckpt)[1])))
    # FSDP over 'fsdp' (1 here) and tensor (1): every device holds all f32 params, and AdamW two moments.
    assert report["params_gb"] == pytest.approx(n_params * 4 / 1e9, rel=0.05)
    assert report["opt_state_gb"] == pytest.approx(2 * report["params_gb"], rel=0.05)
    assert report["peak_gb"] > report["params_gb"] + report["opt_state_gb"] > 0
    assert (report["seq_len"], report["micro_batch"], report["devices"]) == (128, 8, 8)
    config.memory.device_bytes = int(report["peak_gb"] * 1e9 / 2)
    with pytest.raises(MemoryFitError, match="GB over the"):
        sft.run(config, str(tmp_path))
    assert not os.path.exists(tmp_path / "checkpoints")  # refused before any training state was written
