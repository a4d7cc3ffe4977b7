"""One tiny tokenizer per family for the chat tests (no weights needed, so no torch import)."""

import pytest
import transformers

from rcgrpo_jax.models.tiny import build_tiny_tokenizer


@pytest.fixture(scope="session", params=["qwen2", "llama"])
def tiny_tokenizer(request, tmp_path_factory):
    path = build_tiny_tokenizer(tmp_path_factory.mktemp(f"tiny_tok_{request.param}"), arch=request.param)
    return request.param, transformers.AutoTokenizer.from_pretrained(path)
