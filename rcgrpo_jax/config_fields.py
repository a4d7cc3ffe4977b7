"""The leaf every config check stands on: the error types (a bad config value, bad input) and the dotted-field
accessors.

A `ConfigError`'s message starts with the dotted name of the field at fault (`config.train.batch_size: ...`),
so a bad run stops before it loads a model and says what to change. This module imports nothing from the
package, so any module may raise these errors without an import circle.
"""

from __future__ import annotations

from typing import Any

_MISSING = object()


class ConfigError(ValueError):
    """A bad config value; `field` is its dotted path inside the config."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"config.{field}: {message}")


class InputError(ValueError):
    """Bad input outside the config (a data file, a checkpoint directory, the --workdir flag). The message is
    the one line the user reads, starting with what is at fault (`FILE:LINE: ...`, `--workdir: ...`); the
    launcher prints it and exits 2 before any compute starts."""


class MemoryFitError(ConfigError):
    """The compiled step needs more memory per device than the budget."""


def get(config: Any, dotted: str, default: Any = None) -> Any:
    """`config.a.b.c` for `dotted="a.b.c"`, or `default` where any part is absent."""
    node = config
    for part in dotted.split("."):
        if not hasattr(node, "keys") or part not in node:
            return default
        node = node[part]
    return node


def require(config: Any, dotted: str) -> Any:
    """`config.a.b.c`, or a `ConfigError` naming the field when it is absent."""
    value = get(config, dotted, _MISSING)
    if value is _MISSING:
        raise ConfigError(dotted, "missing")
    return value
