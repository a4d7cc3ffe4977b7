"""Names and numbers of the miniature world, split into disjoint train and test vocabularies.

Test tasks are fresh instances of the trained task types: every file stem, folder name, root name and
user-given operand in a test task comes from the test side, which no training task uses. Words are
short, common and lower-case so a small BPE tokenizer keeps them to one or two tokens. Extensions and
line counts are shared: they are what the skills are about, not scenario names.
"""
from __future__ import annotations

import dataclasses

EXTENSIONS: tuple[str, ...] = (".txt", ".md", ".csv", ".log")


@dataclasses.dataclass(frozen=True)
class Vocab:
    """One side of the split."""

    split: str
    stems: tuple[str, ...]     # file names are stem + extension
    folders: tuple[str, ...]   # folder names (distinct from stems, so a name says what it is)
    roots: tuple[str, ...]     # root directory names
    numbers: tuple[int, ...]   # operands the user types
    factors: tuple[int, ...]   # small multipliers the user types

    def names(self) -> frozenset[str]:
        return frozenset(self.stems) | frozenset(self.folders) | frozenset(self.roots)


_OPERANDS = range(2, 40)
_FACTORS = range(2, 10)

TRAIN = Vocab(
    split="train",
    stems=("apple", "river", "stone", "cloud", "tiger", "lemon", "paper", "candle", "garden", "rocket",
           "silver", "window", "pencil", "forest", "butter", "castle", "button", "planet", "summer",
           "mirror", "ocean", "violet", "hammer", "jacket"),
    folders=("docs", "notes", "music", "photos", "reports", "drafts", "games", "recipes", "backup",
             "archive", "projects", "letters"),
    roots=("home", "work"),
    numbers=tuple(n for n in _OPERANDS if n % 4 != 3),
    factors=tuple(n for n in _FACTORS if n not in (3, 7)),
)

TEST = Vocab(
    split="test",
    stems=("maple", "comet", "harbor", "falcon", "velvet", "copper", "meadow", "lantern", "pepper",
           "canyon", "willow", "marble"),
    folders=("travel", "budget", "school", "videos", "papers", "invoices"),
    roots=("desk", "lab"),
    numbers=tuple(n for n in _OPERANDS if n % 4 == 3),
    factors=(3, 7),
)

VOCABS = {"train": TRAIN, "test": TEST}
