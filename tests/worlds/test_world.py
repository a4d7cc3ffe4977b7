"""The miniature world: format, determinism, vocabulary split, official-checker agreement, and that
the reading types really depend on what the tools print."""

from __future__ import annotations

import copy
import itertools
import json
import keyword
import re

import pytest
from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker
from hypothesis import given, settings
from hypothesis import strategies as st

from rcgrpo_jax.worlds import (
    HELDOUT_TYPES,
    READS_RESULTS,
    TEST,
    TRAIN,
    TRAIN_TYPES,
    category_of,
    corpus,
    format_call,
    generate_iid,
    generate_rl_pool,
    generate_world,
    parse_call,
    render_episode,
    replay,
    tool_docs,
)
from rcgrpo_jax.worlds import vocab as vocab_lib
from rcgrpo_jax.worlds.replay import make_instances, public_methods
from rcgrpo_jax.worlds.vocab import FRESH, RL, TRAIN_WITHOUT_RL, WIDE

N_TRAIN, N_TEST = 6, 4
_names = (f"worldcheck{i}" for i in itertools.count())


@pytest.fixture(scope="module")
def world():
    return generate_world(0, N_TRAIN, N_TEST)


def official(task: dict, model: list[list[str]] | None = None, ground_truth: list[list[str]] | None = None) -> dict:
    """BFCL's own checker on `model` calls (default: the ground truth itself), each model turn one step;
    a fresh model name per call and the package's cached instances deleted after (BFCL.md pitfall 1)."""
    name = next(_names)
    gt = task["ground_truth"] if ground_truth is None else ground_truth
    calls = gt if model is None else model
    try:
        return multi_turn_checker([[turn] for turn in calls], gt, task, category_of(task["id"]), name)
    finally:
        for key in [k for k in vars(multi_turn_utils) if k.startswith(name + "_")]:
            del vars(multi_turn_utils)[key]


def fs_names(node: dict) -> list[str]:
    """Every file and folder name in a GorillaFileSystem config tree."""
    out = []
    for name, child in node.items():
        out.append(name)
        if child["type"] == "directory":
            out += fs_names(child["contents"])
    return out


def texts(task: dict) -> list[str]:
    return [m["content"] for turn in task["question"] for m in turn]


# --- format --------------------------------------------------------------------------------------


def test_sizes_categories_and_unique_ids(world):
    train, test = world
    assert len(train) == N_TRAIN * len(TRAIN_TYPES)
    assert len(test) == N_TEST * (len(TRAIN_TYPES) + len(HELDOUT_TYPES))
    assert {category_of(t["id"]) for t in train} == set(TRAIN_TYPES)
    assert {category_of(t["id"]) for t in test} == set(TRAIN_TYPES) | set(HELDOUT_TYPES)
    ids = [t["id"] for t in train + test]
    assert len(set(ids)) == len(ids)


def test_rl_pool_is_fresh_train_name_instances(world):
    train, test = world
    pool = generate_rl_pool(0, N_TRAIN, N_TEST, 3)
    assert len(pool) == 3 * len(TRAIN_TYPES)
    assert {category_of(t["id"]) for t in pool} == set(TRAIN_TYPES)
    ids = [t["id"] for t in train + test + pool]
    assert len(set(ids)) == len(ids)  # no pool task is a stage-1 or a test task
    stage1 = {json.dumps(t["question"]) for t in train}
    assert not stage1 & {json.dumps(t["question"]) for t in pool}
    roots = [t["initial_config"].get("GorillaFileSystem", {}).get("root", {}) for t in pool]
    pool_names = {n.split(".")[0] for root in roots for n in fs_names(root)}  # stems, folders, roots
    assert pool_names and not pool_names & TEST.names()  # test names stay unseen by RL too
    assert generate_rl_pool(0, N_TRAIN, N_TEST, 3) == pool


@pytest.mark.parametrize("train_vocab", ["narrow", "wide", "coded"])
def test_iid_and_dev_splits_are_fresh_draws_of_the_train_distribution(train_vocab):
    """The i.i.d. test and the dev set: the trained types with the stage-1 vocabulary (as the train split),
    none of whose user turns any training task has, disjoint from each other, and the same on every call."""
    train, test = generate_world(0, N_TRAIN, N_TEST, train_vocab=train_vocab)
    iid = generate_iid(0, "iid", 3, train, train_vocab)
    dev = generate_iid(0, "dev", 2, train, train_vocab)
    assert len(iid) == 3 * len(TRAIN_TYPES) and len(dev) == 2 * len(TRAIN_TYPES)
    assert {category_of(t["id"]) for t in iid} == set(TRAIN_TYPES)  # no held-out composition
    ids = [t["id"] for t in train + test + iid + dev]
    assert len(set(ids)) == len(ids)
    turns = lambda tasks: {json.dumps(t["question"]) for t in tasks}  # noqa: E731
    assert not turns(train) & turns(iid) and not turns(iid) & turns(dev) and not turns(train) & turns(dev)
    stage1, _ = vocab_lib.sides(train_vocab, "train")
    roots = [t["initial_config"].get("GorillaFileSystem", {}).get("root", {}) for t in iid]
    names = {n.split(".")[0] for root in roots for n in fs_names(root)}
    test_names = vocab_lib.test_side(train_vocab).names()
    assert names and names <= stage1.names() and not names & test_names  # drawn like training, not like test
    assert generate_iid(0, "iid", 3, train, train_vocab) == iid
    with pytest.raises(ValueError, match="must be one of"):
        generate_iid(0, "test", 1, train, train_vocab)


def test_an_iid_draw_equal_to_a_training_task_is_skipped():
    train, _ = generate_world(0, N_TRAIN, N_TEST)
    first = generate_iid(0, "iid", 1, [], "narrow")  # without the check, these would be the draws
    again = generate_iid(0, "iid", 1, first, "narrow")  # the same draws counted as training tasks
    assert {t["id"] for t in again}.isdisjoint({t["id"] for t in first})
    assert not {json.dumps(t["question"]) for t in again} & {json.dumps(t["question"]) for t in first}


@pytest.mark.parametrize("train_vocab", ["narrow", "wide", "coded"])
def test_no_test_task_shares_user_text_or_ground_truth_with_training(train_vocab):
    # The BFCL split's question check (tests/data/test_splits.py) on the CPU world: no test task repeats a
    # user turn or the ground truth of a task that stage 1 or RL trains on (case and whitespace folded).
    train, test = generate_world(0, N_TRAIN, N_TEST, train_vocab=train_vocab)
    pool = generate_rl_pool(0, N_TRAIN, N_TEST, 3, train_vocab=train_vocab)

    def user_texts(task):
        return {" ".join(m["content"].lower().split()) for turn in task["question"] for m in turn}

    seen_text = set().union(*(user_texts(t) for t in train + pool))
    seen_truth = {json.dumps(t["ground_truth"]) for t in train + pool}
    for task in test:
        assert not user_texts(task) & seen_text, task["id"]
        assert json.dumps(task["ground_truth"]) not in seen_truth, task["id"]
    # and the check can fail: a train task's own text is seen
    assert user_texts(train[0]) <= seen_text


def _scenario_names(tasks: list[dict]) -> set[str]:
    roots = [t["initial_config"].get("GorillaFileSystem", {}).get("root", {}) for t in tasks]
    return {n.split(".")[0] for root in roots for n in fs_names(root)}  # stems, folders, roots


def _typed_operands(tasks: list[dict]) -> set[int]:
    """The numbers users type in math_chain's first turn ("Add X and Y."): vocab.numbers only."""
    return {int(x) for t in tasks if category_of(t["id"]) == "math_chain" for x in re.findall(r"\d+", texts(t)[0])}


def test_own_rl_vocabulary_is_named_by_no_stage_1_or_test_task():
    train, test = generate_world(0, 24, N_TEST, "own")
    pool = generate_rl_pool(0, 24, N_TEST, 24, "own")
    assert not RL.names() & TRAIN_WITHOUT_RL.names() and not RL.names() & TEST.names()
    assert not set(RL.numbers) & set(TRAIN_WITHOUT_RL.numbers) and not set(RL.numbers) & set(TEST.numbers)
    for part in ("stems", "folders", "numbers"):  # carved from the train side (the roots are new words)
        assert set(getattr(TRAIN_WITHOUT_RL, part)) | set(getattr(RL, part)) == set(getattr(TRAIN, part))
    pool_names, stage1_names = _scenario_names(pool), _scenario_names(train)
    assert pool_names and pool_names <= RL.names()
    assert stage1_names and not stage1_names & RL.names()
    assert _typed_operands(pool) and _typed_operands(pool) <= set(RL.numbers)
    assert _typed_operands(train) and not _typed_operands(train) & set(RL.numbers)
    assert test == generate_world(0, 24, N_TEST)[1]  # the test split does not depend on the RL vocabulary
    ids = [t["id"] for t in train + test + pool]
    assert len(set(ids)) == len(ids)
    with pytest.raises(ValueError, match="unknown RL vocabulary"):
        generate_rl_pool(0, 24, N_TEST, 1, "novel")


def test_fresh_rl_vocabulary_takes_nothing_from_stage_1():
    train, test = generate_world(0, 24, N_TEST, "fresh")
    assert (train, test) == generate_world(0, 24, N_TEST)  # stage 1 and the test keep every name
    pool = generate_rl_pool(0, 24, N_TEST, 24, "fresh")
    seen = TRAIN.names() | TEST.names()
    assert not FRESH.names() & seen and not set(FRESH.numbers) & (set(TRAIN.numbers) | set(TEST.numbers))
    assert not set(FRESH.stems) & set(FRESH.folders)  # a name still says whether it is a file or a folder
    pool_names = _scenario_names(pool)
    assert pool_names and pool_names <= FRESH.names()
    assert _typed_operands(pool) and _typed_operands(pool) <= set(FRESH.numbers)
    pieces = {s for name in FRESH.stems + FRESH.folders for s in (name[i : i + 2] for i in range(0, len(name), 2))}
    assert pieces == set(vocab_lib._SYLLABLES)  # unseen names, made of the syllables stage 1 copies
    ids = [t["id"] for t in train + test + pool]
    assert len(set(ids)) == len(ids)


def test_wide_train_vocabulary_keeps_the_test_and_fresh_sides_unseen():
    train, test = generate_world(0, 24, N_TEST, "train", "wide")
    assert test == generate_world(0, 24, N_TEST)[1]  # the test split does not depend on the train side
    assert not WIDE.names() & (TEST.names() | FRESH.names())
    assert not set(WIDE.numbers) & (set(TEST.numbers) | set(FRESH.numbers))
    assert not set(WIDE.factors) & set(TEST.factors)
    assert set(TRAIN.stems) < set(WIDE.stems) and set(TRAIN.folders) < set(WIDE.folders)  # the narrow side and more
    assert len(WIDE.stems) > 10 * len(TRAIN.stems) and not set(WIDE.stems) & set(WIDE.folders)
    # 24 syllables, 3 distinct per stem and 2 per folder, less the test's names
    assert len(WIDE.stems) == 24 * 23 * 22 - len(TEST.stems) and len(WIDE.folders) == 24 * 23 - len(TEST.folders)
    names = _scenario_names(train)
    assert names <= WIDE.names() and names - TRAIN.names()  # stage 1 meets names the narrow side lacks
    assert _typed_operands(train) <= set(WIDE.numbers) and max(_typed_operands(train)) >= 64
    pool = generate_rl_pool(0, 24, N_TEST, 8, "fresh", "wide")
    assert _scenario_names(pool) <= FRESH.names() and not _scenario_names(pool) & names
    assert _scenario_names(generate_rl_pool(0, 24, N_TEST, 8, "train", "wide")) <= WIDE.names()
    with pytest.raises(ValueError, match="carved from the narrow"):
        generate_world(0, 1, 1, "own", "wide")
    with pytest.raises(ValueError, match="unknown train vocabulary"):
        generate_world(0, 1, 1, "train", "huge")


def test_coded_names_are_a_letter_and_digits_split_by_their_digits():
    coded, test_side = vocab_lib.CODED, vocab_lib.test_side("coded")
    for v in (coded, test_side):
        assert all(re.fullmatch(r"[a-z]\d{3}", s) for s in v.stems) and all(
            re.fullmatch(r"[a-z]\d{2}", f) for f in v.folders
        )
    assert not coded.names() & test_side.names()  # disjoint sides
    assert not set(coded.numbers) & set(test_side.numbers) and not set(coded.factors) & set(test_side.factors)
    # every code is on one side: 10 letters x 1000 stems and 3 letters x 100 folders in all
    assert len(coded.stems) + len(test_side.stems) == 10_000 and len(coded.folders) + len(test_side.folders) == 300
    # "f123": digits (1, 2, 3), (6 * 7 + 1) % 5 == 3, a train code; "f005": (5 * 7 + 0) % 5 == 0, a test code
    assert "f123" in coded.stems and "f005" in test_side.stems
    train, test = generate_world(0, 24, N_TEST, "train", "coded")
    assert _scenario_names(train) <= coded.names() and _scenario_names(test) <= test_side.names()
    assert vocab_lib.test_side("wide") is TEST and generate_world(0, 24, N_TEST, "train", "wide")[1] != test
    with pytest.raises(ValueError, match="no fresh side"):
        generate_rl_pool(0, 24, N_TEST, 1, "fresh", "coded")


def test_rl_split_of_the_world_source():
    import ml_collections

    from rcgrpo_jax.data import sources

    data = ml_collections.ConfigDict(
        {"source": "world", "world": {"seed": 0, "train_per_type": N_TRAIN, "test_per_type": N_TEST, "rl_per_type": 0}}
    )
    assert [t.id for t in sources.tasks(data, "rl")] == [t.id for t in sources.tasks(data, "train")]
    data.world.rl_per_type = 2
    rl = sources.tasks(data, "rl")
    assert len(rl) == 2 * len(TRAIN_TYPES) and not {t.id for t in rl} & {t.id for t in sources.tasks(data, "all")}
    data.world.rl_vocab = "own"
    own = sources.tasks(data, "rl")
    assert [t.id for t in own] == [t.id for t in rl] and _scenario_names([t.entry for t in own]) <= RL.names()
    assert not _scenario_names([t.entry for t in sources.tasks(data, "train")]) & RL.names()
    data.world.rl_vocab, data.world.rl_types = "train", " math_chain,fs_move"  # a pool of two of the types
    two = sources.tasks(data, "rl")
    assert [t.id for t in two] == [t.id for t in rl if category_of(t.id) in ("math_chain", "fs_move")]
    assert {category_of(t.id) for t in two} == {"math_chain", "fs_move"} and len(two) == 4


def test_bfcl_entry_format(world):
    for task in world[0] + world[1]:
        assert set(task) == {
            "id",
            "question",
            "initial_config",
            "involved_classes",
            "ground_truth",
            "allowed_functions",
            "compact_docs",
        }
        assert 2 <= len(task["question"]) == len(task["ground_truth"]) <= 3
        for turn, calls in zip(task["question"], task["ground_truth"]):
            assert len(turn) == 1 and turn[0]["role"] == "user" and turn[0]["content"]
            assert calls, "every turn asks for at least one call"
        methods = public_methods(make_instances(task["initial_config"], task["involved_classes"]))
        assert 3 <= len(task["allowed_functions"]) <= 9
        assert set(task["allowed_functions"]) <= set(methods)
        assert [d["name"] for d in tool_docs(task)] == task["allowed_functions"]
        used = {parse_call(c)[0] for turn in task["ground_truth"] for c in turn}
        assert used <= set(task["allowed_functions"])
        json.dumps(task)  # plain JSON data, like BFCL's files


def test_listings_are_short_with_one_answer(world):
    """Regular listings, few distractors: every ls() shows 2-4 names."""
    seen = 0
    for task in world[0] + world[1]:
        for calls, results in zip(task["ground_truth"], replay(task)):
            for call, result in zip(calls, results):
                if call == "ls()":
                    seen += 1
                    assert 2 <= len(json.loads(result)["current_directory_content"]) <= 4
    assert seen >= N_TRAIN + N_TEST


# --- determinism and vocabulary split -----------------------------------------------------------


def test_deterministic_for_a_seed(world):
    again = generate_world(0, N_TRAIN, N_TEST)
    assert json.dumps(again, sort_keys=True) == json.dumps(world, sort_keys=True)
    other = generate_world(1, N_TRAIN, N_TEST)
    assert json.dumps(other, sort_keys=True) != json.dumps(world, sort_keys=True)


@settings(max_examples=5, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_deterministic_property(seed):
    assert generate_world(seed, 1, 1) == generate_world(seed, 1, 1)


def test_vocabularies_are_disjoint():
    assert not TRAIN.names() & TEST.names()
    assert not set(TRAIN.numbers) & set(TEST.numbers)
    assert not set(TRAIN.factors) & set(TEST.factors)


@pytest.mark.parametrize("split", [0, 1])
def test_tasks_use_only_their_split(world, split):
    vocab = (TRAIN, TEST)[split]
    for task in world[split]:
        config = task["initial_config"].get("GorillaFileSystem")
        names = fs_names(config["root"]) if config else []
        assert {n.split(".")[0] for n in names} <= vocab.names(), task["id"]
        for text in texts(task):
            for word in re.findall(r"[a-z]+(?=\.\w+\b)|\b[a-z]{3,}\b", text):
                if word not in {
                    "go",
                    "and",
                    "make",
                    "folder",
                    "move",
                    "copy",
                    "the",
                    "file",
                    "list",
                    "files",
                    "count",
                    "lines",
                    "add",
                    "subtract",
                    "from",
                    "result",
                    "multiply",
                    "txt",
                    "csv",
                    "log",
                }:
                    assert word in vocab.names(), (task["id"], word)
            assert {int(n) for n in re.findall(r"\d+", text)} <= set(vocab.numbers) | set(vocab.factors)


# --- the official checker -------------------------------------------------------------------------


def test_ground_truth_passes_official_checker(world):
    for task in world[0] + world[1]:
        assert official(task) == {"valid": True}, task["id"]


def _perturb(call: str) -> str:
    """Change the last argument: a number by +1, a name by a suffix."""
    name, kwargs = parse_call(call)
    key = list(kwargs)[-1]
    v = kwargs[key]
    kwargs[key] = v + 1 if isinstance(v, int) else v + "x"
    return format_call(name, kwargs)


def test_perturbed_answers_fail(world):
    for task in world[0] + world[1]:
        gt = task["ground_truth"]
        wrong_arg = copy.deepcopy(gt)
        wrong_arg[-1][-1] = _perturb(wrong_arg[-1][-1])
        assert not official(task, model=wrong_arg)["valid"], task["id"]
        dropped = copy.deepcopy(gt)
        dropped[-1] = dropped[-1][:-1]
        assert not official(task, model=dropped)["valid"], task["id"]


def test_checker_cache_is_cleaned(world):
    official(world[0][0])
    assert not [k for k in vars(multi_turn_utils) if k.startswith("worldcheck")]


# --- reading types depend on the tool output ------------------------------------------------------


def _rename_file(config: dict, old: str, new: str) -> dict:
    config = copy.deepcopy(config)
    stack = [config["GorillaFileSystem"]["root"]]
    while stack:
        node = stack.pop()
        for name, child in list(node.items()):
            if name == old:
                node[new] = node.pop(old)
            elif child["type"] == "directory":
                stack.append(child["contents"])
    return config


def test_read_then_act_name_is_only_in_the_listing(world):
    tasks = [t for t in world[0] + world[1] if category_of(t["id"]) == "fs_read_then_act"]
    assert tasks
    for task in tasks:
        gt = task["ground_truth"]
        listing = json.loads(replay(task)[0][1])["current_directory_content"]
        name, kwargs = parse_call(gt[1][0])
        source = kwargs["source"]
        ext = re.search(r"the (\.\w+) file", texts(task)[1]).group(1)
        assert source in listing and source.endswith(ext)
        assert all(source.split(".")[0] not in text for text in texts(task))
        # Same questions, another file name on disk: the new name works and the old answer fails.
        stem, dot_ext = source.split(".")
        other = next(s for s in TRAIN.stems + TEST.stems if s + "." + dot_ext not in listing) + "." + dot_ext
        changed = dict(task, initial_config=_rename_file(task["initial_config"], source, other))
        retargeted = [gt[0], [format_call(name, {**kwargs, "source": other})]]
        assert official(changed, ground_truth=retargeted)["valid"]
        assert not official(changed, model=gt, ground_truth=retargeted)["valid"]


def test_chained_values_come_from_the_previous_result(world):
    tasks = [t for t in world[0] + world[1] if category_of(t["id"]) in ("math_chain", "fs_count_math")]
    assert tasks
    for task in tasks:
        results = replay(task)
        for t in range(1, len(task["ground_truth"])):
            (call,) = task["ground_truth"][t]
            _, kwargs = parse_call(call)
            previous = json.loads(results[t - 1][-1])
            assert kwargs["a"] == previous.get("result", previous.get("count"))
            # The user text of this turn names only the other operand.
            assert [int(n) for n in re.findall(r"\d+", texts(task)[t])] == [kwargs["b"]]


def test_count_depends_on_the_file(world):
    tasks = [t for t in world[0] + world[1] if category_of(t["id"]) == "fs_count_math"]
    assert tasks
    for task in tasks:
        gt = task["ground_truth"]
        file_name = parse_call(gt[0][1])[1]["file_name"]
        config = copy.deepcopy(task["initial_config"])
        stack = [config["GorillaFileSystem"]["root"]]
        while stack:
            node = stack.pop()
            for n, child in node.items():
                if n == file_name:
                    child["content"] += "\nextra"  # one more line on disk, same questions
                elif child["type"] == "directory":
                    stack.append(child["contents"])
        changed = dict(task, initial_config=config)
        name, kwargs = parse_call(gt[1][0])
        recounted = [gt[0], [format_call(name, {**kwargs, "a": kwargs["a"] + 1})]]
        assert official(changed, ground_truth=recounted)["valid"]
        assert not official(changed, model=gt, ground_truth=recounted)["valid"]


def test_reading_types_declared():
    assert READS_RESULTS <= set(TRAIN_TYPES)


# --- helpers --------------------------------------------------------------------------------------

_IDENT = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True).filter(lambda s: not keyword.iskeyword(s))


@settings(max_examples=50, deadline=None)
@given(
    name=_IDENT,
    kwargs=st.dictionaries(
        _IDENT, st.one_of(st.integers(-(10**6), 10**6), st.text(max_size=12), st.booleans()), max_size=3
    ),
)
def test_format_parse_round_trip(name, kwargs):
    assert parse_call(format_call(name, kwargs)) == (name, kwargs)


@pytest.mark.parametrize(
    "bad",
    [
        "__import__('os').system('x')",
        "mv(source=x)",
        "mv('a', 'b')",
        "a.b(c=1)",
        "mv(**{'a': 1})",
        "mv(source='a'",
        "mv(a={[1]: 2})",
    ],
)
def test_parse_call_rejects_non_literals(bad):
    with pytest.raises(ValueError):
        parse_call(bad)


def test_corpus_covers_world_text(world):
    texts_ = corpus(world[0])
    blob = "\n".join(texts_)
    for word in ("current_directory_content", "Move", "ls", '"arguments"', "result", "count"):
        assert word in blob
    for task in world[0]:
        assert render_episode(task) in texts_
    words = set(re.findall(r"[a-z]+", blob))  # names are whole words (syllables of test names do occur)
    assert words.isdisjoint(TEST.stems + TEST.folders)
