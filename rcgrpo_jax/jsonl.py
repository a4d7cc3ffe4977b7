"""The one reader of the JSON-lines files the stages read: SFT and RCTP-FT conversations, exploration rollouts,
step data, replay and BFCL result files, BFCL's own data files.

Every line that is not blank is one JSON value. Two ways to read:

- `read(path, what=..., check=...)`, strict: the rows (each passed through `check(value, where)`, which
  returns the row or raises `InputError`/`ValueError` with what is wrong). The first bad line stops the read
  with `InputError("FILE:LINE: what is wrong")`; a file with no rows stops it with `InputError("FILE: empty:
  no <what>")`; a missing file or a directory says so. The launcher prints the message as one line, exit 2.
- `scan(path)`, lenient (replay, agreement): every line as a `Line` (decoded) or a `BadLine` (what is wrong),
  in order, for a caller that counts and reports bad lines rather than stopping.

A `where` string is always `FILE:LINE` with LINE 1-based, so an editor can jump to it.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Callable, Iterator, TypeVar

from rcgrpo_jax.config_fields import InputError

T = TypeVar("T")
_CUT = 120  # longest piece of a bad line quoted back


@dataclasses.dataclass(frozen=True)
class Line:
    """A decoded line: its file, 1-based number and JSON value."""

    path: str
    number: int
    value: Any

    @property
    def where(self) -> str:
        return f"{self.path}:{self.number}"


@dataclasses.dataclass(frozen=True)
class BadLine:
    """A line that is not one JSON value: its file, 1-based number and what is wrong."""

    path: str
    number: int
    message: str

    @property
    def where(self) -> str:
        return f"{self.path}:{self.number}"


def _open_error(path: str) -> str | None:
    if not os.path.exists(path):
        return f"{path}: no such file"
    if os.path.isdir(path):
        return f"{path}: is a directory, not a JSON-lines file"
    if not os.access(path, os.R_OK):
        return f"{path}: not readable"
    return None


def _decode(text: str) -> tuple[Any, str | None]:
    try:
        return json.loads(text), None
    except ValueError as e:
        cut = text.strip()
        cut = cut if len(cut) <= _CUT else cut[: _CUT - 3] + "..."
        reason = e.msg if isinstance(e, json.JSONDecodeError) else str(e)
        col = f" at column {e.colno}" if isinstance(e, json.JSONDecodeError) else ""
        return None, f"not valid JSON ({reason}{col}): {cut}"


def scan(path: str | os.PathLike) -> Iterator[Line | BadLine]:
    """Every non-blank line of `path` in order, decoded (`Line`) or not (`BadLine`). Raises `InputError`
    when the file cannot be opened."""
    path = os.fspath(path)
    problem = _open_error(path)
    if problem:
        raise InputError(problem)
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                yield BadLine(path, number, f"not UTF-8 text (byte {e.start})")
                continue
            if not text.strip():
                continue
            value, error = _decode(text.rstrip("\r\n"))  # columns count on the line as written
            yield Line(path, number, value) if error is None else BadLine(path, number, error)


def read(
    path: str | os.PathLike,
    *,
    what: str = "rows",
    check: Callable[[Any, str], T] | None = None,
    allow_empty: bool = False,
) -> list[T] | list[Any]:
    """The rows of `path`, each through `check(value, where)` when given (module docstring); raises
    `InputError` naming FILE:LINE at the first bad line, or the file when it holds no row (unless
    `allow_empty`: files the package writes itself, such as a split with no failures)."""
    out = []
    path = os.fspath(path)
    for item in scan(path):
        if isinstance(item, BadLine):
            raise InputError(f"{item.where}: {item.message}")
        if check is None:
            out.append(item.value)
            continue
        try:
            out.append(check(item.value, item.where))
        except InputError:
            raise
        except (ValueError, TypeError, KeyError) as e:
            raise InputError(f"{item.where}: {e.args[0] if isinstance(e, KeyError) else e}") from None
    if not out and not allow_empty:
        raise InputError(f"{path}: empty: no {what} (a JSON-lines file holds one JSON value per line)")
    return out


def json_object(*keys: str, lists: tuple[str, ...] = ()) -> Callable[[Any, str], dict]:
    """A `check` for `read`: the value is a JSON object holding `keys`, those named in `lists` being
    non-empty lists."""

    def check(value: Any, where: str) -> dict:  # noqa: ARG001
        if not isinstance(value, dict):
            raise InputError(f"{where}: expected a JSON object, got {type(value).__name__}")
        missing = [k for k in keys if k not in value]
        if missing:
            raise InputError(f"{where}: no {', '.join(repr(k) for k in missing)} field (has {sorted(value)[:8]})")
        for k in lists:
            if not isinstance(value[k], list) or not value[k]:
                raise InputError(f"{where}: {k!r} must be a non-empty list, got {type(value[k]).__name__}")
        return value

    return check


def conversation(value: Any, where: str) -> dict:
    """A `check` for chat rows (SFT, RCTP-FT, exploration): {"messages": [{"role": str, ...}, ...], "tools": [...]?}."""
    row = json_object("messages", lists=("messages",))(value, where)
    for i, m in enumerate(row["messages"]):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise InputError(f"{where}: messages[{i}] is not an object with a string 'role'")
    if "tools" in row and row["tools"] is not None and not isinstance(row["tools"], list):
        raise InputError(f"{where}: 'tools' must be a list, got {type(row['tools']).__name__}")
    return row


def trajectory_record(value: Any, where: str) -> dict:
    """A `check` for trajectory records (`data.trajectories`; exploration output): a conversation with a
    string 'kind' (expert | failure | rollout)."""
    row = conversation(value, where)
    if not isinstance(row.get("kind"), str):
        raise InputError(f"{where}: no string 'kind' field (expert | failure | rollout)")
    return row
