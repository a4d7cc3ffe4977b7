import pytest
import transformers

from rcgrpo_jax import chat, models
from rcgrpo_jax.models.tiny import build_tiny_checkpoint


@pytest.fixture(scope="session")
def tiny_qwen(tmp_path_factory):
    """(path, config, params, tokenizer, parser) of a tiny random Qwen2 checkpoint with a chat template."""
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
