"""BFCL's official single-turn AST checker, importable in a `--no-deps` install.

The checker is `bfcl_eval.eval_checker.ast_eval.ast_checker.ast_checker`; we call it unchanged. Its
module imports `MODEL_CONFIG_MAPPING` from `bfcl_eval.constants.model_config`, and that module imports
every API and local model handler of the package (anthropic, openai, tree_sitter, ...), none of which
our install has. The checker reads the mapping in exactly one place, `convert_func_name`:
``MODEL_CONFIG_MAPPING[model_name.replace("_", "/")].underscore_to_dot`` for a function name with a dot
(FC handlers of APIs that forbid dots send ``math.factorial`` as ``math_factorial``).

The way around it (`checker_module`): when `bfcl_eval.constants.model_config` is not already imported,
a minimal module of that name is put in `sys.modules` for the one import of the checker, and taken out
again right after (the checker keeps its reference to the mapping; nothing else sees the stand-in). It
holds only `MODEL_CONFIG_MAPPING = {CHECKER_MODEL_NAME: <underscore_to_dot=False>}` and says what it is
in its docstring. `underscore_to_dot=False` is right for us: our prompts show the function names as
BFCL writes them (dots included), as BFCL's own local FC handlers (Qwen, LLaMA-3.1) do, whose registry
entries have `underscore_to_dot=False`. When the real module is already imported (a full install), it is
used, and our one entry is added to its mapping. Nothing of the package is replaced: the checker, its
type converters and its constants are the package's own.

`check` runs the checker with the language BFCL's runner derives from the category (Java for
`*java*`, JavaScript for `*javascript*`, else Python) and the raw function docs (the runner loads
them with `include_language_specific_hint=False`), and turns an exception inside the checker (odd
model values can reach code paths the checker does not guard) into an invalid verdict.
"""

from __future__ import annotations

import dataclasses
import sys
import types
from typing import Any, Mapping, Sequence

from rcgrpo_jax.envs.isolation import import_bfcl

CHECKER_MODEL_NAME = "rcgrpo-jax"  # no "_": the checker maps "_" to "/" before the lookup
_MODEL_CONFIG = "bfcl_eval.constants.model_config"
_CHECKER = "bfcl_eval.eval_checker.ast_eval.ast_checker"
CHECKER_ERROR = "checker_error"  # error_type of an exception raised inside the official checker


@dataclasses.dataclass(frozen=True)
class _CheckerModelConfig:
    """The one field of bfcl_eval's `ModelConfig` that the AST checker reads."""

    underscore_to_dot: bool = False


def _stand_in() -> types.ModuleType:
    module = types.ModuleType(
        _MODEL_CONFIG,
        "Stand-in registered by rcgrpo_jax.envs.ast_checker for the import of the AST checker only: the real "
        "module imports every model handler (and their API clients); the checker only reads "
        "MODEL_CONFIG_MAPPING[name].underscore_to_dot.",
    )
    module.MODEL_CONFIG_MAPPING = {}
    return module


def checker_module() -> types.ModuleType:
    """The official `ast_checker` module, imported once (with the stand-in when needed), its mapping
    holding our model name."""
    module = sys.modules.get(_CHECKER)
    if module is None:
        import_bfcl("bfcl_eval.constants")  # the real parent package (a clear error when it is missing)
        if _MODEL_CONFIG in sys.modules:
            module = import_bfcl(_CHECKER)
        else:
            sys.modules[_MODEL_CONFIG] = _stand_in()
            try:
                module = import_bfcl(_CHECKER)
            finally:
                del sys.modules[_MODEL_CONFIG]
    module.MODEL_CONFIG_MAPPING.setdefault(CHECKER_MODEL_NAME, _CheckerModelConfig(underscore_to_dot=False))
    return module


def language_of(category: str):
    """BFCL's `Language` of a category, as its runner picks it (`is_java` / `is_js` test the name)."""
    enums = import_bfcl("bfcl_eval.constants.enums")
    if "java" in category and "javascript" not in category:
        return enums.Language.JAVA
    if "javascript" in category:
        return enums.Language.JAVASCRIPT
    return enums.Language.PYTHON


def check(
    functions: Sequence[Mapping[str, Any]],
    calls: Sequence[Mapping[str, Mapping[str, Any]]],
    possible_answer: Sequence[Mapping[str, Any]],
    category: str,
) -> dict[str, Any]:
    """The official verdict ``{"valid": bool, "error": [...], "error_type": str}`` of `calls`
    (``[{name: {arg: value}}]``) against an entry's `possible_answer` (its ``ground_truth``), for the
    entry's raw function docs `functions`. The checker's inputs are not modified by us (it may
    convert values internally)."""
    module = checker_module()
    try:
        verdict = module.ast_checker(
            list(functions), list(calls), list(possible_answer), language_of(category), category, CHECKER_MODEL_NAME
        )
    except Exception as err:  # noqa: BLE001 - a model's odd value must fail its entry, not the run
        return {"valid": False, "error": [f"{type(err).__name__}: {err}"[:500]], "error_type": CHECKER_ERROR}
    return dict(verdict)
