"""The evaluation suites beside BFCL's own (API-Bank, MMLU-Pro): name -> `Suite`, filled by the suite modules.

A suite module (`eval.api_bank_run`, `eval.mmlu_pro_run`) calls `register` when it is imported; the eval stage
(`eval.run`) runs the ones that `eval.suite` names. The launcher's table (`rcgrpo_jax.stages`) imports the
package's suite modules, so every launch knows them all; code that calls `eval.run` itself imports the suite
modules it runs. A suite reads its data from the user's copy (`eval.<name>.path`). Imports nothing of the
package.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

Records = tuple[list[dict[str, Any]], dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class Suite:
    """One suite's entry points.

    load_checked(eval_cfg): reads and checks the suite's data at start-up, before any model loads (a bad path,
        layout or option raises ConfigError naming the field);
    records(eval_cfg, tokenizer, model_cfg, params, policy, *, mesh, progress) -> (one record per item, the
        suite's summary) under `policy` (model | oracle);
    markdown(summary, label) -> the suite's table in eval.md.
    """

    name: str
    load_checked: Callable[[Any], Any]
    records: Callable[..., Records]
    markdown: Callable[[dict[str, Any], str], str]


_SUITES: dict[str, Suite] = {}


def register(suite: Suite) -> Suite:
    """Adds `suite` under its name (a second suite of that name from another module raises ValueError)."""
    known = _SUITES.get(suite.name)
    if known is not None and known.records.__module__ != suite.records.__module__:
        raise ValueError(f"eval suite {suite.name!r} is already registered by {known.records.__module__}")
    _SUITES[suite.name] = suite
    return suite


def names() -> tuple[str, ...]:
    """The registered suites, sorted."""
    return tuple(sorted(_SUITES))


def get(name: str) -> Suite:
    try:
        return _SUITES[name]
    except KeyError:
        raise KeyError(f"unknown eval suite {name!r}; registered: {', '.join(names()) or 'none'}") from None
