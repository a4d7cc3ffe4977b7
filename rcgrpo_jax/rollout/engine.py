"""The batched multi-turn rollout driver: policy (device) <-> tool environments (host).

Each row of the batch is one episode (task x reward token x rollout index). Per round, every live
episode that holds a decode row takes one assistant step together (with continuous batching, see
`policies.ModelPolicy(rows=...)`, the others wait for a row to free up): the policy supplies its tokens (sampled by the model, or
scripted), the host decodes them to text, parses tool calls (and a reasoning block) with the family
parser, and either calls `env.step` (tool results) or, when the step has no call, `env.end_turn` (next
user message and any released tools). Sampled tokens are never re-tokenised: they enter the training
data exactly as sampled.

What the environment adds reaches the policy in one of two render modes (`RolloutConfig.render_mode`,
see `rcgrpo_jax.chat.modes`):

- ``append``: the template renders the new messages as a delta, appended to the token context and the
  policy's KV cache (`Policy.extend`); the episode is one training sample.
- ``rerender``: the whole conversation is rendered again with the generation prompt, as BFCL's
  handlers do, and the policy's row becomes that context (`Policy.replace`: the KV cache of the
  unchanged prefix is kept). Each step is one training sample: its context, then exactly the tokens
  sampled in it (`Episode.samples()`).
- ``auto`` (default): the render check (`chat.render_mode_for`) on the batch's first episode picks one
  for the batch: ``rerender`` for templates that rewrite the past (Qwen3), ``append`` otherwise.

A template that cannot render the conversation (it raises, e.g. on a message form it refuses) ends the
episode with `episode.RENDER_ERROR`, its message in `Episode.env_reason`; the batch goes on.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Protocol, Sequence

import numpy as np

from rcgrpo_jax import chat
from rcgrpo_jax.data import datasets
from rcgrpo_jax.rollout import episode as ep_mod
from rcgrpo_jax.rollout.episode import Episode


@dataclasses.dataclass(frozen=True)
class RolloutConfig:
    max_context: int = 8192  # tokens per episode; past it the episode ends, recorded as truncated
    max_step_tokens: int = 256  # decode budget of one assistant step
    # Our own cap on tool steps per turn; None leaves it to the environment (BFCLEnv force-terminates
    # past 20 steps, as BFCL does, which its verdict records).
    max_steps_per_turn: int | None = None
    # auto | append | rerender (module docstring). auto: the render check at the start of each batch.
    render_mode: str = chat.AUTO
    # Passed to the chat template as enable_thinking (Qwen3: False = an empty think block in the
    # generation prompt, no reasoning); None = the template's default (Qwen3: thinking on).
    thinking: bool | None = None

    def __post_init__(self):
        if self.render_mode not in chat.RENDER_MODES:
            raise ValueError(f"RolloutConfig.render_mode must be one of {chat.RENDER_MODES}, got {self.render_mode!r}")
        if self.thinking not in (None, True, False):
            raise ValueError(f"RolloutConfig.thinking must be None, True or False, got {self.thinking!r}")


@dataclasses.dataclass
class StepSample:
    tokens: list[int]
    logprobs: np.ndarray
    stopped: bool  # ended on an end-of-turn token (else the step budget cut it)


class Policy(Protocol):
    """Supplies each assistant step's tokens; rows are episode indices in the batch.

    `extend` appends tokens to rows' contexts (append mode); `replace` sets rows' whole contexts
    (rerender mode: a policy with a cache keeps what it can of the unchanged prefix).
    `act` may answer None for an episode it has not given a decode row yet (continuous batching: it
    waits for a free row, `ModelPolicy(rows=...)`, or is still decoding its step); the episode takes no
    step and is asked again next round. The policy must make progress over all of its rows (a round may
    step none of this process's episodes while another process's run: `rollout.distributed`);
    `rollout.scheduler.RowScheduler` guarantees it (a group never needs more rows than the batch has).
    """

    def start(self, prompts: Sequence[Sequence[int]], groups: Sequence[int]) -> None: ...

    def act(self, rows: Sequence[int], budgets: Sequence[int]) -> list[StepSample | None]: ...

    def extend(self, rows: Sequence[int], deltas: Sequence[Sequence[int]]) -> None: ...

    def replace(self, rows: Sequence[int], contexts: Sequence[Sequence[int]]) -> None: ...

    def finish(self, rows: Sequence[int]) -> None: ...


@dataclasses.dataclass(frozen=True)
class EpisodeSpec:
    env: Any  # rcgrpo_jax.envs.Environment
    task_id: str
    group: int = 0
    rollout_index: int = 0
    reward_token: str | None = None


def with_reward_goal(messages: Sequence[dict], token: str | None) -> list[dict]:
    """The first user message conditioned on `token`, exactly as in the RCTP-FT data
    (`datasets.add_reward_goal`); a copy of `messages` when `token` is None."""
    if token is None:
        return [dict(m) for m in messages]
    if token not in (datasets.HIGH_REWARD_TOKEN, datasets.LOW_REWARD_TOKEN):
        raise ValueError(f"unknown reward token {token!r}")
    return datasets.add_reward_goal(messages, high=token == datasets.HIGH_REWARD_TOKEN)


def _assistant_message(parsed: chat.ParsedTurn) -> dict:
    msg: dict[str, Any] = {"role": "assistant", "content": parsed.content}
    if parsed.reasoning:
        msg["reasoning_content"] = parsed.reasoning
    if parsed.calls:
        msg["tool_calls"] = [
            {"type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}} for c in parsed.calls
        ]
    return msg


class _Clock:
    def __init__(self):
        self.t = {"policy": 0.0, "env": 0.0, "chat": 0.0}

    def add(self, key: str, t0: float) -> float:
        now = time.perf_counter()
        self.t[key] += now - t0
        return now


def _render_error(e: Episode, where: str, err: Exception) -> str:
    e.env_reason = f"{where}: {type(err).__name__}: {err}"[:500]
    return ep_mod.RENDER_ERROR


def step_budget(length: int, *, max_step_tokens: int, max_context: int) -> int:
    """The decode budget the engine gives an episode holding `length` tokens: min(max_step_tokens,
    max_context - length - 1) (room left for one more token of context; <= 0 when there is none). Pure."""
    return min(int(max_step_tokens), int(max_context) - int(length) - 1)


def cut_step_tokens(stopped: bool) -> int:
    """Tokens the engine puts before a step's delta to close it: 1 (its end-of-turn token, context, not
    sampled) for a step its budget cut (no stop token), 0 for one that stopped. Pure."""
    return 0 if stopped else 1


def delta_fits(length: int, delta: int, max_context: int) -> bool:
    """Whether an episode holding `length` tokens may take a delta of `delta` tokens (the cut step's closing
    token included) and go on: length + delta + 1 <= max_context (room for one more sampled token); else the
    episode ends `MAX_CONTEXT`. Pure."""
    return int(length) + int(delta) + 1 <= int(max_context)


def run_episodes(
    specs: Sequence[EpisodeSpec],
    policy: Policy,
    tokenizer,
    parser: chat.ToolCallParser,
    config: RolloutConfig,
) -> tuple[list[Episode], dict[str, float]]:
    """Run every episode to its end; returns the records and a time split (policy / env / chat seconds)."""
    clock = _Clock()
    eot = chat.end_of_turn_ids(tokenizer)
    rendered: dict[int, chat.RenderedPrompt] = {}  # rerender: each episode's last rendering, reused in part
    episodes, prompts, live, mode = _open_episodes(specs, tokenizer, config, clock, rendered)
    t0 = time.perf_counter()
    if mode == chat.RERENDER and live and not callable(getattr(policy, "replace", None)):
        raise TypeError(
            f"render mode 'rerender' needs a policy with replace(rows, contexts); {type(policy).__name__} has none"
        )
    policy.start(prompts, [s.group for s in specs])
    t0 = clock.add("policy", t0)
    if len(live) < len(specs):
        policy.finish([i for i in range(len(specs)) if i not in set(live)])

    while live:
        budgets = [
            step_budget(len(episodes[i].tokens), max_step_tokens=config.max_step_tokens, max_context=config.max_context)
            for i in live
        ]
        samples = policy.act(live, budgets)
        t0 = clock.add("policy", t0)
        rows, tokens, ended, waiting = [], [], [], []
        for i, sample in zip(live, samples):
            if sample is None:  # no decode row yet: asked again next round
                waiting.append(i)
                continue
            e, spec = episodes[i], specs[i]
            toks, reason = _advance(e, spec.env, sample, tokenizer, parser, eot, config, clock, rendered, i)
            if reason is None:
                rows.append(i)
                tokens.append(toks)
            else:
                e.finish(reason)
                ended.append(i)
        t0 = time.perf_counter()
        if ended:
            policy.finish(ended)
        if rows and mode == chat.RERENDER:
            policy.replace(rows, tokens)
        elif rows:
            policy.extend(rows, tokens)
        t0 = clock.add("policy", t0)
        live = sorted(rows + waiting)

    _score(episodes, specs)
    clock.add("env", t0)
    return episodes, dict(clock.t)


def _open_episodes(specs: Sequence[EpisodeSpec], tokenizer, config: RolloutConfig, clock: _Clock, rendered: dict):
    """Reset each spec's environment and render its first prompt: (episodes, prompts, live, render mode).
    An episode whose prompt the template refuses or that fills the context ends here (its prompt empty, never
    prefilled); `live` lists the others. The render mode is the config's, or (auto) the one the batch's first
    episode needs; in rerender mode `rendered[i]` keeps episode i's rendering."""
    episodes, prompts, live = [], [], []
    mode = None if config.render_mode == chat.AUTO else config.render_mode
    t0 = time.perf_counter()
    for i, spec in enumerate(specs):
        e = Episode(spec.task_id, spec.group, spec.rollout_index, spec.reward_token)
        episodes.append(e)
        messages, tools = spec.env.reset()
        t0 = clock.add("env", t0)
        e.messages, e.tools = with_reward_goal(messages, spec.reward_token), list(tools)
        if mode is None:  # the render check, on the batch's first episode
            mode = chat.render_mode_for(tokenizer, e.messages, e.tools, thinking=config.thinking)
        e.render_mode = mode
        e.turn_starts.append(0)
        try:
            first = chat.render_prompt_reusing(tokenizer, e.messages, e.tools, thinking=config.thinking)
        except Exception as err:  # noqa: BLE001 - a template that refuses this conversation ends only it
            e.finish(_render_error(e, "render_prompt", err))
            prompts.append([])
            t0 = clock.add("chat", t0)
            continue
        prompt = list(first.ids)
        if mode == chat.RERENDER:
            rendered[i] = first
        e.add_context(prompt)
        e.prompt_len = len(prompt)
        if len(prompt) >= config.max_context:
            e.finish(ep_mod.MAX_CONTEXT)
            prompts.append([])  # never prefilled
        else:
            prompts.append(prompt)
            live.append(i)
        t0 = clock.add("chat", t0)
    return episodes, prompts, live, mode


def _score(episodes: Sequence[Episode], specs: Sequence[EpisodeSpec]) -> None:
    """Each episode's reward and official verdict from its environment (a scorer that raises: reward 0 and
    the error as the verdict)."""
    for e, spec in zip(episodes, specs):
        try:
            e.reward = float(spec.env.reward())
            e.verdict = dict(spec.env.official_verdict())
        except Exception as err:  # noqa: BLE001 - a broken scorer must not lose the batch
            e.reward, e.verdict = 0.0, {"error": f"{type(err).__name__}: {err}"}


def _advance(
    e: Episode, env, sample: StepSample, tokenizer, parser, eot, config: RolloutConfig, clock: _Clock, rendered, row
):
    """Record one assistant step and the environment's answer; returns (tokens for the policy, None) or
    (None, reason). The tokens are the delta to append (append mode) or the new context (rerender)."""
    t0 = time.perf_counter()
    e.add_sampled(sample.tokens, sample.logprobs)
    e.steps += 1
    body = sample.tokens[:-1] if sample.stopped else sample.tokens
    e.step_truncations += not sample.stopped
    text = tokenizer.decode(body, skip_special_tokens=False)
    parsed = parser.parse(text)
    e.messages.append(_assistant_message(parsed))
    e.parse_errors += len(parsed.errors)
    t0 = clock.add("chat", t0)

    new_messages = []
    if parsed.calls or parsed.errors:
        e.tool_calls += len(parsed.calls)
        e.steps_in_turn += 1
        results = env.step(parsed.calls) if parsed.calls else []
        new_messages = [{"role": "tool", "name": c["name"], "content": str(r)} for c, r in zip(parsed.calls, results)]
        new_messages += [{"role": "tool", "name": "error", "content": f"Error: {err}"} for err in parsed.errors]
        if config.max_steps_per_turn is not None and e.steps_in_turn > config.max_steps_per_turn:
            t0 = clock.add("env", t0)
            return None, ep_mod.STEP_LIMIT
    if not new_messages:
        nxt = env.end_turn()
        if nxt is None:
            clock.add("env", t0)
            return None, ep_mod.COMPLETED
        user_messages, tools = nxt
        e.turn += 1
        e.steps_in_turn = 0
        # e.tools stays the first turn's list: the template renders it once at the top, and the
        # env's release message carries the docs of released functions (see bfcl.release_message).
        new_messages = list(user_messages)
    if getattr(env, "done", False):
        e.env_reason = getattr(env, "done_reason", None)
        clock.add("env", t0)
        return None, ep_mod.ENV_DONE
    t0 = clock.add("env", t0)
    new_turn = new_messages[0].get("role") != "tool"
    if e.render_mode == chat.RERENDER:
        return _rerender(e, new_messages, new_turn, tokenizer, config, clock, t0, rendered, row)

    try:
        delta = chat.render_delta(tokenizer, e.messages, new_messages, e.tools, thinking=config.thinking)
    except Exception as err:  # noqa: BLE001 - e.g. a template that cannot append; end cleanly
        clock.add("chat", t0)
        return None, _render_error(e, "render_delta", err)
    if new_turn:
        e.turn_starts.append(len(e.tokens))
    e.messages.extend(new_messages)
    clock.add("chat", t0)
    # A step cut by its budget is closed with an end-of-turn token of ours (context, not sampled).
    delta = [eot[0]] * cut_step_tokens(sample.stopped) + delta
    if not delta_fits(len(e.tokens), len(delta), config.max_context):
        return None, ep_mod.MAX_CONTEXT
    e.add_context(delta)
    return delta, None


def _rerender(e: Episode, new_messages, new_turn: bool, tokenizer, config, clock: _Clock, t0: float, rendered, row):
    """rerender mode: the whole conversation rendered again is the next step's context (a new sample)."""
    e.messages.extend(new_messages)
    try:
        again = chat.render_prompt_reusing(
            tokenizer, e.messages, e.tools, thinking=config.thinking, previous=rendered.get(row)
        )
        rendered[row], prompt = again, list(again.ids)
    except Exception as err:  # noqa: BLE001 - the template refuses the grown conversation
        clock.add("chat", t0)
        return None, _render_error(e, "render_prompt", err)
    clock.add("chat", t0)
    if len(prompt) + 1 > config.max_context:
        return None, ep_mod.MAX_CONTEXT
    if new_turn:
        e.turn_starts.append(e.steps)  # the index of the turn's first step, i.e. of its sample
    e.begin_sample(prompt)
    return prompt, None
