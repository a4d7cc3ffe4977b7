"""Fixtures for the multi-process tests: one tiny checkpoint shared by the test process and its workers."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_ckpt(tmp_path_factory) -> str:
  from rcgrpo_jax.models.tiny import build_tiny_checkpoint
  return build_tiny_checkpoint(str(tmp_path_factory.mktemp("tiny") / "model"), arch="qwen2")
