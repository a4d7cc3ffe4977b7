"""The one name -> function registry of every part a researcher swaps: advantage estimators, policy losses,
KL estimators, group filters, reward shaping, rewards, step rewards, task sources and judges. It imports
nothing of the package. Every name a config gives may be "module:entry" (`entry_name`, `Registry.lookup`):
the module, a user's own, is imported first and registers the entry.

A config string picks the function; an optional `default_config` callable gives the function's
ml_collections defaults, which `resolve` merges with a user's (partial) config; an optional
`validate` callable checks a resolved config at start-up (`Registry.check`), so a bad string option
fails before the first rollout, naming the field:

    def validate(cfg):  # cfg: the entry's resolved options
        if cfg.std not in ("population", "sample"):
            raise OptionError("std", f"{cfg.std!r} is not one of population, sample")
"""

from __future__ import annotations

import importlib
from typing import Callable, Generic, NamedTuple, TypeVar

import ml_collections

F = TypeVar("F", bound=Callable)
DefaultsFn = Callable[[], ml_collections.ConfigDict]
ValidateFn = Callable[[ml_collections.ConfigDict], None]


class OptionError(ValueError):
    """A bad option of a registry entry; `field` is the option's name inside the entry's config."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}")


def check_choice(cfg: ml_collections.ConfigDict, field: str, choices) -> None:
    """Raises OptionError unless cfg[field] is one of `choices`."""
    if cfg[field] not in choices:
        raise OptionError(field, f"{cfg[field]!r} is not one of {', '.join(map(str, choices))}")


def check_entry(cfg: ml_collections.ConfigDict, field: str, registry: Registry) -> str:
    """The entry of `registry` that cfg[field] names ("module:entry" imports `module` first); raises OptionError
    naming `field` when the module does not import or the entry is unknown."""
    value = str(cfg[field])
    try:
        name = entry_name(value)
    except ImportError as e:
        raise OptionError(field, f"cannot import the module of {value!r}: {e}") from None
    if name not in registry:
        raise OptionError(field, f"{value!r} is not one of {', '.join(registry.names())}")
    return name


class Api(NamedTuple):
    """A registry's functions as a module exposes them (`Registry.api`)."""

    register: Callable
    get: Callable
    names: Callable
    default_config: Callable
    check: Callable


class Registry(Generic[F]):
    """Maps names to functions. `register(name)` is a decorator; `get(name)` raises a KeyError
    that lists the known names, so a typo in a config fails at start-up and says what exists."""

    def __init__(self, kind: str):
        self.kind = kind
        self._fns: dict[str, F] = {}
        self._defaults: dict[str, DefaultsFn | None] = {}
        self._validators: dict[str, ValidateFn | None] = {}

    def register(
        self,
        name: str,
        *,
        default_config: DefaultsFn | None = None,
        validate: ValidateFn | None = None,
        override: bool = False,
    ) -> Callable[[F], F]:
        def deco(fn: F) -> F:
            if name in self._fns and not override:
                raise ValueError(f"{self.kind} {name!r} is already registered (pass override=True to replace it)")
            self._fns[name] = fn
            self._defaults[name] = default_config
            self._validators[name] = validate
            return fn

        return deco

    def get(self, name: str) -> F:
        try:
            return self._fns[name]
        except KeyError:
            raise KeyError(f"unknown {self.kind} {name!r}; known: {', '.join(self.names())}") from None

    def lookup(self, name: str) -> F:
        """The entry `name` names; "module:entry" imports `module` first (a user's own entry)."""
        return self.get(entry_name(name))

    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._fns))

    def api(self, *, lookup: bool = False) -> Api:
        """The functions a module that owns this registry exposes as its own, in one line:

            register, get, names, default_config, check = FILTERS.api()

        (`_` for one the module writes itself, e.g. a `register` that records more per entry). With `lookup`,
        `get` is `lookup`: a "module:entry" name imports its module first."""
        return Api(self.register, self.lookup if lookup else self.get, self.names, self.default_config, self.check)

    def __contains__(self, name: str) -> bool:
        return name in self._fns

    def default_config(self, name: str) -> ml_collections.ConfigDict:
        """A fresh copy of `name`'s defaults (an empty ConfigDict when it declared none)."""
        self.get(name)  # clear error for unknown names
        fn = self._defaults[name]
        return fn() if fn is not None else ml_collections.ConfigDict()

    def check(self, name: str, config: ml_collections.ConfigDict | dict | None = None) -> ml_collections.ConfigDict:
        """`name`'s defaults overridden by `config`, validated; raises KeyError for an unknown name or
        field and OptionError for a bad value. Returns the resolved options."""
        cfg = resolve(config, self.default_config(name))
        fn = self._validators[name]
        if fn is not None:
            fn(cfg)
        return cfg


def resolve(
    config: ml_collections.ConfigDict | dict | None, defaults: ml_collections.ConfigDict
) -> ml_collections.ConfigDict:
    """Defaults overridden by `config`. Unknown fields raise a KeyError naming the field."""
    out = ml_collections.ConfigDict(defaults)
    out.lock()
    if config is not None:
        # values, not FieldReferences: a placeholder field in both would refuse the update
        out.update(config.to_dict() if isinstance(config, ml_collections.ConfigDict) else config)
    return out


# ---------------------------------------------------------------- config sections that select an entry
#
# One shape everywhere a config picks a registry entry:
#
#     rl.advantage.name = "grpo"          # the entry (or "module:entry": the module is imported first)
#     rl.advantage.grpo.eps = 1e-6        # each entry with options has its own subsection of defaults
#     rl.advantage.awpo.gate = "..."
#
# so `--config.rl.advantage.name=rloo` swaps the estimator with one override, and
# `--config.rl.advantage.awpo.mix_weight=0.5` sets an option of the entry it belongs to (a misspelt
# option fails, since the config is locked). Entries registered by a user module ("module:entry") take
# their registry defaults.


def entry_name(name: str) -> str:
    """`name`, importing `module` first when it is written "module:entry" (a user's own registry entry)."""
    if ":" in name:
        module, name = name.split(":", 1)
        importlib.import_module(module)
    return name


def selection(registry: Registry, name: str) -> ml_collections.ConfigDict:
    """A config section selecting `name`, with a subsection of defaults for every entry that has options."""
    section = ml_collections.ConfigDict({"name": name})
    for entry in registry.names():
        defaults = registry.default_config(entry)
        if len(defaults):
            section[entry] = defaults
    return section


def selected(registry: Registry, section) -> tuple[str, ml_collections.ConfigDict]:
    """(entry name, its resolved and validated options) of a selection section.

    Raises KeyError for an unknown entry or option, OptionError for a bad option value."""
    name = entry_name(section["name"])
    options = section[name] if name in section else None
    return name, registry.check(name, options)
