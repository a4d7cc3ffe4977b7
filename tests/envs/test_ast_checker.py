"""The official AST checker through our stand-in for `bfcl_eval.constants.model_config`: the checker is
the package's own code, the stand-in is only what the checker reads, and verdicts follow the checker."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rcgrpo_jax.envs import ast_checker

FUNC = {
    "name": "math.factorial",
    "description": "Factorial of n.",
    "parameters": {
        "type": "dict",
        "properties": {"n": {"type": "integer", "description": "n"}, "exact": {"type": "boolean", "description": "e"}},
        "required": ["n"],
    },
}
ANSWER = [{"math.factorial": {"n": [5], "exact": ["", True]}}]


def test_the_checker_is_the_package_code_and_the_stand_in_is_minimal():
    module = ast_checker.checker_module()
    import bfcl_eval

    assert Path(module.__file__).is_relative_to(Path(bfcl_eval.__file__).parent)  # the installed file
    # The stand-in served the checker's import only; it is not left in sys.modules.
    assert "bfcl_eval.constants.model_config" not in sys.modules
    assert set(module.MODEL_CONFIG_MAPPING) == {ast_checker.CHECKER_MODEL_NAME}
    entry = module.MODEL_CONFIG_MAPPING[ast_checker.CHECKER_MODEL_NAME]
    assert entry.underscore_to_dot is False
    assert "_" not in ast_checker.CHECKER_MODEL_NAME  # the checker maps "_" to "/" before the lookup
    assert ast_checker.checker_module() is module  # imported once


@pytest.mark.parametrize(
    "calls,valid,error_type",
    [
        ([{"math.factorial": {"n": 5}}], True, None),
        ([{"math.factorial": {"n": 5, "exact": True}}], True, None),
        ([{"math_factorial": {"n": 5}}], False, "simple_function_checker:wrong_func_name"),  # dots kept
        ([{"math.factorial": {}}], False, "simple_function_checker:missing_required"),
        ([{"math.factorial": {"n": 5, "k": 1}}], False, "simple_function_checker:unexpected_param"),
        ([{"math.factorial": {"n": "5"}}], False, "type_error:simple"),
        ([{"math.factorial": {"n": 6}}], False, "value_error:others"),
        ([{"math.factorial": {"n": 5}}] * 2, False, "simple_function_checker:wrong_count"),
    ],
)
def test_verdicts(calls, valid, error_type):
    v = ast_checker.check([FUNC], calls, ANSWER, "simple_python")
    assert v["valid"] is valid
    assert v.get("error_type") == error_type if not valid else True


def test_language_follows_the_category_name():
    from bfcl_eval.constants.enums import Language

    assert ast_checker.language_of("simple_java") is Language.JAVA
    assert ast_checker.language_of("simple_javascript") is Language.JAVASCRIPT
    assert ast_checker.language_of("live_multiple") is Language.PYTHON
    # Java values are strings in Java syntax; the checker converts them with its own converter.
    func = {**FUNC, "parameters": {**FUNC["parameters"], "properties": {"n": {"type": "long", "description": ""}}}}
    answer = [{"math.factorial": {"n": [5]}}]
    assert ast_checker.check([func], [{"math.factorial": {"n": "5L"}}], answer, "simple_java")["valid"] is True
    v = ast_checker.check([func], [{"math.factorial": {"n": 5}}], answer, "simple_java")
    assert v["valid"] is False and v["error_type"] == "type_error:java"


def test_an_exception_inside_the_checker_is_an_invalid_verdict():
    broken = {"name": "f", "description": "", "parameters": {"type": "dict"}}  # no properties: KeyError inside
    v = ast_checker.check([broken], [{"f": {}}], [{"f": {}}], "simple_python")
    assert v["valid"] is False and v["error_type"] == ast_checker.CHECKER_ERROR
    assert "KeyError" in v["error"][0]
