"""File-system scenarios and turn skills on BFCL's GorillaFileSystem.

A skill adds one user turn to a Session and executes its ground-truth calls on the real class. Skills
that the model can only solve by reading a tool result take that result from the live call (the
listing `ls()` printed, the count `wc()` printed), never from the generator's own bookkeeping.
"""

from __future__ import annotations

import random

from rcgrpo_jax.worlds.replay import Session
from rcgrpo_jax.worlds.vocab import EXTENSIONS, Vocab

CLASS = "GorillaFileSystem"
TOOLS: tuple[str, ...] = ("cd", "ls", "mkdir", "mv", "cp", "wc")


def file_node(content: str) -> dict:
    return {"type": "file", "content": content}


def dir_node(contents: dict) -> dict:
    return {"type": "directory", "contents": contents}


def scenario(root: str, folders: dict[str, dict]) -> dict:
    """GorillaFileSystem initial_config: a root holding the given folders (name -> contents)."""
    return {"root": {root: dir_node({name: dir_node(c) for name, c in folders.items()})}}


def pick_files(
    rng: random.Random,
    vocab: Vocab,
    exts: list[str],
    *,
    lines: dict[int, int] | None = None,
    avoid: set[str] = frozenset(),
) -> list[tuple[str, str]]:
    """(name, content) for one file per extension, distinct stems. `lines[i]` = line count of file i
    (the others hold one word). Content words come from the same split as the names."""
    stems = rng.sample([s for s in vocab.stems if s not in avoid], len(exts))
    out = []
    for i, (stem, ext) in enumerate(zip(stems, exts)):
        n = (lines or {}).get(i, 1)
        out.append((stem + ext, "\n".join(rng.choice(vocab.stems) for _ in range(n))))
    return out


def pick_exts(rng: random.Random, n: int) -> list[str]:
    return rng.sample(list(EXTENSIONS), n)


def only_match(listing: list[str], ext: str) -> str:
    """The one listed name with this extension: the answer is in the tool output, verbatim."""
    hits = [name for name in listing if name.endswith(ext)]
    if len(hits) != 1:
        raise ValueError(f"listing {listing} has {len(hits)} names ending in {ext}")
    return hits[0]


def q(name: str) -> str:
    """A name as the user writes it: in double quotes, as it appears in JSON arguments and tool results.
    A byte-level BPE then gives the name the same tokens in the request, the listing and the call (a
    space-prefixed word would be different tokens), so a small model can learn to copy it."""
    return f'"{name}"'


# --- turn skills --------------------------------------------------------------------------------


def go_make_folder(s: Session, folder: str, new: str) -> None:
    s.turn(f"Go to {q(folder)} and make a folder {q(new)}.")
    s.call("cd", folder=folder)
    s.call("mkdir", dir_name=new)


def move_named(s: Session, name: str, dest: str) -> None:
    s.turn(f"Move {q(name)} to {q(dest)}.")
    s.call("mv", source=name, destination=dest)


def list_folder(s: Session, folder: str) -> list[str]:
    s.turn(f"List the files in {q(folder)}.")
    s.call("cd", folder=folder)
    return list(s.call("ls")["current_directory_content"])


def act_on_ext(s: Session, verb: str, ext: str, listing: list[str], dest: str) -> None:
    """'Move/Copy the .txt file to docs.': the source name is only in the earlier ls() output."""
    s.turn(f"{verb.capitalize()} the {ext} file to {q(dest)}.")
    s.call({"move": "mv", "copy": "cp"}[verb], source=only_match(listing, ext), destination=dest)


def count_lines(s: Session, folder: str, name: str) -> int:
    s.turn(f"Go to {q(folder)} and count the lines of {q(name)}.")
    s.call("cd", folder=folder)
    return int(s.call("wc", file_name=name)["count"])


def count_ext(s: Session, ext: str, listing: list[str]) -> int:
    s.turn(f"Count the lines of the {ext} file.")
    return int(s.call("wc", file_name=only_match(listing, ext))["count"])
