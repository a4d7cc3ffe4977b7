"""A small name -> function registry, shared by advantage estimators, policy losses, KL estimators
(and reusable by the environment reward registry).

A config string picks the function; an optional `default_config` callable gives the function's
ml_collections defaults, which `resolve` merges with a user's (partial) config.
"""

from __future__ import annotations

from typing import Callable, Generic, TypeVar

import ml_collections

F = TypeVar("F", bound=Callable)
DefaultsFn = Callable[[], ml_collections.ConfigDict]


class Registry(Generic[F]):
    """Maps names to functions. `register(name)` is a decorator; `get(name)` raises a KeyError
    that lists the known names, so a typo in a config fails at start-up and says what exists."""

    def __init__(self, kind: str):
        self.kind = kind
        self._fns: dict[str, F] = {}
        self._defaults: dict[str, DefaultsFn | None] = {}

    def register(
        self, name: str, *, default_config: DefaultsFn | None = None, override: bool = False
    ) -> Callable[[F], F]:
        def deco(fn: F) -> F:
            if name in self._fns and not override:
                raise ValueError(f"{self.kind} {name!r} is already registered (pass override=True to replace it)")
            self._fns[name] = fn
            self._defaults[name] = default_config
            return fn

        return deco

    def get(self, name: str) -> F:
        try:
            return self._fns[name]
        except KeyError:
            raise KeyError(f"unknown {self.kind} {name!r}; known: {', '.join(self.names())}") from None

    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._fns))

    def __contains__(self, name: str) -> bool:
        return name in self._fns

    def default_config(self, name: str) -> ml_collections.ConfigDict:
        """A fresh copy of `name`'s defaults (an empty ConfigDict when it declared none)."""
        self.get(name)  # clear error for unknown names
        fn = self._defaults[name]
        return fn() if fn is not None else ml_collections.ConfigDict()


def resolve(
    config: ml_collections.ConfigDict | dict | None, defaults: ml_collections.ConfigDict
) -> ml_collections.ConfigDict:
    """Defaults overridden by `config`. Unknown fields raise a KeyError naming the field."""
    out = ml_collections.ConfigDict(defaults)
    out.lock()
    if config is not None:
        out.update(config)
    return out
