"""Arithmetic turn skills on BFCL's MathAPI (stateless: only call results are checked).

Operands the user types come from the split's number vocabulary; the running value is read from the
previous tool result, so a chain can only be followed by reading what the tool printed.
"""

from __future__ import annotations

from rcgrpo_jax.worlds.replay import Session

CLASS = "MathAPI"
TOOLS: tuple[str, ...] = ("add", "subtract", "multiply")

# op -> (user text with {c} and {noun}, MathAPI function)
_OPS = {
    "add": ("Add {c} to the {noun}.", "add"),
    "subtract": ("Subtract {c} from the {noun}.", "subtract"),
    "multiply": ("Multiply the {noun} by {c}.", "multiply"),
}
OPS = tuple(_OPS)


def add_pair(s: Session, a: int, b: int) -> int:
    s.turn(f"Add {a} and {b}.")
    return s.call("add", a=a, b=b)["result"]


def apply_op(s: Session, op: str, value: int, c: int, noun: str = "result") -> int:
    """'Multiply the result by 3.': `value` is what the previous tool call returned."""
    text, fn = _OPS[op]
    s.turn(text.format(c=c, noun=noun))
    return s.call(fn, a=value, b=c)["result"]
