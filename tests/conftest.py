"""Test-wide setup: 8 fake CPU devices so sharding is exercised without GPUs.

XLA_FLAGS must be set before JAX initialises its backends, so this runs at import time.
"""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
_flag = "--xla_force_host_platform_device_count=8"
if _flag not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _flag).strip()
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import jax  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")


import pytest  # noqa: E402


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
def tiny_qwen(tmp_path_factory):
    """(path, config, params, tokenizer, parser) of a tiny random Qwen2 checkpoint with a chat template,
    shared by the rollout and planner tests (so their sampler programs compile once)."""
    import transformers

    from rcgrpo_jax import chat, models
    from rcgrpo_jax.models.tiny import build_tiny_checkpoint

    path = build_tiny_checkpoint(
        str(tmp_path_factory.mktemp("tiny_qwen")),
        arch="qwen2",
        hidden_size=32,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        intermediate_size=64,
    )
    config, params = models.load_hf(path, dtype="float32")
    tok = transformers.AutoTokenizer.from_pretrained(path)
    return path, config, params, tok, chat.get_parser(chat.family_for(config.model_type))
