"""The ID-based train/test split of the 800 BFCL v4 multi-turn tasks (paper, Appendix B).

Each id is ranked by sha256(f"{SEED}:{id}"); the 80 lowest ranks are the test split, the other 720
train. The hash makes the split independent of file order, Python's hash seed and platform, and the
manifest `bfcl_split.json` shipped beside this file pins it so every stage uses the same split;
`check_manifest()` regenerates it and compares.
"""

from __future__ import annotations

import collections
import hashlib
import json
from pathlib import Path
from typing import Iterable

SEED = "rcgrpo-bfcl-v4-multi-turn-split-v1"
NUM_TEST = 80
MANIFEST_PATH = Path(__file__).with_name("bfcl_split.json")


def category_of(task_id: str) -> str:
    return task_id.rsplit("_", 1)[0][len("multi_turn_") :]


def _rank(task_id: str, seed: str) -> str:
    return hashlib.sha256(f"{seed}:{task_id}".encode("utf-8")).hexdigest()


def split_ids(ids: Iterable[str], *, seed: str = SEED, num_test: int = NUM_TEST) -> dict:
    """{"train": [...], "test": [...]} (each sorted by id) from a deterministic hash of each id."""
    ids = sorted(set(ids))
    if num_test > len(ids):
        raise ValueError(f"num_test={num_test} > {len(ids)} ids")
    ranked = sorted(ids, key=lambda i: (_rank(i, seed), i))
    test = set(ranked[:num_test])
    return {"train": [i for i in ids if i not in test], "test": [i for i in ids if i in test]}


def build_manifest(ids: Iterable[str] | None = None, *, seed: str = SEED, num_test: int = NUM_TEST) -> dict:
    """The manifest for `ids` (default: all BFCL multi-turn task ids)."""
    if ids is None:
        from rcgrpo_jax.envs.bfcl import load_tasks

        ids = [t.id for t in load_tasks()]
    split = split_ids(ids, seed=seed, num_test=num_test)
    counts = {
        name: dict(sorted(collections.Counter(category_of(i) for i in part).items())) for name, part in split.items()
    }
    return {"seed": seed, "num_train": len(split["train"]), "num_test": len(split["test"]), "counts": counts, **split}


def write_manifest(path: str | Path = MANIFEST_PATH, manifest: dict | None = None) -> Path:
    path = Path(path)
    manifest = manifest if manifest is not None else build_manifest()
    path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


def load_manifest(path: str | Path = MANIFEST_PATH) -> dict:
    """The shipped manifest; regenerated from the task ids if the file is absent."""
    path = Path(path)
    if not path.exists():
        return build_manifest()
    return json.loads(path.read_text(encoding="utf-8"))


def split(name: str, path: str | Path = MANIFEST_PATH) -> list[str]:
    """Task ids of the "train" or "test" split."""
    if name not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {name!r}")
    return list(load_manifest(path)[name])


def check_manifest(path: str | Path = MANIFEST_PATH) -> None:
    """Raise if the manifest differs from a fresh regeneration."""
    shipped = json.loads(Path(path).read_text(encoding="utf-8"))
    fresh = build_manifest(seed=shipped["seed"], num_test=shipped["num_test"])
    if shipped != fresh:
        raise ValueError(f"{path} does not match the split regenerated from the task ids")


if __name__ == "__main__":
    out = write_manifest()
    manifest = load_manifest(out)
    print(
        json.dumps(
            {
                "path": str(out),
                "num_train": manifest["num_train"],
                "num_test": manifest["num_test"],
                "counts": manifest["counts"],
            }
        )
    )
