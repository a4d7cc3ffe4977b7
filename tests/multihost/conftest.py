"""Fixtures for the multi-process tests: one tiny checkpoint shared by the test process and its workers."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_ckpt(tmp_path_factory) -> str:
    from rcgrpo_jax.models.tiny import build_tiny_checkpoint

    return build_tiny_checkpoint(str(tmp_path_factory.mktemp("tiny") / "model"), arch="qwen2")


@pytest.fixture(scope="session")
def world_ckpt(tmp_path_factory) -> str:
    """A 1-layer, hidden-32 checkpoint whose tokenizer was trained on the miniature world's text (short
    prompts), for the RL step."""
    from configs import rc_grpo
    from rcgrpo_jax.data import tiny_checkpoint

    path = str(tmp_path_factory.mktemp("world") / "model")
    return tiny_checkpoint.build_tiny(
        rc_grpo.get_config("tiny"), path, hidden_size=32, num_layers=1, intermediate_size=64
    )
