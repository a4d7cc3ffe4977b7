"""The paper models' official chat templates, read from the installed bfcl-eval package at test time.

bfcl-eval ships them as the text of the docstrings of its local-inference handlers' `_format_prompt`
methods (`model_handler/local_inference/llama_3_1.py`: LLaMA-3.1-Instruct, `qwen_fc.py`: Qwen3). The
handler modules import packages our `--no-deps` install lacks, and model output must never reach them,
so the files are read as text: `ast` finds the method and `ast.get_source_segment` gives its docstring's
*source* (the template's ``\\n`` and ``\\"`` escapes stay escapes, as in the tokenizer_config.json the
template came from; the evaluated docstring would turn them into characters). Nothing is copied into
the repository.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import pathlib
import re

HANDLERS = {"llama_3_1": "llama_3_1.py", "qwen3": "qwen_fc.py"}
NAMES = tuple(HANDLERS)


def handler_path(name: str) -> pathlib.Path:
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("bfcl_eval is not installed")
    root = pathlib.Path(list(spec.submodule_search_locations)[0])
    return root / "model_handler" / "local_inference" / HANDLERS[name]


@functools.cache
def official_template(name: str) -> str:
    """The Jinja chat template in `name`'s handler (``llama_3_1`` or ``qwen3``)."""
    path = handler_path(name)
    source = path.read_text(encoding="utf-8")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == "_format_prompt":
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                segment = ast.get_source_segment(source, first.value)
                break
    else:
        raise ValueError(f"no _format_prompt docstring in {path}")
    body = segment[3:-3] if segment.startswith(('"""', "'''")) else segment
    match = re.search(r'^\s*"chat_template":\s*$', body, flags=re.MULTILINE)
    if match is None:
        raise ValueError(f'no "chat_template": line in the _format_prompt docstring of {path}')
    return body[match.end() :].strip()


def with_official_template(tokenizer, name: str):
    """`tokenizer` with its chat template replaced by the official one (in place; returned)."""
    tokenizer.chat_template = official_template(name)
    return tokenizer
