"""configs/awpo.py:tiny end to end from the command line on AWPO's own backbone family: with no
model.path it builds a tiny Qwen3 under the workdir (q/k RMSNorm, no attention biases, head_dim apart from
hidden/heads), runs one AWPO step with the rule judge and exports a Qwen3 checkpoint HF transformers loads."""

from __future__ import annotations

import json
import os

from rcgrpo_jax import main
from tests import test_main

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AWPO = os.path.join(REPO, "configs", "awpo.py")

# One RL step of 2 world tasks x 2 rollouts with short steps (tests/test_main.py's SMALL), exporting the HF
# checkpoint this test reads.
SMALL = [a for a in test_main.SMALL if not a.startswith("--config.checkpoint.export_hf")]


def test_awpo_tiny_preset_builds_a_qwen3_and_runs_from_the_cli(tmp_path, compile_cache, capsys):
    import torch
    import transformers

    from rcgrpo_jax.models import load_hf
    from rcgrpo_jax.train import logging as log_lib

    workdir = str(tmp_path / "awpo")
    argv = ["main", f"--config={AWPO}:tiny", *SMALL, f"--config.runtime.compile_cache_dir={compile_cache}"]
    assert main.cli([*argv, f"--workdir={workdir}"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == '{"step": 1, "reason": "done", "total_steps": 1}'

    with open(os.path.join(workdir, "tiny_model", "config.json")) as f:
        built = json.load(f)
    assert built["model_type"] == "qwen3" and built["architectures"] == ["Qwen3ForCausalLM"]
    assert built["head_dim"] == 2 * built["hidden_size"] // built["num_attention_heads"]
    assert built["attention_bias"] is False and built["tie_word_embeddings"] is True

    (row,) = log_lib.read_metrics(os.path.join(workdir, log_lib.METRICS_FILE))
    assert row["finite"] == 1 and row["updates"] == 1 and row["loss_tokens"] > 0
    assert 0.0 <= row["estimator/gate_open_frac"] <= 1.0 and row["judge/stand_in"] == 1
    assert row["judge/calls"] == 4 and row["judge/failures"] == 0  # 2 tasks x 2 rollouts, all scored

    # The exported policy is a Qwen3 with its q/k norms; HF and our decoder give the same logits on it.
    exported = os.path.join(workdir, "hf")
    config, params = load_hf(exported)
    assert config.model_type == "qwen3" and config.qk_norm
    assert config.head_dim * config.num_heads != config.hidden_size
    assert params["layers"]["attn"]["q_norm"]["scale"].shape == (config.num_layers, config.head_dim)
    model = transformers.AutoModelForCausalLM.from_pretrained(exported, attn_implementation="eager")
    assert type(model).__name__ == "Qwen3ForCausalLM"
    import jax.numpy as jnp
    import numpy as np

    from rcgrpo_jax.models import apply

    ids = np.random.default_rng(0).integers(0, config.vocab_size, size=(1, 12))
    with torch.no_grad():
        ref = model(torch.tensor(ids)).logits.numpy()
    ours = np.asarray(apply(config, params, jnp.asarray(ids)))
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-4 * max(1.0, float(np.abs(ref).max())))
