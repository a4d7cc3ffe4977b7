"""Session fixtures for the trainer tests: one tiny checkpoint, its tokenizer, the test data, and a
persistent compilation cache so in-process and subprocess runs reuse compiled steps."""

from __future__ import annotations

import jax
import pytest
import train_helpers


@pytest.fixture(scope="session")
def compile_cache(tmp_path_factory):
    """A persistent XLA cache for this session (in-process and subprocess runs share compiled steps)."""
    path = str(tmp_path_factory.mktemp("xla_cache"))
    old = (jax.config.jax_compilation_cache_dir, jax.config.jax_persistent_cache_min_compile_time_secs)
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    yield path
    jax.config.update("jax_compilation_cache_dir", old[0])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", old[1])


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
