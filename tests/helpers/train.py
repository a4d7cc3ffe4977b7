"""Helpers for the trainer tests: a deterministic SFT dataset (user -> tool call -> tool result ->
answer, a pattern a tiny model picks up quickly) and config builders."""

from __future__ import annotations

import json
import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    }
]


def conversation(i: int, *, tools: bool = False) -> dict:
    a, b = 3 + i % 7, 11 + (5 * i) % 13
    return {
        "tools": TOOLS if tools else None,
        "messages": [
            {"role": "user", "content": f"What is {a} plus {b}?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": {"a": a, "b": b}}}],
            },
            {"role": "tool", "content": str(a + b)},
            {"role": "assistant", "content": f"The sum is {a + b}."},
        ],
    }


def write_jsonl(path: str, n: int = 16) -> str:
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps(conversation(i)) + "\n")
    return path


def make_config(ckpt: str, data: str, **overrides):
    """The sft `tiny` preset on the test data: batches of 8 at length 128, quiet console."""
    from configs import sft

    c = sft.get_config("tiny")
    c.model.path = ckpt
    c.data.path = data
    c.data.buckets = (64, 128)
    c.mesh.data = -1  # all 8 test devices
    c.train.grad_accum = 1
    c.train.batch_size = 8
    c.train.max_steps = 40
    c.log.progress = False
    c.log.tensorboard = False
    c.checkpoint.export_hf = False
    return set_overrides(c, overrides)


def set_overrides(c, overrides):
    """c.a.b = value for each keyword `a__b=value` (keywords can not hold dots)."""
    for dotted, value in overrides.items():
        node = c
        *head, last = dotted.split("__")
        for part in head:
            node = node[part]
        node[last] = value
    return c


def cli_overrides(ckpt: str, data: str) -> list[str]:
    """The same settings as `make_config` as main.py flags."""
    return [
        f"--config.model.path={ckpt}",
        f"--config.data.path={data}",
        "--config.data.buckets=(64,128)",
        "--config.mesh.data=-1",
        "--config.train.grad_accum=1",
        "--config.train.batch_size=8",
        "--config.log.progress=False",
        "--config.log.tensorboard=False",
        "--config.checkpoint.export_hf=False",
    ]
