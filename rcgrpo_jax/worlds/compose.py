"""Task types of the miniature world: sequences of turn skills over one scenario.

Trained types (instances with train names in training, with test names in the test set):
  fs_move           easy: every name is in the user text (cd + mkdir, then mv).
  fs_read_then_act  hard: list a folder, then move/copy "the .txt file": the name is only in ls().
  math_chain        medium: add two numbers, then 1-2 ops on "the result" printed by the tool.
  fs_count_math     medium: wc a named file, then add a number to "the count" printed by wc.
Held-out compositions (test only), category compose_heldout: the same skills in orders never trained:
  list -> wc on "the .csv file" (a name read from a listing feeds wc, then add to the count), and
  arithmetic before file work (add, then cd + mkdir, then mv).
"""

from __future__ import annotations

import random
from typing import Callable

from rcgrpo_jax.worlds import arithmetic as ar
from rcgrpo_jax.worlds import filesystem as fs
from rcgrpo_jax.worlds.replay import Session
from rcgrpo_jax.worlds.vocab import Vocab

Builder = Callable[[random.Random, Vocab], Session]


def _fs_config(
    rng: random.Random, vocab: Vocab, work: str, files: list[tuple[str, str]], subfolders: tuple[str, ...] = ()
) -> dict:
    """Root with the work folder (files + empty subfolders, shuffled) and one unrelated folder."""
    items = [(n, fs.file_node(c)) for n, c in files] + [(g, fs.dir_node({})) for g in subfolders]
    rng.shuffle(items)
    other = rng.choice([f for f in vocab.folders if f != work and f not in subfolders])
    used = {n.split(".")[0] for n, _ in files}
    (decoy,) = fs.pick_files(rng, vocab, fs.pick_exts(rng, 1), avoid=used)
    folders = {work: dict(items), other: {decoy[0]: fs.file_node(decoy[1])}}
    if rng.random() < 0.5:  # the work folder is not always listed first at the root
        folders = dict(reversed(list(folders.items())))
    return {fs.CLASS: fs.scenario(rng.choice(vocab.roots), folders)}


def fs_move(rng: random.Random, vocab: Vocab) -> Session:
    work, new = rng.sample(vocab.folders, 2)
    files = fs.pick_files(rng, vocab, fs.pick_exts(rng, rng.randint(2, 3)))
    s = Session(_fs_config(rng, vocab, work, files), [fs.CLASS])
    fs.go_make_folder(s, work, new)
    fs.move_named(s, rng.choice(files)[0], new)
    return s


def fs_read_then_act(rng: random.Random, vocab: Vocab) -> Session:
    work, dest = rng.sample(vocab.folders, 2)
    exts = fs.pick_exts(rng, rng.randint(2, 3))  # one target + 1-2 distractors, one file per extension
    files = fs.pick_files(rng, vocab, exts)
    s = Session(_fs_config(rng, vocab, work, files, (dest,)), [fs.CLASS])
    listing = fs.list_folder(s, work)
    fs.act_on_ext(s, rng.choice(("move", "copy")), exts[0], listing, dest)
    return s


def math_chain(rng: random.Random, vocab: Vocab) -> Session:
    s = Session({}, [ar.CLASS])
    value = ar.add_pair(s, rng.choice(vocab.numbers), rng.choice(vocab.numbers))
    seen = {value}
    for _ in range(rng.randint(1, 2)):
        # Results stay positive and new: BFCL's checker accepts a turn whose expected result was
        # printed in any earlier turn, so a repeated value would let a wrong call pass.
        while True:
            op = rng.choice(ar.OPS)
            c = rng.choice(vocab.factors if op == "multiply" else vocab.numbers)
            nxt = {"add": value + c, "subtract": value - c, "multiply": value * c}[op]
            if nxt > 0 and nxt not in seen:
                break
        value = ar.apply_op(s, op, value, c)
        seen.add(value)
    return s


def fs_count_math(rng: random.Random, vocab: Vocab) -> Session:
    work = rng.choice(vocab.folders)
    files = fs.pick_files(rng, vocab, fs.pick_exts(rng, rng.randint(2, 3)), lines={0: rng.randint(2, 6)})
    s = Session(_fs_config(rng, vocab, work, files), [fs.CLASS, ar.CLASS])
    count = fs.count_lines(s, work, files[0][0])
    ar.apply_op(s, "add", count, rng.choice(vocab.numbers), noun="count")
    return s


def _heldout_list_count(rng: random.Random, vocab: Vocab) -> Session:
    work = rng.choice(vocab.folders)
    exts = fs.pick_exts(rng, rng.randint(2, 3))
    files = fs.pick_files(rng, vocab, exts, lines={0: rng.randint(2, 6)})
    s = Session(_fs_config(rng, vocab, work, files), [fs.CLASS, ar.CLASS])
    listing = fs.list_folder(s, work)
    count = fs.count_ext(s, exts[0], listing)
    ar.apply_op(s, "add", count, rng.choice(vocab.numbers), noun="count")
    return s


def _heldout_math_then_fs(rng: random.Random, vocab: Vocab) -> Session:
    work, new = rng.sample(vocab.folders, 2)
    files = fs.pick_files(rng, vocab, fs.pick_exts(rng, rng.randint(2, 3)))
    s = Session(_fs_config(rng, vocab, work, files), [fs.CLASS, ar.CLASS])
    ar.add_pair(s, rng.choice(vocab.numbers), rng.choice(vocab.numbers))
    fs.go_make_folder(s, work, new)
    fs.move_named(s, rng.choice(files)[0], new)
    return s


def compose_heldout(rng: random.Random, vocab: Vocab) -> Session:
    return rng.choice((_heldout_list_count, _heldout_math_then_fs))(rng, vocab)


TRAIN_TYPES: dict[str, Builder] = {
    "fs_move": fs_move,
    "fs_read_then_act": fs_read_then_act,
    "math_chain": math_chain,
    "fs_count_math": fs_count_math,
}
HELDOUT_TYPES: dict[str, Builder] = {"compose_heldout": compose_heldout}
# Trained types whose later turns can only be solved by reading an earlier tool result (half of the
# held-out compositions read too: list -> wc -> add).
READS_RESULTS = frozenset({"fs_read_then_act", "math_chain", "fs_count_math"})
