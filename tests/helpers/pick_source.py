"""A one-step task source and a policy for it, the RL-learns test's world (tests/train/test_rl_learns.py).

The task source `pick` (`--config.data.source=tests.helpers.pick_source:pick`): every task offers two tools
without arguments, `yes` and `no`; the episode is one assistant step and its reward is 1 when that step calls
`yes` alone, else 0 (a call of `no`, an answer without a call, a call that does not parse). Success is decided by
the few tokens that name the tool.

`build_policy` writes the policy the test starts RL from: a tiny random checkpoint with the two reward tokens
(an RCTP-FT-like vocabulary, so GRPO conditions on the high token and RC-GRPO samples one per rollout, with the
same shapes), fitted by a short weighted SFT to call `yes` with probability `p_yes` and `no` otherwise, whatever
the task and the reward goal. At T = 1 it then succeeds about `p_yes` of the time.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from rcgrpo_jax.data import sources

TOOLS = [
    {
        "type": "function",
        "function": {"name": name, "description": f"Say {name}.", "parameters": {"type": "object", "properties": {}}},
    }
    for name in ("yes", "no")
]


@dataclasses.dataclass(frozen=True)
class PickTask:
    id: str
    category: str
    prompt: str


class PickEnv:
    """One step: its calls are recorded and end the episode; an answer without calls ends it too."""

    def __init__(self, task: PickTask):
        self.task = task
        self.done, self.done_reason, self.calls = True, None, []

    def reset(self):
        self.done, self.done_reason, self.calls = False, None, []
        return [{"role": "user", "content": self.task.prompt}], list(TOOLS)

    def step(self, tool_calls):
        self.calls = [c.get("name") for c in tool_calls]
        self.done, self.done_reason = True, "completed"
        return ["ok"] * len(tool_calls)

    def end_turn(self):
        self.done, self.done_reason = True, "completed"
        return None

    def reward(self) -> float:
        return float(self.calls == ["yes"])

    def official_verdict(self) -> dict:
        return {"valid": self.calls == ["yes"]}

    def trace(self) -> dict:
        return {"calls": list(self.calls)}


def _tasks(data_config, split: str) -> list[PickTask]:
    """8 train and 4 test tasks, differing only in their prompt."""
    if split == "all":
        return _tasks(data_config, "train") + _tasks(data_config, "test")
    return [PickTask(f"pick_{split}_{i}", "pick", f"Pick {i}.") for i in range({"train": 8, "test": 4}[split])]


def _expert(task: PickTask) -> list:
    return [[[{"name": "yes", "arguments": {}}]]]


PICK = sources.register(
    sources.TaskSource("pick", tasks=_tasks, make_env=lambda task, env_config=None: PickEnv(task), expert=_expert),
    override=True,
)
SOURCE = "tests.helpers.pick_source:pick"


def _call(name: str) -> dict:
    return {"type": "function", "function": {"name": name, "arguments": {}}}


def chats() -> list[dict]:
    """Every task answered both ways: the tokenizer's corpus (so the prompt and the call tokenise compactly)."""
    return [
        {
            "tools": TOOLS,
            "messages": [
                {"role": "user", "content": t.prompt},
                {"role": "assistant", "content": "", "tool_calls": [_call(name)]},
            ],
        }
        for t in _tasks(None, "all")
        for name in ("yes", "no")
    ]


def sft_batch(tokenizer, p_yes: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tokens [B, L], token mask [B, L], loss weights [B, L - 1]): every train task under each reward goal, answered
    `yes` (weight p_yes) and `no` (weight 1 - p_yes); the weights sit on the answer's tokens (shifted as targets)."""
    from rcgrpo_jax import chat
    from rcgrpo_jax.models import reward_tokens
    from rcgrpo_jax.rollout.engine import with_reward_goal

    parser, stop = chat.get_parser(chat.family_for("qwen2")), chat.end_of_turn_ids(tokenizer)[0]
    rows = []
    for task in _tasks(None, "train"):
        messages, tools = PickEnv(task).reset()
        for goal in reward_tokens.REWARD_TOKENS:
            prompt = chat.render_prompt(tokenizer, with_reward_goal(messages, goal), tools)
            for name, weight in (("yes", p_yes), ("no", 1.0 - p_yes)):
                answer = list(tokenizer(parser.format([{"name": name, "arguments": {}}]))["input_ids"]) + [stop]
                rows.append((prompt + answer, len(prompt), weight))
    length = max(len(r[0]) for r in rows)
    tokens = np.zeros((len(rows), length), np.int32)
    mask = np.zeros((len(rows), length), bool)
    weights = np.zeros((len(rows), length - 1), np.float32)
    for i, (seq, start, weight) in enumerate(rows):
        tokens[i, : len(seq)], mask[i, : len(seq)] = seq, True
        weights[i, start - 1 : len(seq) - 1] = weight  # target t + 1 sits in column t
    return tokens, mask, weights


def build_policy(path: str, *, p_yes: float, sft_steps: int = 300, lr: float = 2e-2) -> str:
    """The test's starting policy as an HF checkpoint at `path` (module docstring); returns `path`."""
    import jax
    import jax.numpy as jnp
    import optax
    from transformers import AutoTokenizer

    from rcgrpo_jax import models
    from rcgrpo_jax.models.tiny import build_tiny_checkpoint
    from rcgrpo_jax.train import model_prep, rl_step

    base = build_tiny_checkpoint(
        f"{path}_base",
        hidden_size=32,
        intermediate_size=64,
        num_layers=1,
        num_heads=2,
        num_kv_heads=1,
        corpus=[],
        chats=chats(),
        tools_format="signatures",
    )
    config, params = models.load_hf(base, dtype="float32")
    config, params, tokenizer, _ = models.add_reward_tokens(config, params, AutoTokenizer.from_pretrained(base))
    tokens, mask, weights = sft_batch(tokenizer, p_yes)
    tx = optax.adam(lr)

    def loss(p):
        logp, _ = rl_step.sequence_logprobs(config, p, tokens, mask, config.vocab_size)
        return -jnp.sum(logp * weights) / jnp.sum(weights)

    @jax.jit
    def update(p, opt):
        grads = jax.grad(loss)(p)
        updates, opt = tx.update(grads, opt, p)
        return optax.apply_updates(p, updates), opt

    opt = tx.init(params)
    for _ in range(sft_steps):
        params, opt = update(params, opt)
    model_prep.export_hf(config, params, tokenizer, path)
    return path
