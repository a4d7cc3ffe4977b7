"""Names and numbers of the miniature world, split into disjoint train and test vocabularies.

Test tasks are fresh instances of the trained task types: every file stem, folder name, root name and
user-given operand in a test task comes from the test side, which no training task uses. Extensions and line
counts are shared: they are what the skills are about, not scenario names.

Syllable sides: stems and folders are two or three syllables of one small set ("ba", "ko", ...), split between
train and test by combination; a byte-level BPE trained on the world learns the syllables as tokens, so "copy
this name" carries over to unseen names (docs/experiments.md). RL (`data.world.rl_vocab="own"`) is carved from
the train side, which stage 1 then does without (TRAIN_WITHOUT_RL); FRESH (`rl_vocab="fresh"`) takes nothing from
stage 1 (repeated syllables "bakoba", "baba", operands 40-63). WIDE (`data.world.train_vocab="wide"`) names stage 1
from twice the syllables (about 12k stems, 534 folders, operands 64-99 too): most names occur once, and the model
has to copy.

CODED sides (`train_vocab="coded"`): stems a letter and three digits ("f123"), folders a letter and two ("d45"),
split by their digits; roots and operands are WIDE's and the test's. A tokenizer that splits digits one by one
(Qwen's) writes every name as a letter and a few single-digit tokens, so copying a name is copying a few pieces.
`test_side(train_vocab)` is the test side of a naming: TEST, or CODED_TEST for "coded".
"""

from __future__ import annotations

import dataclasses

EXTENSIONS: tuple[str, ...] = (".txt", ".md", ".csv", ".log")


@dataclasses.dataclass(frozen=True)
class Vocab:
    """One side of the split."""

    split: str
    stems: tuple[str, ...]  # file names are stem + extension
    folders: tuple[str, ...]  # folder names (distinct from stems, so a name says what it is)
    roots: tuple[str, ...]  # root directory names
    numbers: tuple[int, ...]  # operands the user types
    factors: tuple[int, ...]  # small multipliers the user types

    def names(self) -> frozenset[str]:
        return frozenset(self.stems) | frozenset(self.folders) | frozenset(self.roots)


_OPERANDS = range(2, 40)
_FACTORS = range(2, 10)
_SYLLABLES = ("ba", "ko", "ri", "mu", "te", "lo", "si", "na", "du", "pe", "ga", "vi")


# Name combinations by class (sum(indices) * 7 + first index) % 5: class 0 is test-only, class 1 the RL side
# (train names unless the RL vocabulary is carved out), classes 2-4 train-only.
_CLASSES = {"test": (0,), "train": (1, 2, 3, 4), "rl": (1,), "stage1": (2, 3, 4)}


def _names(n_syllables: int, split: str) -> tuple[str, ...]:
    """Every word of `n_syllables` syllables on its side of the split (one in five combinations, by its
    syllable indices, is test-only)."""
    import itertools

    out = []
    for combo in itertools.product(range(len(_SYLLABLES)), repeat=n_syllables):
        if len(set(combo)) < n_syllables:  # no repeated syllable: "baba" would be easy to misread
            continue
        if (sum(combo) * 7 + combo[0]) % 5 in _CLASSES[split]:
            out.append("".join(_SYLLABLES[i] for i in combo))
    return tuple(out)


TRAIN = Vocab(
    split="train",
    stems=_names(3, "train"),
    folders=_names(2, "train"),
    roots=("home", "work"),
    numbers=tuple(n for n in _OPERANDS if n % 4 != 3),
    factors=tuple(n for n in _FACTORS if n not in (3, 7)),
)

TEST = Vocab(
    split="test",
    stems=_names(3, "test"),
    folders=_names(2, "test"),
    roots=("desk", "lab"),
    numbers=tuple(n for n in _OPERANDS if n % 4 == 3),
    factors=(3, 7),
)

# The RL side: operands n % 8 in {1, 6} of the train ones (odd and even), roots of its own.
RL = Vocab(
    split="rl",
    stems=_names(3, "rl"),
    folders=_names(2, "rl"),
    roots=("box", "tmp"),
    numbers=tuple(n for n in TRAIN.numbers if n % 8 in (1, 6)),
    factors=TRAIN.factors,
)

# The fresh side: syllable patterns x-y-x (stems) and x-x (folders), which _names leaves out, and operands
# 40-63 (train and test draw from 2-39): RL meets unseen names and numbers while stage 1 keeps all of TRAIN.
FRESH = Vocab(
    split="fresh",
    stems=tuple(a + b + a for a in _SYLLABLES for b in _SYLLABLES if a != b),
    folders=tuple(a + a for a in _SYLLABLES),
    roots=("box", "tmp"),
    numbers=tuple(range(40, 64)),
    factors=TRAIN.factors,
)

# The train side without the RL one (split "train": the same task seeds, other draws).
TRAIN_WITHOUT_RL = Vocab(
    split="train",
    stems=_names(3, "stage1"),
    folders=_names(2, "stage1"),
    roots=TRAIN.roots,
    numbers=tuple(n for n in TRAIN.numbers if n not in RL.numbers),
    factors=TRAIN.factors,
)

# The wide train side: the test's 12 syllables and 12 more, every name of them that is not a test name (about
# 12k stems and 534 folders against the narrow side's 1068 and 114), and operands 64-99 beside the train ones.
_WIDE_SYLLABLES = _SYLLABLES + ("fo", "ja", "ke", "hu", "ni", "po", "su", "ta", "wi", "ze", "mo", "da")


def _wide_names(n_syllables: int) -> tuple[str, ...]:
    """Every word of `n_syllables` distinct syllables of _WIDE_SYLLABLES that is not a test name."""
    import itertools

    test = frozenset(_names(n_syllables, "test"))
    words = ("".join(c) for c in itertools.permutations(_WIDE_SYLLABLES, n_syllables))
    return tuple(w for w in words if w not in test)


WIDE = Vocab(
    split="train",
    stems=_wide_names(3),
    folders=_wide_names(2),
    roots=TRAIN.roots,
    numbers=TRAIN.numbers + tuple(range(64, 100)),
    factors=TRAIN.factors,
)

# The coded sides: stems a letter and three digits, folders a letter and two digits, split by digits (class 0 of
# (sum(digits) * 7 + first digit) % 5 is test-only, as the syllable names split by syllable indices).
_STEM_LETTERS = "fghkmnprst"
_FOLDER_LETTERS = "dew"


def _coded_names(letters: str, n_digits: int, split: str) -> tuple[str, ...]:
    """Every code of a letter and `n_digits` digits on its side of the split (train or test)."""
    import itertools

    out = []
    for letter in letters:
        for digits in itertools.product(range(10), repeat=n_digits):
            test = (sum(digits) * 7 + digits[0]) % 5 == 0
            if test == (split == "test"):
                out.append(letter + "".join(map(str, digits)))
    return tuple(out)


CODED = Vocab(
    split="train",
    stems=_coded_names(_STEM_LETTERS, 3, "train"),
    folders=_coded_names(_FOLDER_LETTERS, 2, "train"),
    roots=WIDE.roots,
    numbers=WIDE.numbers,
    factors=WIDE.factors,
)

CODED_TEST = Vocab(
    split="test",
    stems=_coded_names(_STEM_LETTERS, 3, "test"),
    folders=_coded_names(_FOLDER_LETTERS, 2, "test"),
    roots=TEST.roots,
    numbers=TEST.numbers,
    factors=TEST.factors,
)

# data.world.train_vocab -> the train side of stage 1 (and of an RL pool with rl_vocab="train").
TRAIN_VOCABS: dict[str, Vocab] = {"narrow": TRAIN, "wide": WIDE, "coded": CODED}

# data.world.rl_vocab: "train": the RL pool is fresh instances with train names; "own": the pool has names,
# roots and operands of its own that no stage-1 task uses (carved from the narrow train side); "fresh": so does
# the pool, and stage 1 keeps every train name.
RL_VOCABS: tuple[str, ...] = ("train", "own", "fresh")


def sides(train_vocab: str = "narrow", rl_vocab: str = "train") -> tuple[Vocab, Vocab]:
    """(stage-1 vocabulary, RL pool vocabulary) of data.world.train_vocab and data.world.rl_vocab."""
    if train_vocab not in TRAIN_VOCABS:
        raise ValueError(f"unknown train vocabulary {train_vocab!r}; known: {', '.join(TRAIN_VOCABS)}")
    if rl_vocab not in RL_VOCABS:
        raise ValueError(f"unknown RL vocabulary {rl_vocab!r}; known: {', '.join(RL_VOCABS)}")
    if rl_vocab == "own" and train_vocab != "narrow":
        raise ValueError(f"rl_vocab 'own' is carved from the narrow train side, not from {train_vocab!r}; use 'fresh'")
    if rl_vocab == "fresh" and train_vocab == "coded":
        raise ValueError("rl_vocab 'fresh' has syllable names; the coded train side has no fresh side: use 'train'")
    train = TRAIN_VOCABS[train_vocab]
    return {"train": (train, train), "own": (TRAIN_WITHOUT_RL, RL), "fresh": (train, FRESH)}[rl_vocab]


def test_side(train_vocab: str = "narrow") -> Vocab:
    """The test vocabulary that goes with a train side: the coded test side for "coded", else TEST."""
    if train_vocab not in TRAIN_VOCABS:
        raise ValueError(f"unknown train vocabulary {train_vocab!r}; known: {', '.join(TRAIN_VOCABS)}")
    return CODED_TEST if train_vocab == "coded" else TEST
