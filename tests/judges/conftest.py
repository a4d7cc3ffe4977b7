"""Judge test fixtures: one tiny HF checkpoint for the model judge, built once per session."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_ckpt(tmp_path_factory) -> str:
    from rcgrpo_jax.models.tiny import build_tiny_checkpoint

    return build_tiny_checkpoint(str(tmp_path_factory.mktemp("tiny_judge") / "model"), arch="qwen2")
