"""Session fixtures for the trainer tests: one tiny checkpoint, its tokenizer, the test data (the persistent
compilation cache `compile_cache` is in tests/conftest.py)."""

from __future__ import annotations

import pytest

from tests.helpers import train as train_helpers


@pytest.fixture(scope="session")
def tiny_ckpt(tmp_path_factory) -> str:
    from rcgrpo_jax.models.tiny import build_tiny_checkpoint

    return build_tiny_checkpoint(str(tmp_path_factory.mktemp("tiny") / "model"), arch="qwen2")


@pytest.fixture(scope="session")
def tokenizer(tiny_ckpt):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_ckpt)


@pytest.fixture(scope="session")
def data_path(tmp_path_factory) -> str:
    return train_helpers.write_jsonl(str(tmp_path_factory.mktemp("data") / "sft.jsonl"))
