"""The benchmark models, one table for every bench module: HF Qwen2 config fields (the peers build the HF model
from them, we load its weights), so a figure in one benchmark names the same model as in another."""

from __future__ import annotations

from typing import Any

MODELS: dict[str, dict[str, int]] = {
    "tiny": dict(
        hidden_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=704,
        vocab_size=1024,
    ),
    # The quickstart's world model (experiments/budgets.py QUICKSTART): d=128, 3 layers, ~520 tokens.
    "world": dict(
        hidden_size=128,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=256,
        vocab_size=520,
    ),
    "medium": dict(
        hidden_size=1024,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=8,
        intermediate_size=2816,
        vocab_size=32000,
    ),
}


def builder_arch(name: str) -> dict[str, Any]:
    """`MODELS[name]` in the tiny-checkpoint builder's names (`tiny_checkpoint.build_tiny`), without the vocab (the
    builder trains its own tokenizer)."""
    m = MODELS[name]
    return dict(
        hidden_size=m["hidden_size"],
        num_layers=m["num_hidden_layers"],
        num_heads=m["num_attention_heads"],
        num_kv_heads=m["num_key_value_heads"],
        intermediate_size=m["intermediate_size"],
    )
