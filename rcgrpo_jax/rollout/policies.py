"""Policies the rollout engine drives: the model (sampler over a live KV cache) and scripted ones.

The engine asks a policy for each assistant step's tokens and tells it what was appended after
(`extend`, append mode) or what the row's whole context now is (`replace`, re-render mode); the model
policy keeps one `DecodeSession` row per live episode, so the KV cache survives across steps and
turns: only deltas are prefilled, and a re-rendered context keeps the cache of its longest prefix that
is unchanged (at least the shared prompt head: system, tools, first user message).

Continuous batching (`ModelPolicy(rows=R)`): the episodes of a batch stream through R decode rows
(`rollout.scheduler.RowScheduler` decides which group enters which free rows, when); a row whose episode
has ended is truncated to nothing and refilled with the next waiting group's prompt. `act` answers None
for an episode still waiting for a row; the engine asks again next round.

The scripted policy emits fixed assistant texts through
the tokenizer (the oracle: ground-truth calls formatted by the family parser), which proves the token
bookkeeping end to end without a trained model.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import jax
import numpy as np
from jax.sharding import Mesh

from rcgrpo_jax import sharding
from rcgrpo_jax.models import ModelConfig
from rcgrpo_jax.rollout.engine import StepSample
from rcgrpo_jax.rollout.scheduler import Admission, RowScheduler
from rcgrpo_jax.sampling import buckets, session_ops
from rcgrpo_jax.sampling.decode_loop import batch_multiple
from rcgrpo_jax.sampling.next_token import SamplingParams
from rcgrpo_jax.sampling.session import DecodeSession

SHRINK = "shrink"  # finished rows leave the batch (it is re-gathered into a smaller bucket)
KEEP = "keep"  # finished rows stay in the batch, skipped by the sampler but still computed


def capacity(max_context: int, max_step_tokens: int, prefill_chunk: int) -> int:
    """A `ModelPolicy` session's slots per row: the longest row + room for one more block (a row holds at most
    max_context real tokens, at its own length)."""
    return int(max_context) + max(int(prefill_chunk), buckets.length_bucket(int(max_step_tokens)))


def slice_width(slice_tokens: int, max_step_tokens: int) -> int:
    """A `ModelPolicy(slice_tokens=K)`'s decode tokens per call: min(K, max_step_tokens), 0 for K = 0 (whole
    steps). Pure."""
    return min(int(slice_tokens), int(max_step_tokens)) if slice_tokens else 0


def decode_budget(slice_tokens: int, max_step_tokens: int) -> int:
    """The `max_new_tokens` of a `ModelPolicy`'s session (the most one decode call samples per row, which its
    span keeps room for): buckets.length_bucket(slice_width(...) or max_step_tokens). Pure."""
    return buckets.length_bucket(slice_width(slice_tokens, max_step_tokens) or int(max_step_tokens))


def slice_budget(left: int, width: int) -> int:
    """Tokens a `ModelPolicy` decode call asks of a row with `left` tokens of its step's budget left, at
    `width` = slice_width(...) tokens per call: min(width, left), or left for whole steps (width 0). The
    session then clips it to [0, decode_budget(...)]. Pure."""
    return min(int(width), int(left)) if width else int(left)


def admission_calls(
    lengths: Sequence[int], admitted: Sequence[Admission], prompts: Sequence[Sequence[int]], cuts: Sequence[int]
) -> list[session_ops.Call]:
    """The session calls that fill free rows with the admitted groups, in order: truncate their rows to
    nothing; each group's shared prefix (its first episode's prompt up to cuts[k]) into its first row; that
    row copied to the group's other rows (a `Select` of as many rows, when some group has more than one);
    each episode's own suffix. `lengths`: the session's rows' lengths; prompts[i]: episode i's prompt. Pure
    (`ModelPolicy`'s admission, and the rollout planner's)."""
    keep, src = list(lengths), list(range(len(lengths)))
    prefix: list[Sequence[int]] = [()] * len(lengths)
    suffix: list[Sequence[int]] = [()] * len(lengths)
    for a, cut in zip(admitted, cuts):
        prefix[a.rows[0]] = prompts[a.episodes[0]][:cut]
        for i, r in zip(a.episodes, a.rows):
            keep[r], src[r], suffix[r] = 0, a.rows[0], prompts[i][cut:]
    calls: list[session_ops.Call] = [session_ops.Truncate(tuple(keep)), session_ops.Append(tuple(prefix), "prefix")]
    if src != list(range(len(lengths))):
        calls.append(session_ops.Select(tuple(src)))
    return calls + [session_ops.Append(tuple(suffix), "suffix")]


@dataclasses.dataclass(frozen=True)
class DecodeCall:
    """One `DecodeSession.decode` a `ModelPolicy(record_calls=True)` ran: the session's rows and span, the
    iterations its loop ran (the most tokens a row sampled), and, per row asked for tokens, (its length
    before the call, the tokens it sampled)."""

    rows: int
    span: int
    iterations: int
    sampled: tuple[tuple[int, int], ...]


def _common_prefix(seqs: Sequence[Sequence[int]]) -> int:
    first = seqs[0]
    n = min(len(s) for s in seqs)
    for s in seqs[1:]:
        k = 0
        while k < n and s[k] == first[k]:
            k += 1
        n = k
    return n


class ModelPolicy:
    """Samples assistant steps from a model; one cache row per episode.

    Prefix sharing: the episodes of one group (same task) share the longest common prefix of their
    prompts (system + tools + first user text up to the reward goal); it is prefilled once per group
    and its cache row broadcast, then each episode's own suffix is appended.

    Re-render mode (`replace`): each row's context is tracked on the host; a new context keeps the
    cache of its longest common prefix with the old one (at most all but its last token, so the row
    gets fresh logits) and only the rest is prefilled. `stats["reused_tokens"]` / `["replaced_tokens"]`
    count the tokens kept / prefilled by replaces.

    rows: None = one row per episode, all prefilled at `start` (the batch only shrinks as episodes end).
    An int R = continuous batching over R rows (rounded up to the batch-sharding multiple): groups are
    admitted whole into free rows (truncate them to 0, prefill the group's shared prefix into its first
    row, copy that row to the others with `select`, append each episode's own suffix), FIFO, whenever
    enough rows are free; `act` returns None for episodes still waiting. Once nothing waits, SHRINK
    gathers the remaining episodes into fewer rows as before. `stats["admissions"]` counts admission
    rounds, `stats["refills"]` the rows that were reused for a later episode.
    longest_first: admit groups longest prompt first (rows decoding together then have closer lengths,
    and the longest episodes do not start last).
    slice_tokens: 0 = a decode call runs until every row has finished its step. K > 0 = decode calls of
    at most K tokens: `act` returns as soon as one of the asked rows has finished its step (stop token or
    budget) and None for the rows still decoding theirs, which go on at the next `act`, after the finished
    rows got their environment's answer (rows no longer idle while the longest step of the round ends).
    record_calls: keep a `DecodeCall` per decode call in `calls` (what a planner or a test compares with).
    """

    def __init__(
        self,
        config: ModelConfig,
        params,
        *,
        stop_ids: Sequence[int],
        max_step_tokens: int,
        max_context: int,
        sampling: SamplingParams = SamplingParams(),
        prefill_chunk: int = 256,
        mesh: Mesh | None = None,
        rules: sharding.Rules = sharding.DECODE_RULES,
        rng: jax.Array | None = None,
        slot_mode: str = SHRINK,
        share_prefix: bool = True,
        rows: int | None = None,
        longest_first: bool = False,
        slice_tokens: int = 0,
        decode_attention: str = "auto",
        record_calls: bool = False,
    ):
        if slot_mode not in (SHRINK, KEEP):
            raise ValueError(f"slot_mode must be {SHRINK!r} or {KEEP!r}, got {slot_mode!r}")
        if rows is not None and int(rows) < 1:
            raise ValueError(f"rows must be None or >= 1, got {rows}")
        if int(slice_tokens) < 0:
            raise ValueError(f"slice_tokens must be >= 0, got {slice_tokens}")
        self.config, self.params, self.mesh, self.rules = config, params, mesh, rules
        self.stop_ids = tuple(stop_ids)
        self.max_step_tokens, self.max_context = max_step_tokens, max_context
        self.sampling, self.chunk, self.rng = sampling, prefill_chunk, rng
        self.slot_mode, self.share_prefix = slot_mode, share_prefix
        self.max_rows = None if rows is None else -(-int(rows) // batch_multiple(mesh)) * batch_multiple(mesh)
        self.longest_first = longest_first
        self.decode_attention = decode_attention  # auto | xla | ragged (sampling.decode_step)
        self.slice = slice_width(slice_tokens, max_step_tokens)
        self.partial: dict[int, tuple[list[int], list[np.ndarray], int]] = {}  # step in progress: toks, lps, left
        self.sched: RowScheduler | None = None  # continuous batching only
        self.prompts: list[list[int]] = []
        self.keys: list = []
        self.capacity = capacity(max_context, max_step_tokens, prefill_chunk)
        self.calls: list[DecodeCall] | None = [] if record_calls else None
        self.session: DecodeSession | None = None
        self.row_of: dict[int, int] = {}  # episode -> session row
        self.context: dict[int, list[int]] = {}  # episode -> the tokens its cache row holds
        self.stats = {
            "rows_computed": 0,
            "rows_live": 0,
            "shrinks": 0,
            "reused_tokens": 0,
            "replaced_tokens": 0,
            "admissions": 0,
            "refills": 0,
        }

    def _new_session(self, rows: int) -> DecodeSession:
        return DecodeSession(
            self.config,
            self.params,
            rows,
            self.capacity,
            sampling=self.sampling,
            max_new_tokens=decode_budget(self.slice, self.max_step_tokens),
            prefill_chunk=self.chunk,
            mesh=self.mesh,
            rules=self.rules,
            rng=self.rng,
            decode_attention=self.decode_attention,
        )

    def _rows(self, n: int) -> int:
        return buckets.batch_bucket(n, batch_multiple(self.mesh))

    def start(self, prompts: Sequence[Sequence[int]], groups: Sequence[int]) -> None:
        self.partial = {}
        if self.max_rows is not None:
            return self._start_streaming(prompts, groups)
        n = len(prompts)
        order = list(dict.fromkeys(groups)) if self.share_prefix else list(range(n))
        key = (lambda i: groups[i]) if self.share_prefix else (lambda i: i)
        members = {g: [i for i in range(n) if key(i) == g] for g in order}
        cut = {g: _common_prefix([prompts[i] for i in members[g]]) for g in order}
        # One row per group holding its shared prefix, then broadcast to one row per episode.
        self.session = self._new_session(self._rows(len(order)))
        self.session.append([prompts[members[g][0]][: cut[g]] for g in order])
        group_row = {g: r for r, g in enumerate(order)}
        src = [group_row[key(i)] for i in range(n)]
        src += [src[0]] * (self._rows(n) - n)  # padding rows: copies, never decoded
        self.session.select(src)
        self.session.append([prompts[i][cut[key(i)] :] for i in range(n)])
        self.row_of = {i: i for i in range(n)}
        self.context = {i: list(prompts[i]) for i in range(n)}

    def _start_streaming(self, prompts: Sequence[Sequence[int]], groups: Sequence[int]) -> None:
        """Continuous batching: remember the prompts; rows are filled at each `act` (`_admit`)."""
        n = len(prompts)
        self.prompts = [list(p) for p in prompts]
        self.keys = list(groups) if self.share_prefix else list(range(n))
        rows = min(self.max_rows, self._rows(n))
        priority = [-len(p) for p in self.prompts] if self.longest_first else None
        self.session = self._new_session(rows)
        m = self.session.row_multiple  # free rows striped over the row shards (`RowScheduler`)
        self.sched = RowScheduler(rows, self.keys, priority, shards=m if rows % m == 0 else 1)
        self.row_of, self.context = self.sched.row_of, {}
        self._used: set[int] = set()

    def _admit(self) -> None:
        """Fill free rows with waiting groups: truncate them to 0, prefill each group's shared prefix into
        its first row, copy that row to the group's other rows, append every episode's own suffix."""
        admitted = self.sched.admit()
        if not admitted:
            return
        cuts = [_common_prefix([self.prompts[i] for i in a.episodes]) for a in admitted]
        for a in admitted:
            for i, r in zip(a.episodes, a.rows):
                self.context[i] = list(self.prompts[i])
                self.stats["refills"] += r in self._used
                self._used.add(r)
        for call in admission_calls(self.session.lengths, admitted, self.prompts, cuts):
            self.session.perform(call)
        self.stats["admissions"] += 1

    def act(self, rows: Sequence[int], budgets: Sequence[int]) -> list[StepSample | None]:
        """Each row's next assistant step; None for an episode still waiting for a decode row."""
        if self.sched is not None:
            self._admit()
        running = [(i, b) for i, b in zip(rows, budgets) if i in self.row_of]
        if not self.slice:
            out = self._decode(dict(running))
            samples = {i: StepSample(*out[i]) for i, _ in running}
            return [samples.get(i) for i in rows]
        for i, b in running:  # a new step starts with the engine's budget; one in progress keeps its own
            self.partial.setdefault(i, ([], [], max(int(b), 0)))
        samples: dict[int, StepSample] = {}
        while running and not samples:
            out = self._decode({i: slice_budget(self.partial[i][2], self.slice) for i, _ in running})
            for i, _ in running:
                toks, lps, left = self.partial[i]
                t, lp, stopped = out[i]
                toks += t
                lps.append(lp)
                left -= len(t)
                self.partial[i] = (toks, lps, left)
                if stopped or left <= 0:
                    samples[i] = StepSample(toks, np.concatenate(lps).astype(np.float32), bool(stopped))
                    del self.partial[i]
        return [samples.get(i) for i in rows]

    def _decode(self, budgets: dict[int, int]) -> dict[int, tuple[list[int], np.ndarray, bool]]:
        """One decode call: up to budgets[i] tokens for episode i's row; what each sampled."""
        sess = self.session
        full = np.zeros((sess.rows,), np.int32)
        for i, b in budgets.items():
            full[self.row_of[i]] = max(int(b), 0)
        self.stats["rows_computed"] += sess.rows
        self.stats["rows_live"] += len(budgets)
        start = sess.lengths.copy()
        out = sess.decode(full, self.stop_ids)
        got = {i: out[self.row_of[i]] for i in budgets}
        if self.calls is not None and full.max(initial=0) > 0:
            sampled = tuple((int(start[self.row_of[i]]), len(got[i][0])) for i in budgets if full[self.row_of[i]] > 0)
            self.calls.append(DecodeCall(sess.rows, sess.span, max(n for _, n in sampled), sampled))
        for i, (t, _, _) in got.items():
            self.context[i].extend(t)
        return got

    def extend(self, rows: Sequence[int], deltas: Sequence[Sequence[int]]) -> None:
        full: list[Sequence[int]] = [()] * self.session.rows
        for i, d in zip(rows, deltas):
            full[self.row_of[i]] = d
            self.context[i].extend(d)
        self.session.append(full)

    def replace(self, rows: Sequence[int], contexts: Sequence[Sequence[int]]) -> None:
        """Row i's context becomes contexts[i]: keep the cache of the common prefix, prefill the rest."""
        keep = self.session.lengths.copy()
        suffix: list[Sequence[int]] = [()] * self.session.rows
        for i, ctx in zip(rows, contexts):
            ctx = list(ctx)
            if not ctx:
                raise ValueError(f"episode {i}: an empty context cannot be decoded from")
            k = min(_common_prefix([self.context[i], ctx]), len(ctx) - 1)
            r = self.row_of[i]
            keep[r], suffix[r] = k, ctx[k:]
            self.context[i] = ctx
            self.stats["reused_tokens"] += k
            self.stats["replaced_tokens"] += len(ctx) - k
        self.session.truncate(keep)
        self.session.append(suffix)

    def finish(self, rows: Sequence[int]) -> None:
        if self.sched is not None:
            return self._finish_streaming(rows)
        for i in rows:
            self.row_of.pop(i, None)
            self.context.pop(i, None)
        if self.slot_mode != SHRINK or not self.row_of:
            return
        want = self._rows(len(self.row_of))
        if want < self.session.rows:
            live = sorted(self.row_of)
            src = [self.row_of[i] for i in live]
            self.session.select(src + [src[0]] * (want - len(src)))
            self.row_of = {i: r for r, i in enumerate(live)}
            self.stats["shrinks"] += 1

    def _finish_streaming(self, rows: Sequence[int]) -> None:
        """Free the ended episodes' rows (refilled at the next act); with nothing left waiting, SHRINK
        gathers the running episodes into fewer rows."""
        self.sched.end(rows)
        for i in rows:
            self.context.pop(i, None)
            self.partial.pop(i, None)
        if self.slot_mode != SHRINK or self.sched.waiting or not self.sched.row_of:
            return
        want = self._rows(len(self.sched.row_of))
        if want < self.session.rows:
            self.session.select(self.sched.shrink(want))
            self.row_of = self.sched.row_of
            self._used = set(range(want))
            self.stats["shrinks"] += 1


class ScriptedPolicy:
    """Emits fixed assistant texts, in order, per episode: tokens = encode(text) + [end of turn].

    Its "sampled" tokens carry log-prob 0; they go through the same engine, tokenizer and parser
    as a model's.
    """

    def __init__(self, tokenizer, scripts: Sequence[Sequence[str]], eot_id: int):
        self.tokenizer, self.eot_id = tokenizer, eot_id
        self.scripts = [list(s) for s in scripts]
        self.cursor = [0] * len(scripts)

    def start(self, prompts, groups) -> None:
        self.cursor = [0] * len(self.scripts)

    def act(self, rows: Sequence[int], budgets: Sequence[int]) -> list[StepSample]:
        out = []
        for i, budget in zip(rows, budgets):
            script = self.scripts[i]
            text = script[self.cursor[i]] if self.cursor[i] < len(script) else ""
            self.cursor[i] += 1
            toks = list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) + [self.eot_id]
            stopped = len(toks) <= budget
            toks = toks[: max(budget, 0)]
            out.append(StepSample(toks, np.zeros((len(toks),), np.float32), stopped))
        return out

    def extend(self, rows, deltas) -> None:
        pass

    def replace(self, rows, contexts) -> None:
        pass

    def finish(self, rows) -> None:
        pass


FINAL_ANSWER = "Done."


def oracle_texts(script: Sequence[Sequence[Sequence[dict]]], parser, *, reasoning: str | None = None) -> list[str]:
    """Assistant texts that play a turn -> steps -> calls script: each step's calls formatted by the
    family parser, then a plain answer that ends the turn. `reasoning` (a string) puts a think block
    with that text before each (Hermes/Qwen3 only), as a thinking model writes it."""
    fmt = parser.format if reasoning is None else (lambda calls, content="": parser.format(calls, content, reasoning))
    texts = []
    for steps in script:
        texts.extend(fmt(calls) for calls in steps)
        texts.append(fmt([], FINAL_ANSWER))
    return texts
