"""Rollout planner: one RL step's decode work replayed over real BFCL episode lengths, with no model.

    python -m benchmarks.rollout_plan --config=configs/rc_grpo.py:qwen2_5_7b [--rows=160] [--slice=8]
        [--span=length|mult:K|ragged:K] [--tasks=N] [--mfu=0.4]   (AWPO presets: add --config.data.source=bfcl)

Lengths: each training task's expert episode through the real engine (`rollout.run_episodes`, scripted
oracle, the preset family's template and parser, a reward goal in the prompt), tokenized by a byte-level
BPE of the family's split rule trained offline on the experts' text; each stands for its G rollouts.
Replay (`replay_streaming`), RL step by step: the step's rollouts stream through the decode rows by the
real `rollout.scheduler.RowScheduler`, in decode calls of at most `--slice` tokens; each admission's session
calls come from `rollout.policies.admission_calls` and every session call's operations (spans, appends'
forwards, row copies) from `sampling.session_ops.operations`, the sequence a `DecodeSession` executes; the
engine's rules (`rollout.engine.step_budget`, cut steps) and `ModelPolicy`'s (`rollout.policies.slice_budget`)
likewise: none is restated here.
Cost model (`figures`): KV-read and row utilisation, decode iterations, prefill FLOP utilisation (real
FLOPs / FLOPs computed per forward, `Piece`) and an estimated rollout time per RL step on `--devices` GPUs
(each forward at its roofline: weights and KV bytes over `--hbm_tb_s`, FLOPs over peak x `--mfu`).

Prints one JSON line per design ("new": the `--span` rule; "new_whole_steps": no slices; "new_ragged": the
ragged decode kernel, what a GPU session runs; "sub_batch_prefill" / "all_rows_prefill": the prefill
designs before token packing), then a summary line: "new"'s figures at the top level, the rest under
"variants", the ragged design's as `ragged_*` with the issue's `goal` checked on it, and `prefill_bound`
(where the prefill FLOPs go, per kind of forward). Findings and history: docs/rollout_plan.md.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import os
import sys
import tempfile
import time
from typing import Callable, Sequence

import jax

from rcgrpo_jax import chat, hardware, models
from rcgrpo_jax.config_lib import common
from rcgrpo_jax.data import datasets, sources, trajectories
from rcgrpo_jax.envs import bfcl
from rcgrpo_jax.models import reward_tokens, tiny
from rcgrpo_jax.rollout import EpisodeSpec, RolloutConfig, ScriptedPolicy, engine, oracle_texts, policies, run_episodes
from rcgrpo_jax.rollout.scheduler import RowScheduler
from rcgrpo_jax.sampling import buckets, packed, packed_append, row_shards, session_ops

GOALS = {  # the goals for the rollout of one RL step on a GPU session
    "prefill_flop_utilisation": 0.8,
    "est_rollout_s_per_step": 180.0,
    "kv_read_utilisation": 0.7,
    "row_utilisation": 0.8,
}
DEFAULT_SLICE = 8  # decode tokens per call of the new design unless rl.rollout_slice says otherwise


@dataclasses.dataclass(frozen=True)
class EpisodeLengths:
    """Token lengths of one episode: prompt (`prefix` of it shared by the group), assistant steps,
    and the context appended after each step but the last (len(deltas) == len(steps) - 1)."""

    prompt: int
    steps: tuple[int, ...]
    deltas: tuple[int, ...]
    prefix: int = 0

    def __post_init__(self):
        if len(self.deltas) != max(len(self.steps) - 1, 0):
            raise ValueError(
                f"{len(self.steps)} steps need {max(len(self.steps) - 1, 0)} deltas, got {len(self.deltas)}"
            )
        if self.prompt < 1 or min(self.steps, default=1) < 1 or min(self.deltas, default=0) < 0:
            raise ValueError(f"lengths must be positive: {self}")

    @staticmethod
    def of(episode, prefix: int = 0) -> "EpisodeLengths":
        """From an append-mode `rollout.Episode` record (its sampled spans and what lies between them)."""
        spans = [(a, b) for _, a, b in episode.step_spans]
        steps = tuple(b - a for a, b in spans)
        deltas = tuple(spans[k + 1][0] - spans[k][1] for k in range(len(spans) - 1))
        return EpisodeLengths(episode.prompt_len, steps, deltas, prefix or episode.prompt_len)

    @property
    def total(self) -> int:
        return self.prompt + sum(self.steps) + sum(self.deltas)


@dataclasses.dataclass(frozen=True)
class Limits:
    """The rollout settings the bookkeeping depends on (`rl.*` of the config)."""

    max_context: int = 16384
    max_step_tokens: int = 512
    prefill_chunk: int = 512

    @property
    def capacity(self) -> int:  # a ModelPolicy session's
        return policies.capacity(self.max_context, self.max_step_tokens, self.prefill_chunk)


@dataclasses.dataclass(frozen=True)
class Piece:
    """One prefill/append forward: `rows` x `width` token slots computed, each query attending over `span`
    KV slots (dense), of which `real_rows` rows hold `real_tokens` real tokens whose causal contexts add up
    to `real_pairs` (query, key) pairs (a token at position p attends p + 1 keys)."""

    rows: int
    width: int
    span: int
    real_rows: int
    real_tokens: int
    real_pairs: int
    kind: str = ""  # prefix (a group's shared prompt, one row) | suffix (each rollout's own) | delta (after a step)
    tokens: int = 0  # token slots through the layers' matmuls, when not rows x width (a token-packed forward)
    pairs: int = 0  # (query, key) pairs its attention computes, when not rows x width x span
    read: int = 0  # KV slots it reads, when not rows x span (a packed forward reads only its own tokens' K/V)

    @property
    def computed_tokens(self) -> int:
        return self.tokens or self.rows * self.width

    @property
    def computed_pairs(self) -> int:
        return self.pairs or self.rows * self.width * self.span

    @property
    def slots_read(self) -> int:
        return self.read or self.rows * self.span


def packed_append_piece(
    fwd: packed_append.AppendForward, *, shards: int, rows: int, span: int, kind: str = "delta"
) -> Piece:
    """A `sampling.packed_append` forward (rows holding fwd.bases getting fwd.counts more): it computes
    m x Tl token slots through the matmuls and puts a bucket of its rows through the head; its attention is
    each row shard's own (query block, key block) pairs (`AppendForward.pairs`: each block of
    `packed_append.BLOCK` queries with the key blocks of its row up to its last query), the busiest shard's
    bucketed count P on every shard: m x P x BLOCK x key block pairs computed, m x P x key block slots read.
    `span`: the session's cache span (it sets the key block)."""
    w, bk = packed_append.BLOCK, packed_append.key_block(span)
    tokens = shards * fwd.per_shard(shards)
    p = fwd.pairs_per_shard(shards, rows, bk)
    real_pairs = sum(n * b + n * (n + 1) // 2 for n, b in zip(fwd.counts, fwd.bases))
    head = buckets.row_bucket(len(fwd.rows), rows, 1)
    return Piece(
        head, -(-tokens // head), span, len(fwd.rows), fwd.tokens, real_pairs, kind, tokens,
        shards * p * w * bk, shards * p * bk,
    )  # fmt: skip


def packed_piece(fwd: packed.PackedForward, *, shards: int, rows: int, kind: str = "prefix") -> Piece:
    """A `sampling.packed` forward (fresh rows getting fwd.counts tokens): it computes m x Tl token slots
    (`PackedForward.per_shard`), attends through each shard's (query block, key block) pairs
    (`PackedForward.pairs`: the causal blocks of each row, dealt over the shards back and forth), the busiest
    shard's bucketed count P on every shard (m x P x QUERY_BLOCK^2 pairs), reads no cache, and puts a bucket
    of its rows through the head."""
    qb = packed.QUERY_BLOCK
    n = shards * fwd.per_shard(shards)
    head = buckets.row_bucket(len(fwd.rows), rows, 1)
    real_pairs = sum(c * (c + 1) // 2 for c in fwd.counts)
    pairs = shards * fwd.pairs_per_shard(shards) * qb * qb
    return Piece(head, -(-n // head), n, len(fwd.rows), fwd.tokens, real_pairs, kind, n, pairs, n)


def call_pieces(
    ops: Sequence[tuple[session_ops.Operation, session_ops.State]],
    before: session_ops.State,
    *,
    shards: int,
    sub_rows: Callable[[list[int]], int],
    kind: str = "",
    span: int | None = None,
) -> list[Piece]:
    """The `Piece` of each forward among a session call's operations (`session_ops.operations` from the
    state `before`): a packed prefill or append (`packed_piece`, `packed_append_piece`, on `shards` row
    shards), or a row-block chunk computed over `sub_rows(the rows with tokens in it)` rows (the session's
    sub-batch; a session that computes every row passes a constant), attending over the session's span, or
    `span` when given (a design the session does not run)."""
    out = []
    for op, after in ops:
        if isinstance(op, session_ops.PackedPrefill):
            out.append(packed_piece(op.forward, shards=shards, rows=after.rows, kind=kind))
        elif isinstance(op, session_ops.PackedAppend):
            out.append(packed_append_piece(op.forward, shards=shards, rows=after.rows, span=after.span, kind=kind))
        elif isinstance(op, session_ops.AppendChunk):
            k = {r: n for r, n in enumerate(op.counts) if n}
            pairs = sum(n * before.lengths[r] + n * (n + 1) // 2 for r, n in k.items())
            sp = after.span if span is None else span
            out.append(Piece(sub_rows(sorted(k)), op.width, sp, len(k), sum(k.values()), pairs, kind))
        before = after
    return out


@dataclasses.dataclass
class Tally:
    """Sums over decode iterations and the forwards' log (the figures: docs/rollout_plan.md)."""

    decode_steps: int = 0
    slots_read: int = 0
    slots_useful: int = 0
    row_steps: int = 0
    live_row_steps: int = 0
    calls: int = 0
    prefill_calls: int = 0
    prefill_slots_read: int = 0
    max_rows: int = 0
    max_span: int = 0
    log: list = dataclasses.field(default_factory=list)  # a `policies.DecodeCall` per decode call (sampled sorted)
    decode_reads: list = dataclasses.field(default_factory=list)  # KV slots each decode call reads (as `log`)
    # One `Piece` per prefill/append forward: what it computes and what of it is real.
    prefill_log: list = dataclasses.field(default_factory=list)

    def add(self, other: "Tally") -> None:
        for f in dataclasses.fields(self):
            v = getattr(other, f.name)
            setattr(
                self, f.name, max(getattr(self, f.name), v) if f.name.startswith("max_") else getattr(self, f.name) + v
            )

    def decode_call(self, call: policies.DecodeCall, read: int) -> None:
        self.calls += 1
        self.decode_steps += call.iterations
        self.row_steps += call.iterations * call.rows
        self.slots_read += read
        self.max_rows, self.max_span = max(self.max_rows, call.rows), max(self.max_span, call.span)
        self.log.append(call)
        self.decode_reads.append(read)

    def prefill_piece(self, piece: "Piece") -> None:
        self.prefill_calls += 1
        self.prefill_slots_read += piece.slots_read
        self.prefill_log.append(piece)

    @property
    def kv_read_utilisation(self) -> float:
        return self.slots_useful / self.slots_read if self.slots_read else 0.0

    @property
    def row_utilisation(self) -> float:
        return self.live_row_steps / self.row_steps if self.row_steps else 0.0


# ------------------------------------------------------------------------------------------ rules


def span_rule(name: str) -> Callable[[int, int], int]:
    """rule(need, capacity): the span of a call whose rows need `need` slots. `length`: the session's
    (`buckets.span_bucket`); `mult:K` (a design the session does not run): the next multiple of K past
    `buckets.MIN_SPAN`, capped at the capacity. need > capacity is a bookkeeping error."""
    if name == "length":
        return buckets.span_bucket
    if not (name.startswith("mult:") and name[5:].isdigit() and int(name[5:]) > 0):
        raise ValueError(f"span rule must be 'length' or 'mult:K' (K > 0), got {name!r}")
    k = int(name[5:])

    def rule(need: int, capacity: int) -> int:
        buckets.span_bucket(need, capacity)  # raises past the capacity
        return min(capacity, -(-max(need, buckets.MIN_SPAN) // k) * k)

    return rule


def block_slots(base: int, n: int, block: int) -> int:
    """KV slots the ragged kernel reads for a row holding `base` tokens over its next n iterations:
    sum over t = 1..n of roundup(base + t, block) (closed form)."""

    def blocks_upto(m: int) -> int:  # sum over x = 1..m of ceil(x / block)
        q, r = divmod(m, block)
        return block * q * (q + 1) // 2 + r * (q + 1)

    return block * (blocks_upto(base + n) - blocks_upto(base))


# ------------------------------------------------------------------------------------------ replay


class _Episode:
    """An episode's progress through its steps."""

    def __init__(self, lengths: EpisodeLengths):
        self.lengths, self.k, self.length = lengths, 0, lengths.prompt

    def budget(self, limits: Limits) -> int:
        return engine.step_budget(self.length, max_step_tokens=limits.max_step_tokens, max_context=limits.max_context)

    def step(self, limits: Limits) -> int:
        """Tokens this step samples (the expert's, cut by the engine's `step_budget`)."""
        return max(min(self.lengths.steps[self.k], self.budget(limits)), 0)

    def advance(self, sampled: int, limits: Limits) -> int | None:
        """After sampling: the delta appended (the engine's `cut_step_tokens` for a cut step included), or
        None when the episode ends (last step, or not `engine.delta_fits`)."""
        self.length += sampled
        full = self.lengths.steps[self.k]
        if self.k + 1 >= len(self.lengths.steps):
            return None
        delta = self.lengths.deltas[self.k] + engine.cut_step_tokens(sampled >= full)
        if not engine.delta_fits(self.length, delta, limits.max_context):
            return None
        self.length += delta
        self.k += 1
        return delta


def replay_streaming(
    episodes: Sequence[EpisodeLengths],
    groups: Sequence[int],
    *,
    rows: int,
    limits: Limits,
    span: str = "length",
    row_bucket: Callable[[int], int] = buckets.batch_bucket,
    shrink: bool = True,
    slice_tokens: int = 0,
    longest_first: bool = False,
    prefill_rows: Callable[[list[int], int], int] | None = None,
    shards: int = 1,
    packed_prefill: bool = False,
) -> Tally:
    """One RL step's episodes through min(`rows`, row_bucket(episodes)) rows (as `ModelPolicy(rows=...)`),
    refilled by the real `RowScheduler`; row_bucket is the session's row rule (`buckets.batch_bucket` of
    the batch shards) and sizes the shrinks too.

    prefill_rows(live, rows): the rows a prefill/append forward computes when the rows `live` of the
      session's `rows` rows have tokens; default `row_shards.sub_batch_rows(live, rows, 1)` (the session's
      sub-batch off a mesh: row_bucket(len(live), rows, 1)); `plan` passes the batch-sharding size m (each
      of the m row shards computes as many rows as the one with the most live rows);
      `lambda live, rows: rows` = every row (the session before the sub-batch).
    shards: the row shards `RowScheduler` stripes free rows over (ModelPolicy passes the session's m).
    packed_prefill: appends token-packed over the `shards` row shards, as `DecodeSession` does on a mesh of
      m > 1: a group's prefix into a fresh row by `sampling.packed` (`packed_piece`), the other appends by
      `sampling.packed_append` (`packed_append_piece`); False = row sub-batches.

    slice_tokens: 0 = a decode call runs until every row has finished its step (`ModelPolicy(slice_tokens=0)`);
      K > 0 = at most K iterations per call: a row that finished its step gets its environment answer
      and delta before the next call while the others go on decoding theirs (`ModelPolicy(slice_tokens=K)`).
    longest_first: groups admitted longest prompt first (`ModelPolicy(longest_first=True)`).
    span: a `span_rule` name, or `ragged:K`: the ragged decode kernel with block_k K (each iteration, a row
      still generating reads roundup(its length, K) slots; the others none; docs/rollout_plan.md).
    """
    tally = Tally()
    page = int(span[7:]) if span.startswith("ragged:") and span[7:].isdigit() and int(span[7:]) > 0 else 0
    if span.startswith("ragged:") and not page:
        raise ValueError(f"span rule must be 'ragged:K' with K > 0, got {span!r}")
    rule = span_rule("length") if page else span_rule(span)
    priority = [-e.prompt for e in episodes] if longest_first else None
    sched = RowScheduler(min(rows, row_bucket(len(episodes))), groups, priority, shards=shards)
    eps: dict[int, _Episode] = {}
    left: dict[int, int] = {}  # running episode -> tokens of its current step still to sample
    done: dict[int, int] = {}  # running episode -> tokens of its current step sampled so far
    cap = limits.capacity
    sub = prefill_rows or (lambda live, r: row_shards.sub_batch_rows(live, r, 1))
    # The session: its calls' operations, each row's length and its span (`session_ops`), a freed row's
    # context kept until it is refilled. `mult:K` (not a session's rule) sizes each call's span from its
    # running rows alone.
    stateful = not span.startswith("mult:")
    max_new = policies.decode_budget(slice_tokens, limits.max_step_tokens)  # the session's max_new_tokens
    sizes = session_ops.Sizes(cap, max_new, limits.prefill_chunk, packed=packed_prefill)
    state = session_ops.State((0,) * sched.rows, buckets.span_bucket(0, cap))
    width = policies.slice_width(slice_tokens, limits.max_step_tokens)
    prompts = [range(e.prompt) for e in episodes]  # token ids do not matter, only how many

    def perform(call: session_ops.Call) -> list:
        """Run one session call: its operations, their forwards tallied, the state advanced."""
        nonlocal state
        ops = session_ops.operations(sizes, state, call)
        if isinstance(call, session_ops.Append):
            fixed = None  # mult:K: the span of the running rows' need and the appended rows'
            if not stateful:
                running = [eps[i].length + done.get(i, 0) for i in sched.row_of]
                fixed = rule(max(running + [b + n for b, n in zip(state.lengths, call.counts) if n]), cap)
            kw = dict(shards=shards, sub_rows=lambda live: sub(live, sched.rows), kind=call.kind, span=fixed)
            for piece in call_pieces(ops, state, **kw):
                tally.prefill_piece(piece)
        state = ops[-1][1] if ops else state
        return ops

    while sched.waiting or sched.row_of:
        admitted = sched.admit()
        for a in admitted:
            for i in a.episodes:
                eps[i] = _Episode(episodes[i])
        cuts = [episodes[a.episodes[0]].prefix for a in admitted]
        for call in policies.admission_calls(state.lengths, admitted, prompts, cuts) if admitted else []:
            perform(call)
        for i in sched.row_of:
            if i not in left:
                left[i], done[i] = eps[i].step(limits), 0
        # what ModelPolicy asks of each row (`slice_budget`); the session clips it (`DecodeRows`)
        budgets = [0] * sched.rows
        for i, r in sched.row_of.items():
            budgets[r] = policies.slice_budget(eps[i].budget(limits) - done[i], width)
        ops = perform(session_ops.Decode(tuple(budgets)))
        asked = ops[-1][0].budgets if ops else (0,) * sched.rows
        call = {i: min(left[i], asked[sched.row_of[i]]) for i in sched.row_of}
        iters = max(call.values(), default=0)
        if iters:
            if stateful:
                sp = state.span
            else:
                sp = rule(max(eps[i].length + done[i] + asked[sched.row_of[i]] for i in sched.row_of), cap)
            if page:  # per iteration, each generating row's own blocks (the kernel's kv_seq_len = length + 1)
                ends = [eps[i].length + done[i] + call[i] for i in call]
                read = sum(block_slots(eps[i].length + done[i], call[i], page) for i in call)
                sp = -(-max(ends) // page) * page
            else:
                read = iters * sched.rows * sp
            sampled = tuple(sorted((eps[i].length + done[i], n) for i, n in call.items() if n))
            tally.decode_call(policies.DecodeCall(sched.rows, sp, iters, sampled), read)
        grown = [0] * sched.rows
        for i, n in call.items():
            base = eps[i].length + done[i]
            grown[sched.row_of[i]] = n
            tally.live_row_steps += n
            tally.slots_useful += n * base + n * (n + 1) // 2  # sum over t < n of (base + t + 1)
            left[i] -= n
            done[i] += n
        state = state.advanced(grown)
        finished = [i for i in call if left[i] == 0]
        ended, appended = [], {}
        for i in finished:
            d = eps[i].advance(done.pop(i), limits)
            del left[i]
            if d is None:
                ended.append(i)
                del eps[i]
            else:
                appended[i] = d
        sched.end(ended)
        if shrink and not sched.waiting and sched.row_of and row_bucket(len(sched.row_of)) < sched.rows:
            perform(session_ops.Select(tuple(sched.shrink(row_bucket(len(sched.row_of))))))
        if appended:  # each stepped row's delta (tool output, next turn), after its step's tokens
            deltas = [range(0)] * sched.rows
            for i, d in appended.items():
                deltas[sched.row_of[i]] = range(d)
            perform(session_ops.Append(tuple(deltas), "delta"))
    return tally


# ------------------------------------------------------------------------------------------ data


def expert_lengths(tasks, tokenizer, parser, *, reward_token: str | None) -> tuple[list[EpisodeLengths], float]:
    """Each task's expert episode through the real engine (scripted oracle), as lengths (`prefix` is the
    prompt up to the reward token, what a group shares; the whole prompt without one), and the tokenizer's
    characters per token over every episode's text."""

    specs = [EpisodeSpec(bfcl.BFCLEnv(t), t.id, group=i, reward_token=reward_token) for i, t in enumerate(tasks)]
    texts = [oracle_texts(bfcl.ground_truth_script(t), parser) for t in tasks]
    policy = ScriptedPolicy(tokenizer, texts, chat.end_of_turn_ids(tokenizer)[0])
    config = RolloutConfig(max_context=10**7, max_step_tokens=10**6, render_mode=chat.APPEND)
    episodes, _ = run_episodes(specs, policy, tokenizer, parser, config)
    token_id = tokenizer.convert_tokens_to_ids(reward_token) if reward_token else None
    out, chars, tokens = [], 0, 0
    for e in episodes:
        if e.done_reason != "completed":
            raise RuntimeError(f"expert episode {e.task_id} ended {e.done_reason}: {e.env_reason}")
        prompt = e.tokens[: e.prompt_len]
        prefix = prompt.index(token_id) if token_id in prompt else e.prompt_len
        out.append(EpisodeLengths.of(e, prefix=prefix))
        chars += len(tokenizer.decode(e.tokens, skip_special_tokens=False))
        tokens += len(e.tokens)
    return out, chars / max(tokens, 1)


def mesh_sizes(mesh, devices: int) -> dict[str, int]:
    """The config's ('data', 'fsdp', 'tensor') sizes on `devices` devices (one axis may be -1: the rest)."""
    sizes = {a: int(mesh.get(a, 1)) for a in ("data", "fsdp", "tensor")}
    fixed = math.prod(v for v in sizes.values() if v != -1)
    return {a: (devices // fixed if v == -1 else v) for a, v in sizes.items()}


def build_tokenizer(tasks, arch: str, vocab: int, workdir: str):
    """The planner's tokenizer: `models.tiny`'s byte-level BPE trained on the rendered expert
    conversations of every 8th task, with the family's template (JSON tools) and the reward tokens."""
    import transformers

    chats = [trajectories.expert_trajectory(t) for t in tasks[::8]]
    tiny.build_tiny_tokenizer(workdir, arch=arch, corpus=[], tokenizer_vocab_size=vocab, chats=chats)
    tok = transformers.AutoTokenizer.from_pretrained(workdir)
    tok.add_special_tokens(
        {"additional_special_tokens": [reward_tokens.HIGH_REWARD_TOKEN, reward_tokens.LOW_REWARD_TOKEN]}
    )
    return tok


H200_BF16_DENSE_TFLOPS = hardware.H200.bf16_flops / 1e12  # H200 SXM bf16 dense peak per GPU (`hardware.H200`)
DEFAULT_MFU = 0.4  # the model FLOP utilisation a prefill forward is assumed to reach (gpu_check measures it)


def decode_bytes(preset: str) -> dict[str, int]:
    """The preset's published architecture (`config_lib.common.hf_architecture`, so its own family: Qwen2,
    LLaMA or Qwen3 with q/k norm and head_dim 128), in bf16: the bytes a decode iteration reads (the weights,
    all but the input embedding table, of which one row is gathered; one KV slot: K and V, all layers) and
    the FLOPs a forward computes (`forward_flops`: 2 x the layers' matmul parameters per token, the output
    head per row, and 4 x layers x heads x head_dim per (query, key) pair: q k^T and p v)."""
    cfg = models.ModelConfig.from_hf(common.hf_architecture(preset))
    params = models.abstract_params(cfg)
    count = lambda tree: sum(int(x.size) for x in jax.tree.leaves(tree))  # noqa: E731
    total = count(params)
    embed = 0 if cfg.tie_word_embeddings else int(params["embed"]["embedding"].size)
    return {
        "model_type": cfg.model_type,
        "params": total,
        "weight_bytes": 2 * (total - embed),
        "kv_bytes_per_slot": 2 * 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim,
        "layer_params": count(params["layers"]),  # every matmul weight of the decoder layers (and their norms)
        "head_params": cfg.vocab_size * cfg.hidden_size,  # the output projection (tied or not)
        "attn_flops_per_pair": 4 * cfg.num_layers * cfg.num_heads * cfg.head_dim,
    }


def forward_flops(sizes: dict, *, tokens: int, rows: int, pairs: int) -> int:
    """FLOPs of a forward over `tokens` token slots of `rows` rows (each row's last position through the
    output head, as the sampler's prefill) whose queries attend over `pairs` (query, key) pairs."""
    return 2 * sizes["layer_params"] * tokens + 2 * sizes["head_params"] * rows + sizes["attn_flops_per_pair"] * pairs


def prefill_figures(tally: Tally, sizes: dict) -> dict[str, float]:
    """FLOPs of every prefill/append forward: computed (rows x width slots, dense attention over the span) and
    real (the real tokens over their causal contexts, the head once per row with tokens)."""
    computed = real = tokens = real_tokens = 0
    for p in tally.prefill_log:
        computed += forward_flops(sizes, tokens=p.computed_tokens, rows=p.rows, pairs=p.computed_pairs)
        real += forward_flops(sizes, tokens=p.real_tokens, rows=p.real_rows, pairs=p.real_pairs)
        tokens += p.computed_tokens
        real_tokens += p.real_tokens
    return {"computed": computed, "real": real, "tokens": tokens, "real_tokens": real_tokens}


def prefill_bound(tally: Tally, sizes: dict) -> dict:
    """Where the prefill FLOPs go, per kind of forward (prefix / suffix / delta): its share of the FLOPs
    computed and its utilisation, split into the matmuls' (real tokens / token slots computed, the output
    head's rows included) and the attention's (real (query, key) pairs / pairs computed), with the attention's
    share of the FLOPs computed, and the utilisation with no padding row (each row-block forward over exactly
    its rows with tokens: the best any row bucketing reaches; a packed forward has no padding row, so its own):
    the arithmetic that bounds `prefill_flop_utilisation` for this design."""
    kinds: dict[str, list[Piece]] = collections.defaultdict(list)
    for p in tally.prefill_log:
        kinds[p.kind or "other"].append(p)
    kinds["all"] = list(tally.prefill_log)
    flops = lambda p, real=False: (  # noqa: E731
        forward_flops(sizes, tokens=p.real_tokens, rows=p.real_rows, pairs=p.real_pairs)
        if real
        else forward_flops(sizes, tokens=p.computed_tokens, rows=p.rows, pairs=p.computed_pairs)
    )
    total = sum(flops(p) for p in tally.prefill_log)
    out = {}
    for kind, ps in kinds.items():
        real, computed = sum(flops(p, True) for p in ps), sum(flops(p) for p in ps)
        no_pad_rows = sum(  # a row block over its real rows x width; a packed forward has no padding row to drop
            flops(p)
            if p.tokens
            else forward_flops(
                sizes, tokens=p.real_rows * p.width, rows=p.real_rows, pairs=p.real_rows * p.width * p.span
            )
            for p in ps
        )
        attn = sum(sizes["attn_flops_per_pair"] * p.computed_pairs for p in ps)
        attn_real = sum(sizes["attn_flops_per_pair"] * p.real_pairs for p in ps)
        out[kind] = {
            "flop_share": computed / total if total else 0.0,
            "utilisation": real / computed if computed else 0.0,
            "matmul_utilisation": (real - attn_real) / (computed - attn) if computed > attn else 0.0,
            "attention_utilisation": attn_real / attn if attn else 0.0,
            "attention_flop_share": attn / computed if computed else 0.0,
            "mean_real_rows_per_row": sum(p.real_rows * p.width for p in ps)
            / max(sum(p.rows * p.width for p in ps), 1),
            "utilisation_no_padding_rows": real / no_pad_rows if no_pad_rows else 0.0,
            "forwards": len(ps),
        }
    return out


def step_seconds(tally: Tally, sizes: dict, *, devices: int, tensor: int, bw: float, flops: float) -> dict:
    """Seconds of the tally's forwards on `devices` GPUs, each call at its roofline: max(its bytes / bw, its
    FLOPs / flops), bytes per device = the decode weights over the tensor shard (read once per decode
    iteration and once per prefill forward) + its share of the KV slots read; FLOPs per device = the call's
    FLOPs / devices. `flops` = peak x MFU per GPU (FLOP/s)."""
    w, kv = sizes["weight_bytes"] / tensor, sizes["kv_bytes_per_slot"] / devices
    decode = decode_compute = 0.0
    for c, read in zip(tally.log, tally.decode_reads):
        rows, iters = c.rows, c.iterations
        mem = (iters * w + read * kv) / bw
        f = forward_flops(sizes, tokens=iters * rows, rows=iters * rows, pairs=read)
        decode += max(mem, f / devices / flops)
        decode_compute += f / devices / flops
    prefill = prefill_compute = 0.0
    for p in tally.prefill_log:
        mem = (w + p.slots_read * kv) / bw
        f = forward_flops(sizes, tokens=p.computed_tokens, rows=p.rows, pairs=p.computed_pairs)
        prefill += max(mem, f / devices / flops)
        prefill_compute += f / devices / flops
    return {
        "decode_s": decode,
        "prefill_s": prefill,
        "decode_compute_s": decode_compute,
        "prefill_compute_s": prefill_compute,
    }


def figures(tally: Tally, *, steps: float, sizes: dict, devices: int, tensor: int, bw: float, flops: float):
    t = step_seconds(tally, sizes, devices=devices, tensor=tensor, bw=bw, flops=flops)
    pf = prefill_figures(tally, sizes)
    return {
        "kv_read_utilisation": tally.kv_read_utilisation,
        "row_utilisation": tally.row_utilisation,
        "prefill_flop_utilisation": pf["real"] / pf["computed"] if pf["computed"] else 0.0,
        "est_rollout_s_per_step": (t["decode_s"] + t["prefill_s"]) / steps,
        "est_decode_s_per_step": t["decode_s"] / steps,
        "est_prefill_s_per_step": t["prefill_s"] / steps,
        "prefill_pflop_per_step": pf["computed"] / 1e15 / steps,
        "prefill_real_pflop_per_step": pf["real"] / 1e15 / steps,
        "prefill_tokens_per_step": pf["tokens"] / steps,
        "prefill_real_tokens_per_step": pf["real_tokens"] / steps,
        "decode_steps": tally.decode_steps / steps,
        "decode_calls": tally.calls / steps,
        "prefill_calls": tally.prefill_calls / steps,
        "max_rows": tally.max_rows,
        "max_span": tally.max_span,
    }


@dataclasses.dataclass(frozen=True)
class Design:
    """A continuous-batching design to replay (`replay_streaming`'s knobs)."""

    rows: int
    span: str = "length"
    slice_tokens: int = 0
    longest_first: bool = False
    sub_batch: bool = True  # prefill/append forwards over the rows with tokens (bucketed), else every row
    packed_prefill: bool = False  # appends token-packed over the row shards (`sampling.packed`, `packed_append`)


def plan(
    episodes: Sequence[EpisodeLengths],
    designs: dict[str, Design],
    *,
    group: int,
    tasks_per_step: int,
    limits: Limits,
    batch_multiple: int,
) -> dict[str, Tally]:
    """Each of `designs` over `episodes` (one per task, each standing for `group` rollouts), RL step by
    step (`tasks_per_step` tasks each), on `batch_multiple` row shards."""
    out = {name: Tally() for name in designs}
    for s in range(0, len(episodes), tasks_per_step):
        tasks = episodes[s : s + tasks_per_step]
        eps = [e for e in tasks for _ in range(group)]
        groups = [k for k in range(len(tasks)) for _ in range(group)]
        for name, d in designs.items():
            out[name].add(
                replay_streaming(
                    eps,
                    groups,
                    rows=buckets.batch_bucket(d.rows, batch_multiple),
                    limits=limits,
                    span=d.span,
                    row_bucket=lambda n: buckets.batch_bucket(n, batch_multiple),
                    slice_tokens=d.slice_tokens,
                    longest_first=d.longest_first,
                    prefill_rows=(
                        (lambda live, r: row_shards.sub_batch_rows(live, r, batch_multiple))
                        if d.sub_batch
                        else (lambda live, r: r)
                    ),
                    shards=batch_multiple,
                    packed_prefill=d.packed_prefill,
                )
            )
    return out


def bfcl_tasks_of(config):
    """The config with `data.source=steps` (the AWPO presets: the user's step data) planned on the BFCL train
    split instead, said in one line on stderr: the planner replays BFCL expert episodes, and no data file is
    read."""
    if config.data.get("source") != "steps":
        return config
    import ml_collections

    c = ml_collections.ConfigDict(config.to_dict())
    c.data.source = "bfcl"
    print("rollout_plan: data.source=steps: planned on the BFCL train split (no data file is read)", file=sys.stderr)
    return c


def main(argv: Sequence[str] | None = None) -> dict:
    from absl import flags
    from ml_collections import config_flags

    fl = flags.FlagValues()
    config_flags.DEFINE_config_file("config", None, "an RL stage config file:preset", flag_values=fl)
    flags.DEFINE_integer(
        "rows", 0, "decode rows of the new design (0 = rl.rollout_rows, else rl.rollout_chunk)", flag_values=fl
    )
    flags.DEFINE_string("span", "length", "the new design's span rule: length | mult:K | ragged:K", flag_values=fl)
    flags.DEFINE_integer(
        "slice",
        -1,
        "decode tokens per call of the new design (0 = whole steps; -1 = rl.rollout_slice, else 8)",
        flag_values=fl,
    )
    flags.DEFINE_bool("longest_first", False, "admit groups longest prompt first", flag_values=fl)
    flags.DEFINE_integer("tasks", 0, "training tasks to replay (0 = all)", flag_values=fl)
    flags.DEFINE_integer("vocab", 8192, "BPE vocabulary of the planner's tokenizer", flag_values=fl)
    flags.DEFINE_integer("devices", 8, "GPUs of the host", flag_values=fl)
    flags.DEFINE_float(
        "hbm_tb_s", hardware.H200.hbm_bytes_s / 1e12, "HBM bandwidth per GPU, TB/s (H200 nominal)", flag_values=fl
    )
    flags.DEFINE_float(
        "peak_tflops", H200_BF16_DENSE_TFLOPS, "bf16 dense peak per GPU, TFLOP/s (H200 nominal)", flag_values=fl
    )
    flags.DEFINE_float(
        "mfu",
        DEFAULT_MFU,
        "model FLOP utilisation of a forward (the figure gpu_check measures; until then an assumption)",
        flag_values=fl,
    )
    fl(list(argv) if argv is not None else sys.argv)
    config = fl.config
    if config is None:
        raise ValueError("--config=configs/<rl stage>.py:<preset> is required")
    config = bfcl_tasks_of(config)
    rl = config.rl
    t0 = time.perf_counter()

    tasks = sources.tasks(config.data, "train")
    tasks = tasks[: fl.tasks] if fl.tasks else tasks
    if config.preset == "tiny":
        raise ValueError("the planner sizes a production preset (qwen2_5_7b, llama3_1_8b, qwen3_8b, ...), not tiny")
    sizes = decode_bytes(config.preset)
    arch = sizes["model_type"]  # the preset's own family (qwen2 | llama | qwen3): tokenizer, template, parser
    with tempfile.TemporaryDirectory() as d:
        tok = build_tokenizer(tasks, arch, fl.vocab, os.path.join(d, "tok"))
    parser = chat.get_parser(chat.family_for(arch))
    token = None if rl.reward_conditioning == "none" else datasets.HIGH_REWARD_TOKEN
    episodes, chars_per_token = expert_lengths(tasks, tok, parser, reward_token=token)
    t_data = time.perf_counter() - t0

    group = int(rl.group_size)
    tasks_per_step = max(int(config.train.batch_size) // group, 1)
    limits = Limits(int(rl.max_context), int(rl.max_step_tokens), int(rl.prefill_chunk))
    chunk = int(rl.rollout_chunk)
    rows = fl.rows or int(rl.get("rollout_rows", 0) or 0) or chunk or tasks_per_step * group
    axes = mesh_sizes(config.mesh, fl.devices)
    tensor, batch_shards = axes["tensor"], axes["data"] * axes["fsdp"]
    rows = buckets.batch_bucket(rows, batch_shards)
    slice_tokens = fl.slice if fl.slice >= 0 else int(rl.get("rollout_slice", DEFAULT_SLICE))
    pk = batch_shards > 1  # the session packs fresh rows on a mesh of several row shards (`DecodeSession`)
    designs = {"new": Design(rows, fl.span, slice_tokens, fl.longest_first, packed_prefill=pk)}
    if slice_tokens:
        designs["new_whole_steps"] = Design(rows, fl.span, 0, fl.longest_first, packed_prefill=pk)
    if not fl.span.startswith("ragged:"):
        designs["new_ragged"] = Design(rows, "ragged:128", slice_tokens, fl.longest_first, packed_prefill=pk)
    gpu = "new" if fl.span.startswith("ragged:") else "new_ragged"
    # the session before the packed prefill (every append a row sub-batch), and before the sub-batch
    designs["sub_batch_prefill"] = dataclasses.replace(designs[gpu], packed_prefill=False)
    designs["all_rows_prefill"] = dataclasses.replace(designs[gpu], sub_batch=False, packed_prefill=False)
    tallies = plan(
        episodes,
        designs,
        group=group,
        tasks_per_step=tasks_per_step,
        limits=limits,
        batch_multiple=batch_shards,
    )
    steps = len(episodes) / tasks_per_step
    if not 0 < fl.mfu <= 1:
        raise ValueError(f"--mfu must be in (0, 1], got {fl.mfu}")
    flops = fl.peak_tflops * 1e12 * fl.mfu
    kw = dict(steps=steps, sizes=sizes, devices=fl.devices, tensor=tensor, bw=fl.hbm_tb_s * 1e12, flops=flops)
    figs = {name: figures(t, **kw) for name, t in tallies.items()}
    for name, f in figs.items():  # one line per design, then the summary
        print(json.dumps({"design": name, **rounded(f)}), flush=True)
    new = figs["new"]
    ragged = figs[gpu]
    goals = {  # checked on the ragged design: what a session on a GPU runs (decode_attention "auto")
        "prefill_flop_utilisation": (">=", GOALS["prefill_flop_utilisation"]),
        "est_rollout_s_per_step": ("<=", GOALS["est_rollout_s_per_step"]),
        "kv_read_utilisation": (">=", GOALS["kv_read_utilisation"]),
        "row_utilisation": (">=", GOALS["row_utilisation"]),
    }
    met = {k: (ragged[k] >= bound if op == ">=" else ragged[k] <= bound) for k, (op, bound) in goals.items()}
    row = {
        **new,
        # The ragged decode attention: what a session on a GPU runs ("auto"), so the goal is checked on it.
        "ragged_kv_read_utilisation": ragged["kv_read_utilisation"],
        "ragged_row_utilisation": ragged["row_utilisation"],
        "ragged_est_rollout_s_per_step": ragged["est_rollout_s_per_step"],
        "ragged_prefill_flop_utilisation": ragged["prefill_flop_utilisation"],
        "goal": {
            "checked_on": gpu,
            **{f"{k}_{'min' if op == '>=' else 'max'}": bound for k, (op, bound) in goals.items()},
            "goals_met": met,
            "met": all(met.values()),
            "mfu": fl.mfu,
            "peak_tflops": fl.peak_tflops,
        },
        "prefill_bound": prefill_bound(tallies[gpu], sizes),
        "variants": {k: v for k, v in figs.items() if k != "new"},
        "rows": rows,
        "span_rule": fl.span,
        "slice_tokens": slice_tokens,
        "longest_first": fl.longest_first,
        "tasks": len(episodes),
        "rollouts_per_step": tasks_per_step * group,
        "rl_steps_replayed": steps,
        "mean_episode_tokens": sum(e.total for e in episodes) / len(episodes),
        "max_episode_tokens": max(e.total for e in episodes),
        "mean_step_tokens": sum(sum(e.steps) for e in episodes) / sum(len(e.steps) for e in episodes),
        "tokenizer": f"tiny byte-level BPE ({arch} split rule, vocab {len(tok)}), trained on the experts",
        "weight_gb": sizes["weight_bytes"] / 1e9,
        "kv_kb_per_token": sizes["kv_bytes_per_slot"] / 1e3,
        "chars_per_token": chars_per_token,
        "data_s": t_data,
        "wall_s": time.perf_counter() - t0,
    }
    print(json.dumps(rounded(row)), flush=True)
    return row


def rounded(x):
    """x with every float rounded to 4 places (the printed lines), dicts walked."""
    if isinstance(x, dict):
        return {k: rounded(v) for k, v in x.items()}
    return round(x, 4) if isinstance(x, float) else x


if __name__ == "__main__":
    from rcgrpo_jax.config_fields import ConfigError, InputError

    try:
        main()
    except (ConfigError, InputError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
