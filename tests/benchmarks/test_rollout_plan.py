"""The rollout planner: its replay on hand-computed cases, its decode calls against what a real
`ModelPolicy(record_calls=True)` + `DecodeSession` did where a freed row keeps the span (the session's own
operations: tests/sampling/test_session_ops.py), and the whole command on a few real BFCL training tasks
(figures in range, lengths that add up)."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from benchmarks import rollout_plan as rp
from rcgrpo_jax.rollout import EpisodeSpec
from rcgrpo_jax.rollout.episode import Episode
from rcgrpo_jax.sampling import session_ops
from tests.helpers.fake_env import AdderEnv

pytestmark = pytest.mark.slow  # the fast lane skips it (pytest.ini)

LIMITS = rp.Limits(max_context=1000, max_step_tokens=4, prefill_chunk=16)  # capacity 1016, spans >= 256
A = rp.EpisodeLengths(prompt=100, steps=(3, 1), deltas=(5,))
B = rp.EpisodeLengths(prompt=50, steps=(2,), deltas=())
SAME = lambda n: n  # noqa: E731 - rows exactly as many as needed


def test_streaming_replay_hand_computed():
    # One row, two single-episode groups: A's two steps (3 then 1 tokens) then B (2 tokens) in the freed row.
    # Every call reads 1 row x 256 slots per iteration; useful = each live row's context, this token included.
    t = rp.replay_streaming([A, B], [0, 1], rows=1, limits=LIMITS, span="mult:128", row_bucket=SAME)
    assert (t.decode_steps, t.calls, t.slots_read) == (6, 3, 6 * 256)
    assert t.slots_useful == (101 + 102 + 103) + (109) + (51 + 52)
    assert (t.row_steps, t.live_row_steps) == (6, 6) and t.row_utilisation == 1.0
    # Two rows, no refill needed: round 1 runs 3 iterations over both rows (B idles after 2), B ends and the
    # batch shrinks to one row for A's last step.
    t = rp.replay_streaming([A, B], [0, 1], rows=2, limits=LIMITS, span="mult:128", row_bucket=SAME)
    assert (t.decode_steps, t.slots_read, t.slots_useful) == (4, 3 * 2 * 256 + 256, 306 + 103 + 109)
    assert (t.row_steps, t.live_row_steps) == (7, 6)


def test_sliced_and_ragged_replay_hand_computed():
    # Slices of 2 tokens: A's first step (3) takes two calls; B (2) finishes in the first.
    t = rp.replay_streaming([A, B], [0, 1], rows=2, limits=LIMITS, span="mult:128", row_bucket=SAME, slice_tokens=2)
    assert (t.calls, t.decode_steps, t.row_steps, t.live_row_steps) == (3, 2 + 1 + 1, 2 * 2 + 1 + 1, 6)
    # ragged:64 (the Pallas kernel, block_k 64): each iteration a generating row reads roundup(its length, 64).
    # Call 1: A at 101, 102, 103 -> 128 each; B at 51, 52 -> 64 each, then done (reads nothing in iteration 3).
    # Call 2: A alone, after its 5-token delta: 109 -> 128.
    t = rp.replay_streaming([A, B], [0, 1], rows=2, limits=LIMITS, span="ragged:64", row_bucket=SAME)
    assert t.slots_read == 3 * 128 + 2 * 64 + 128
    assert t.slots_useful == (101 + 102 + 103) + (51 + 52) + 109
    assert rp.block_slots(100, 3, 64) == 3 * 128 and rp.block_slots(60, 6, 64) == 4 * 64 + 2 * 128


def test_refill_beats_whole_steps_on_row_utilisation():
    # Groups of 2 alternating between 1 and 6 steps of 4 tokens through 8 rows: slices of 2 tokens let a row
    # whose step ended take its next step (or a refill) while the others go on; the same tokens are sampled.
    short = rp.EpisodeLengths(prompt=40, steps=(4,), deltas=())
    long = rp.EpisodeLengths(prompt=40, steps=(4, 1, 4, 2, 4, 4), deltas=(3,) * 5)
    eps = [short, short, long, long] * 4
    groups = [k // 2 for k in range(len(eps))]
    kw = dict(rows=8, limits=LIMITS, row_bucket=lambda n: rp.buckets.batch_bucket(n, 4), shards=4)
    sliced = rp.replay_streaming(eps, groups, slice_tokens=1, **kw)
    whole = rp.replay_streaming(eps, groups, slice_tokens=0, **kw)
    assert sliced.live_row_steps == whole.live_row_steps == 8 * 4 + 8 * 19  # the same tokens sampled
    assert sliced.row_utilisation > whole.row_utilisation
    for t in (sliced, whole):
        assert 0 < t.kv_read_utilisation <= 1 and 0 < t.row_utilisation <= 1


def test_rules_and_lengths():
    assert rp.span_rule("length") is rp.buckets.span_bucket  # the session's rule, not a copy
    assert rp.Limits(1000, 4, 16).capacity == 1016 and rp.Limits().capacity == 16384 + 512
    assert rp.span_rule("length")(812, 16896) == 1024 and rp.span_rule("mult:128")(812, 16896) == 896
    assert rp.span_rule("length")(16000, 16896) == 16384 and rp.span_rule("mult:128")(10, 16896) == 256
    for bad in ("pow2", "mult:0", "mult:x"):
        with pytest.raises(ValueError, match="span rule"):
            rp.span_rule(bad)
    with pytest.raises(ValueError, match="capacity"):
        rp.span_rule("length")(20000, 16896)
    e = Episode("t", 0, 0, None, tokens=list(range(20)), prompt_len=8, step_spans=[(0, 8, 11), (0, 15, 20)])
    assert rp.EpisodeLengths.of(e, prefix=6) == rp.EpisodeLengths(8, (3, 5), (4,), 6)
    with pytest.raises(ValueError, match="deltas"):
        rp.EpisodeLengths(8, (3, 5), ())
    sizes = rp.decode_bytes("qwen2_5_7b")  # Qwen2.5-7B: 7.62e9 params, 28 layers x 4 kv heads x 128 dims
    assert abs(sizes["params"] - 7.616e9) < 0.01e9 and sizes["kv_bytes_per_slot"] == 2 * 2 * 28 * 4 * 128


def test_prefill_flops_hand_computed():
    # Row 0 appends 20 tokens at 0, row 3 appends 5 at 10; chunks of 16. Piece 1: 16 + 5 tokens, width 16, two
    # rows with tokens (sub-batch of 2); piece 2: row 0's last 4 tokens, width length_bucket(4) = 16, one row.
    before = session_ops.State((0, 0, 0, 10), 256)
    ops = session_ops.operations(
        session_ops.Sizes(1016, 4, 16), before, session_ops.Append((range(20), (), (), range(5)))
    )
    pieces = rp.call_pieces(ops, before, shards=1, sub_rows=len)
    pairs1 = (16 * 17 // 2) + (5 * 10 + 5 * 6 // 2)  # causal contexts: positions 0..15 and 10..14
    assert pieces == [
        rp.Piece(rows=2, width=16, span=256, real_rows=2, real_tokens=21, real_pairs=pairs1),
        rp.Piece(rows=1, width=16, span=256, real_rows=1, real_tokens=4, real_pairs=4 * 16 + 4 * 5 // 2),
    ]
    sizes = {"layer_params": 100, "head_params": 10, "attn_flops_per_pair": 3}
    assert rp.forward_flops(sizes, tokens=32, rows=2, pairs=32 * 256) == 2 * 100 * 32 + 2 * 10 * 2 + 3 * 32 * 256
    t = rp.Tally()
    for p in pieces:
        t.prefill_piece(p)
    f = rp.prefill_figures(t, sizes)
    computed = (2 * 100 * 32 + 2 * 10 * 2 + 3 * 32 * 256) + (2 * 100 * 16 + 2 * 10 + 3 * 16 * 256)
    real = (2 * 100 * 21 + 2 * 10 * 2 + 3 * pairs1) + (2 * 100 * 4 + 2 * 10 + 3 * 74)
    assert (f["computed"], f["real"], f["tokens"], f["real_tokens"]) == (computed, real, 48, 25)
    # Qwen3-8B through its own family: 36 layers x 8 kv heads x head_dim 128, q/k norm, untied head.
    q3 = rp.decode_bytes("qwen3_8b")
    assert q3["model_type"] == "qwen3" and q3["kv_bytes_per_slot"] == 2 * 2 * 36 * 8 * 128
    assert q3["attn_flops_per_pair"] == 4 * 36 * 32 * 128 and q3["head_params"] == 151936 * 4096
    assert abs(q3["params"] - 8.19e9) < 0.01e9


def test_a_session_that_prefills_every_row_scores_one_over_rows():
    # One group (one 40-token prompt, one step) admitted into an 8-row session: the sub-batch computes its one
    # row; a session that computes every row computes 8 rows for the same real tokens.
    sizes = rp.decode_bytes("qwen2_5_7b")
    e = [rp.EpisodeLengths(prompt=40, steps=(3,), deltas=())]
    kw = dict(rows=8, limits=LIMITS, row_bucket=rp.buckets.batch_bucket)  # a session of 8 rows
    sub = rp.replay_streaming(e, [0], prefill_rows=lambda live, r: rp.buckets.row_bucket(len(live), r, 1), **kw)
    every = rp.replay_streaming(e, [0], prefill_rows=lambda live, r: r, **kw)
    u_sub = rp.prefill_figures(sub, sizes)
    u_all = rp.prefill_figures(every, sizes)
    assert [p.rows for p in sub.prefill_log] == [1, 1, 1] and [p.rows for p in every.prefill_log] == [8, 8, 8]
    assert u_all["real"] == u_sub["real"] and u_all["computed"] == 8 * u_sub["computed"]
    assert u_all["real"] / u_all["computed"] == pytest.approx(u_sub["real"] / u_sub["computed"] / 8, rel=1e-12)
    assert u_sub["real"] / u_sub["computed"] > 0.5  # 40 tokens in 16-wide pieces: little padding


def test_command_on_a_few_real_tasks():
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        row = rp.main(["rollout_plan", "--config=configs/rc_grpo.py:qwen2_5_7b", "--tasks=6", "--vocab=2048"])
    lines = [json.loads(x) for x in buf.getvalue().splitlines() if x.startswith("{")]
    assert lines[-1]["kv_read_utilisation"] == pytest.approx(row["kv_read_utilisation"], abs=1e-4)
    designs = ["new", "new_whole_steps", "new_ragged", "sub_batch_prefill", "all_rows_prefill"]
    assert [x["design"] for x in lines[:-1]] == designs
    assert "baseline" not in row and set(row["variants"]) == set(designs[1:])
    for f in [row, *row["variants"].values()]:
        assert 0 < f["kv_read_utilisation"] <= 1 and 0 < f["row_utilisation"] <= 1
        assert f["decode_steps"] > 0 and f["est_rollout_s_per_step"] > 0
        assert 0 < f["prefill_flop_utilisation"] <= 1
        total = f["est_decode_s_per_step"] + f["est_prefill_s_per_step"]
        assert f["est_rollout_s_per_step"] == pytest.approx(total, rel=1e-9)
        assert f["prefill_real_tokens_per_step"] <= f["prefill_tokens_per_step"]
    # Computing only the rows with tokens beats computing all 160 by far, over the same real tokens.
    every, sub = row["variants"]["all_rows_prefill"], row["variants"]["sub_batch_prefill"]
    assert every["prefill_real_pflop_per_step"] == pytest.approx(sub["prefill_real_pflop_per_step"], rel=1e-9)
    # (a row sub-batch counts a row's output head in each of its chunks, a packed forward once per row)
    assert sub["prefill_real_pflop_per_step"] == pytest.approx(row["prefill_real_pflop_per_step"], rel=1e-3)
    assert every["prefill_flop_utilisation"] < row["prefill_flop_utilisation"] / 4
    # 4 row shards: the packed prefill and appends beat the row sub-batches (one real row in 4 for a prefix)
    assert sub["prefill_flop_utilisation"] < row["ragged_prefill_flop_utilisation"]
    assert sub["est_prefill_s_per_step"] > row["variants"]["new_ragged"]["est_prefill_s_per_step"]
    assert row["tasks"] == 6 and row["rollouts_per_step"] == 1280 and row["rows"] == 160
    assert 2.5 < row["chars_per_token"] < 6
    # Slices of 8 tokens keep the rows busier than whole steps, over the same episodes.
    assert row["row_utilisation"] > row["variants"]["new_whole_steps"]["row_utilisation"]
    # The ragged design (what a GPU session runs) beside it, in the same last line, with the goal checked on it.
    ragged = row["variants"]["new_ragged"]
    assert row["ragged_kv_read_utilisation"] == ragged["kv_read_utilisation"] > row["kv_read_utilisation"]
    assert row["ragged_est_rollout_s_per_step"] == ragged["est_rollout_s_per_step"] < row["est_rollout_s_per_step"]
    assert row["ragged_row_utilisation"] == ragged["row_utilisation"]
    goal = row["goal"]
    assert goal["checked_on"] == "new_ragged"
    assert (goal["kv_read_utilisation_min"], goal["row_utilisation_min"]) == (0.7, 0.8)
    assert (goal["prefill_flop_utilisation_min"], goal["est_rollout_s_per_step_max"]) == (0.8, 180.0)
    assert goal["goals_met"] == {
        "prefill_flop_utilisation": ragged["prefill_flop_utilisation"] >= 0.8,
        "est_rollout_s_per_step": ragged["est_rollout_s_per_step"] <= 180.0,
        "kv_read_utilisation": ragged["kv_read_utilisation"] >= 0.7,
        "row_utilisation": ragged["row_utilisation"] >= 0.8,
    }
    assert goal["met"] == all(goal["goals_met"].values())
    assert lines[-1]["goal"] == rp.rounded(goal)
    bound = row["prefill_bound"]
    assert {"prefix", "suffix", "delta", "all"} <= set(bound)
    assert sum(bound[k]["flop_share"] for k in ("prefix", "suffix", "delta")) == pytest.approx(1.0, rel=1e-9)
    assert bound["all"]["utilisation"] == pytest.approx(ragged["prefill_flop_utilisation"], rel=1e-9)
    for b in bound.values():  # removing padding can only raise the utilisation; it is between its two parts'
        assert b["utilisation"] <= b["utilisation_no_padding_rows"] + 1e-12
        lo, hi = sorted((b["matmul_utilisation"], b["attention_utilisation"]))
        assert lo - 1e-12 <= b["utilisation"] <= hi + 1e-12 and 0 < b["attention_flop_share"] < 1


def test_expert_lengths_of_real_tasks():
    """One oracle step per scripted text, a reward token inside the prompt (the group's shared prefix ends
    there), a non-empty delta after every step but the last."""
    import tempfile

    from configs import rc_grpo
    from rcgrpo_jax import chat
    from rcgrpo_jax.data import datasets, sources
    from rcgrpo_jax.envs import bfcl
    from rcgrpo_jax.rollout import oracle_texts

    tasks = sources.tasks(rc_grpo.get_config("qwen2_5_7b").data, "train")[:3]
    parser = chat.get_parser("hermes")
    with tempfile.TemporaryDirectory() as d:
        tok = rp.build_tokenizer(tasks, "qwen2", 1024, d)
    eps, cpt = rp.expert_lengths(tasks, tok, parser, reward_token=datasets.HIGH_REWARD_TOKEN)
    for e, t in zip(eps, tasks):
        assert len(e.steps) == len(oracle_texts(bfcl.ground_truth_script(t), parser))
        assert 0 < e.prefix < e.prompt and min(e.deltas) > 0 and min(e.steps) >= 2  # text + end of turn
    assert cpt > 1


def _recorded_run(tiny_qwen, specs, limits, **kw):
    """The specs' episodes through a real ModelPolicy + DecodeSession (recording its decode calls): their
    lengths, the policy, and its calls (each call's rows' (start, sampled) sorted, as the replay keeps them)."""
    import dataclasses

    import jax

    from rcgrpo_jax import chat
    from rcgrpo_jax.rollout import ModelPolicy, RolloutConfig, run_episodes

    _, config, params, tok, parser = tiny_qwen
    policy = ModelPolicy(
        config,
        kw.pop("params", params),
        stop_ids=chat.end_of_turn_ids(tok),
        max_step_tokens=limits.max_step_tokens,
        max_context=limits.max_context,
        prefill_chunk=limits.prefill_chunk,
        rng=jax.random.key(0),
        record_calls=True,
        **kw,
    )
    rc = RolloutConfig(max_context=limits.max_context, max_step_tokens=limits.max_step_tokens)
    episodes, _ = run_episodes(specs, policy, tok, parser, rc)
    assert len(policy.calls) == policy.session.stats["decode_calls"]
    real = [dataclasses.replace(c, sampled=tuple(sorted(c.sampled))) for c in policy.calls]
    return [rp.EpisodeLengths.of(e) for e in episodes], policy, real


def test_a_freed_row_keeps_the_sessions_span_until_it_is_refilled(tiny_qwen):
    """One long one-turn episode (549-token prompt) beside three short four-turn ones in 8 rows, nothing
    waiting: the long one ends after its first step, but its row keeps its context (nothing refills or
    truncates it, and 4 rows need no fewer than 8), so the session's span stays at the capacity (664 =
    600 + 64; the long row needs 561 + a slice) for the short rows' later calls, whose own span would be 512.
    The replay counts the same spans, call by call."""
    limits = rp.Limits(max_context=600, max_step_tokens=12, prefill_chunk=64)
    qs = [("Add 1 and 1. " * 30,), ("What is 2 plus 3?", "And 4 plus 5?", "And 6?", "And 7?")]
    specs = [EpisodeSpec(AdderEnv(questions=qs[0], answers=(0,)), "long", group=0, rollout_index=0)] + [
        EpisodeSpec(AdderEnv(questions=qs[1], answers=(0,)), f"s{k}", group=k + 1, rollout_index=0) for k in range(3)
    ]
    lengths, policy, real = _recorded_run(tiny_qwen, specs, limits, rows=8, slice_tokens=5)
    assert lengths[0].prompt == 549 and len(lengths[0].steps) == 1
    short_need = max(x.total for x in lengths[1:]) + 5  # a short row's length + a slice, at most
    assert rp.buckets.span_bucket(short_need, 664) == 512 and len(real) > 3  # the short rows alone: 512
    t = rp.replay_streaming(lengths, [s.group for s in specs], rows=8, limits=limits, slice_tokens=5)
    assert t.log == real and {c.span for c in real} == {664}


def test_packed_pieces_by_hand():
    """Two fresh rows of 100 and 1500 tokens and one of 3000 on 4 row shards: `packed.pack` puts the first two
    in one forward (1600 tokens -> 400 a shard -> token_bucket 448), the third alone (750 -> 768). Their
    attention: each shard's (64-query, 64-key) block pairs, the busiest shard's bucketed count on every shard:
    71 + ... -> 96 (`tests/sampling/test_packed.py` counts them by hand); the 3000-token row's natural block i
    sees blocks 0..i (i + 1 pairs; block 47 is padding: one), 12 blocks a shard dealt back and forth."""
    got = [rp.packed_piece(f, shards=4, rows=160) for f in rp.packed.pack({3: 100, 7: 1500, 12: 3000})]
    order = rp.packed.block_order(4, 12)
    busiest = max(sum(1 if i == 47 else i + 1 for i in order[s]) for s in range(4))
    assert busiest == 294 and rp.packed.PackedForward((12,), (3000,)).pairs_per_shard(4) == 320
    assert [(p.tokens, p.pairs, p.read, p.rows, p.real_rows, p.real_tokens) for p in got] == [
        (4 * 448, 4 * 96 * 64 * 64, 4 * 448, 2, 2, 1600),
        (4 * 768, 4 * 320 * 64 * 64, 4 * 768, 1, 1, 3000),
    ]
    assert got[0].real_pairs == 100 * 101 // 2 + 1500 * 1501 // 2 and got[0].computed_tokens == 4 * 448
    assert got[1].slots_read == 4 * 768 and got[1].computed_pairs == 4 * 320 * 64 * 64


def test_packed_append_pieces_by_hand():
    """Deltas of 40 tokens to row 0 (holding 1000) and 70 to row 41 (holding 300), 160 rows on 4 shards (rows
    0-39 on shard 0, 40-79 on shard 1): 110 tokens -> 28 a shard -> 32; blocks of 32: shard 0 has 2 (slots
    1000 and 1032 on), shard 1 has 3 (300, 332, 364), so 4 a shard; with 128-slot key blocks shard 0's
    blocks see 9 each (up to slots 1031, 1039) and its 2 padding blocks one each: 20 pairs -> 24 on every
    shard."""
    counts, bases = {0: 40, 41: 70}, {0: 1000, 41: 300}
    (d,) = [rp.packed_append_piece(f, shards=4, rows=160, span=1536) for f in rp.packed_append.pack(counts, bases)]
    assert d.tokens == 4 * 32 and d.real_tokens == 110 and d.rows == 2
    assert d.span == 1536
    assert d.pairs == 4 * 24 * 32 * 128 and d.read == 4 * 24 * 128
    assert d.real_pairs == 40 * 1000 + 40 * 41 // 2 + 70 * 300 + 70 * 71 // 2


def test_step_data_presets_are_planned_on_the_bfcl_split_in_one_line(capsys):
    from configs import awpo

    config = awpo.get_config("qwen3_8b")
    assert config.data.source == "steps" and not config.data.steps.path  # the user's data: no file to read
    planned = rp.bfcl_tasks_of(config)
    err = capsys.readouterr().err.splitlines()
    assert planned.data.source == "bfcl" and config.data.source == "steps"  # a copy
    assert err == ["rollout_plan: data.source=steps: planned on the BFCL train split (no data file is read)"]
    from rcgrpo_jax.data import sources

    assert len(sources.tasks(planned.data, "train")) > 0
