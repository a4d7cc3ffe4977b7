"""Tiny HF-format checkpoints built offline: random weights, a trained BPE tokenizer, a tool-aware chat template.

Tests and the CPU quickstart need real checkpoint directories (config.json + model.safetensors +
tokenizer files with a chat template) without downloading anything. `build_tiny_checkpoint` makes
one for any of three families in about a second:

- weights: `Qwen2ForCausalLM` / `Qwen3ForCausalLM` / `LlamaForCausalLM` random init under
  `torch.manual_seed(seed)`. ``qwen3`` has Qwen3's architecture (per-head q/k RMSNorm, no attention
  biases, tied embeddings as the small Qwen3s) with a ``head_dim`` of its own: by default twice
  hidden/heads, as Qwen3-0.6B (hidden 1024, 16 heads, head_dim 128), so a tiny Qwen3 always exercises
  head_dim != hidden/heads;
- tokenizer: byte-level BPE trained with `tokenizers` on a corpus (a built-in tool-calling text by
  default). For ``qwen2`` it uses exactly the NFC normalizer + regex split + byte-level
  pre-tokenisation that transformers' `Qwen2Tokenizer` rebuilds on load (AutoTokenizer on a qwen2
  directory ignores the saved pre-tokenizer and applies its own), so `tokenizers.Tokenizer.from_file`
  and `AutoTokenizer.from_pretrained` give the same ids. ``qwen3`` uses the same tokenizer (Qwen3 ships
  `Qwen2Tokenizer`) plus Qwen3's ``<think>`` / ``</think>`` added tokens. For ``llama`` the tokenizer config names
  `PreTrainedTokenizerFast` (as LLaMA 3 checkpoints do), which loads tokenizer.json as saved; it
  uses the LLaMA 3 split regex (digits in groups of up to three) and a BOS post-processor;
- chat template: our own Jinja, in each family's style (see `QWEN2_CHAT_TEMPLATE`,
  `LLAMA_CHAT_TEMPLATE`; ``qwen3`` uses the Qwen2-style Hermes template, not Qwen3's official one, which
  drops past reasoning and so needs the re-render mode: that template is tested on its own in
  tests/rollout/test_render_modes.py); all are append-only, which `rcgrpo_jax.chat.render_delta` relies on, and
  render an assistant message with ``tool_calls`` exactly as `rcgrpo_jax.chat.get_parser(f).format`
  writes it.
"""

from __future__ import annotations

import json
import os
from typing import Iterable

from rcgrpo_jax import model_families

# Pre-tokenisation regexes. Qwen2's is the one in transformers' tokenization_qwen2.py; LLaMA 3's
# differs only in grouping digits by up to three.
QWEN2_SPLIT_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
LLAMA3_SPLIT_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"""
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

# Templates. Whitespace is written explicitly ({{- ... }} everywhere) so the text is exactly what we
# state. A tool call renders as `{"name": <tojson>, "arguments"|"parameters": <tojson>}`, which is
# `json.dumps(..., ensure_ascii=False)` of the same dict, i.e. what the parsers' `format` writes.
_CALL_JSON = (
    "{%- set fn = call.function if call.function is defined else call %}"
    "{%- set args = fn.arguments if fn.arguments is defined else {} %}"
    "{{- '{\"name\": ' + (fn.name | tojson) + ', \"ARGKEY\": ' }}"
    "{%- if args is string %}{{- args }}{%- else %}{{- args | tojson }}{%- endif %}"
    "{{- '}' }}"
)

# How a Qwen2-style system prompt lists the tools. "json": one JSON schema per line, as Qwen2.5 does
# (~70 tokens per tool with a tiny tokenizer). "signatures": one line `Tools: cd(folder) mv(source,
# destination) ...` with no default system text, for models small enough that prompt length dominates
# their training time (the CPU quickstart's world: the prompt goes from ~560 tokens to ~30).
_QWEN2_TOOLS = {
    "json": (
        "You are a helpful assistant.",
        "{{- '\\n\\n# Tools\\n\\nYou can call functions to help with the request. Their signatures are "
        "listed below inside <tools></tools>:\\n<tools>' }}"
        "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
        "{{- '\\n</tools>\\n\\nTo call a function, write one JSON object per call inside <tool_call></tool_call> "
        "tags:\\n<tool_call>\\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\\n</tool_call>' }}",
    ),
    "signatures": (
        "",
        "{%- if system %}{{- '\\n' }}{%- endif %}"
        "{{- 'Tools:' }}"
        "{%- for tool in tools %}"
        "{%- set fn = tool.function if tool.function is defined else tool %}"
        "{%- set props = fn.parameters.properties if fn.parameters is defined and fn.parameters.properties is defined "
        "else {} %}"
        "{{- ' ' + fn.name + '(' + (props | list | join(', ')) + ')' }}"
        "{%- endfor %}",
    ),
}
TOOLS_FORMATS = tuple(_QWEN2_TOOLS)


def qwen2_chat_template(tools_format: str = "json") -> str:
    """The Qwen2-style (Hermes tool calls) template with the given tool list format."""
    if tools_format not in _QWEN2_TOOLS:
        raise ValueError(f"tools_format must be one of {TOOLS_FORMATS}, got {tools_format!r}")
    default_system, tools_block = _QWEN2_TOOLS[tools_format]
    return (
        "{%- if messages and messages[0].role == 'system' %}"
        "{%- set system = messages[0].content %}{%- set rest = messages[1:] %}"
        "{%- else %}{%- set system = '" + default_system + "' %}{%- set rest = messages %}{%- endif %}"
        "{{- '<|im_start|>system\\n' + system }}"
        "{%- if tools %}" + tools_block + "{%- endif %}"
        "{{- '<|im_end|>\\n' }}"
        "{%- for m in rest %}"
        "{%- if m.role == 'assistant' %}"
        "{{- '<|im_start|>assistant\\n' }}"
        "{%- if m.content %}{{- m.content }}{%- endif %}"
        "{%- if m.tool_calls %}"
        "{%- for call in m.tool_calls %}"
        "{%- if m.content or not loop.first %}{{- '\\n' }}{%- endif %}"
        "{{- '<tool_call>\\n' }}" + _CALL_JSON.replace("ARGKEY", "arguments") + "{{- '\\n</tool_call>' }}"
        "{%- endfor %}"
        "{%- endif %}"
        "{{- '<|im_end|>\\n' }}"
        "{%- elif m.role == 'tool' %}"
        "{%- if loop.first or loop.previtem.role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
        "{{- '\\n<tool_response>\\n' }}"
        "{%- if m.content is string %}{{- m.content }}{%- else %}{{- m.content | tojson }}{%- endif %}"
        "{{- '\\n</tool_response>' }}"
        "{%- if loop.last or loop.nextitem.role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
        "{%- else %}"
        "{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
        "{%- endif %}"
        "{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
    )


QWEN2_CHAT_TEMPLATE = qwen2_chat_template("json")

LLAMA_CHAT_TEMPLATE = (
    "{{- bos_token }}"
    "{%- if messages and messages[0].role == 'system' %}"
    "{%- set system = messages[0].content %}{%- set rest = messages[1:] %}"
    "{%- else %}{%- set system = '' %}{%- set rest = messages %}{%- endif %}"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}"
    "{%- if tools %}{{- 'Environment: ipython\\n\\n' }}{%- endif %}"
    "{{- system + '<|eot_id|>' }}"
    "{%- set ns = namespace(tools_shown=false) %}"
    "{%- for m in rest %}"
    "{%- if m.role == 'user' %}"
    "{{- '<|start_header_id|>user<|end_header_id|>\\n\\n' }}"
    "{%- if tools and not ns.tools_shown %}"
    "{{- 'You can call the functions below. To call them, answer with JSON objects only, each of the form "
    "{\"name\": function name, \"parameters\": object of argument names and values}, separated by \"; \" "
    "when there are several. Do not use variables.\\n\\n' }}"
    "{%- for tool in tools %}{{- (tool | tojson) + '\\n\\n' }}{%- endfor %}"
    "{%- set ns.tools_shown = true %}"
    "{%- endif %}"
    "{{- m.content + '<|eot_id|>' }}"
    "{%- elif m.role == 'assistant' %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{%- if m.tool_calls %}"
    "{%- for call in m.tool_calls %}"
    "{%- if not loop.first %}{{- '; ' }}{%- endif %}" + _CALL_JSON.replace("ARGKEY", "parameters") + "{%- endfor %}"
    "{%- elif m.content %}{{- m.content }}{%- endif %}"
    "{{- '<|eot_id|>' }}"
    "{%- elif m.role == 'tool' or m.role == 'ipython' %}"
    "{{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' }}"
    "{%- if m.content is string %}{{- m.content }}{%- else %}{{- m.content | tojson }}{%- endif %}"
    "{{- '<|eot_id|>' }}"
    "{%- else %}"
    "{{- '<|start_header_id|>' + m.role + '<|end_header_id|>\\n\\n' + m.content + '<|eot_id|>' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)

# Per-family tokenizer facts: special tokens (appended after the BPE vocab, as in the real models),
# non-special added tokens (kept by decode(skip_special_tokens=True), so a parser still sees them),
# and the named roles.
_FAMILY = {
    "qwen2": dict(
        special=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        added=["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"],
        bos=None,
        eos="<|im_end|>",
        pad="<|endoftext|>",
        stops=["<|im_end|>", "<|endoftext|>"],
        template=QWEN2_CHAT_TEMPLATE,
        tokenizer_class="Qwen2Tokenizer",
        rope_theta=1_000_000.0,
        tie=True,
    ),
    "llama": dict(
        special=[
            "<|begin_of_text|>",
            "<|end_of_text|>",
            "<|start_header_id|>",
            "<|end_header_id|>",
            "<|eot_id|>",
            "<|eom_id|>",
            "<|python_tag|>",
        ],
        added=[],
        bos="<|begin_of_text|>",
        eos="<|eot_id|>",
        pad="<|end_of_text|>",
        stops=["<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"],
        template=LLAMA_CHAT_TEMPLATE,
        tokenizer_class="PreTrainedTokenizerFast",
        rope_theta=500_000.0,
        tie=False,
    ),
}
# Qwen3: Qwen2's tokenizer and Hermes tool calls, plus the reasoning tags as (non-special) added tokens.
_FAMILY["qwen3"] = dict(_FAMILY["qwen2"], added=[*_FAMILY["qwen2"]["added"], "<think>", "</think>"], tie=True)
ARCHS = tuple(_FAMILY)
TINY_SIZES = dict(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=128)
TINY_VOCAB = 1024  # `build_tiny_checkpoint`'s tokenizer target; a built checkpoint's vocab is its tokenizer's
# The arguments of `build_tiny_checkpoint` that shape its config.json, all that `tiny_architecture` takes.
ARCHITECTURE_ARGS = (
    *TINY_SIZES,
    "head_dim",
    "rope_theta",
    "tie_word_embeddings",
    "tokenizer_vocab_size",
)
QWEN_STYLE = ("qwen2", "qwen3")  # the archs with Qwen's tokenizer and the Qwen2-style template


def default_corpus() -> list[str]:
    """A small deterministic corpus of BFCL-like tool-calling text (schemas, calls, results, chat)."""
    tools = {
        "cd": ("Change the current working directory to the folder.", {"folder": "string"}),
        "ls": ("List the contents of the current directory.", {"a": "boolean"}),
        "mv": ("Move a file or directory from one location to another.", {"source": "string", "destination": "string"}),
        "cp": ("Copy a file or directory from one location to another.", {"source": "string", "destination": "string"}),
        "grep": ("Search for lines in a file that match a pattern.", {"file_name": "string", "pattern": "string"}),
        "mkdir": ("Create a new directory in the current directory.", {"dir_name": "string"}),
        "touch": ("Create a new file in the current directory.", {"file_name": "string"}),
        "echo": ("Write content to a file or display it.", {"content": "string", "file_name": "string"}),
        "sort": ("Sort the contents of a file line by line.", {"file_name": "string"}),
        "wc": (
            "Count the number of lines, words, and characters in a file.",
            {"file_name": "string", "mode": "string"},
        ),
        "post_tweet": ("Post a tweet for the authenticated user.", {"content": "string", "tags": "array"}),
        "send_message": ("Send a message to a user.", {"receiver_id": "string", "message": "string"}),
        "get_stock_info": ("Get the details of a stock.", {"symbol": "string"}),
        "place_order": (
            "Place an order to buy or sell a stock.",
            {"order_type": "string", "symbol": "string", "price": "float", "amount": "integer"},
        ),
        "book_flight": (
            "Book a flight given the travel details.",
            {"access_token": "string", "travel_date": "string", "travel_from": "string", "travel_to": "string"},
        ),
        "fillFuelTank": ("Fill the fuel tank of the vehicle.", {"fuelAmount": "float"}),
        "startEngine": ("Start the engine of the vehicle.", {"ignitionMode": "string"}),
        "create_ticket": (
            "Create a support ticket.",
            {"title": "string", "description": "string", "priority": "integer"},
        ),
        "mean": ("Calculate the mean of a list of numbers.", {"numbers": "array"}),
    }
    note = " Note that the provided function is in Python 3 syntax."
    lines = []
    for name, (desc, params) in tools.items():
        schema = {
            "type": "function",
            "function": {
                "name": name,
                "description": desc + note,
                "parameters": {
                    "type": "dict",
                    "properties": {
                        p: {"type": t, "description": f"The {p.replace('_', ' ')}."} for p, t in params.items()
                    },
                    "required": list(params),
                },
            },
        }
        lines.append(json.dumps(schema))
        example = {
            p: {"string": f"{p}_value", "boolean": True, "array": ["a", "b"], "float": 12.5, "integer": 3}[t]
            for p, t in params.items()
        }
        lines.append("<tool_call>\n" + json.dumps({"name": name, "arguments": example}) + "\n</tool_call>")
        lines.append(json.dumps({"name": name, "parameters": example}))
    lines += [
        "You are a helpful assistant. You can call functions to help with the request.",
        "Please move the file final_report.pdf into the folder temp, then list what is in temp.",
        "I have updated some more functions you can choose from. What about now?",
        '{"current_working_directory": "document"}',
        '{"result": ["report.txt", "notes.md", "data.csv"]}',
        "Error during execution: No such file or directory.",
        "The order 12345 was placed at 150.75 dollars.",
        "Done! The files were moved and the tweet was posted with the tags #python and #jax.",
        "Unicode: café, naïve, Zürich, Ελληνικά, русский, 中文文本, 日本語, 한국어, emoji 🚀✨.",
        "Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 2024 3.14159 -7 1e-6",
    ]
    return lines


def _train_tokenizer(arch: str, corpus: Iterable[str], vocab_target: int):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    fam = _FAMILY[arch]
    tok = Tokenizer(models.BPE(dropout=None, unk_token=None, fuse_unk=False, byte_fallback=False))
    regex = QWEN2_SPLIT_REGEX if arch in QWEN_STYLE else LLAMA3_SPLIT_REGEX
    tok.normalizer = normalizers.NFC() if arch in QWEN_STYLE else None
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_target,
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tok.train_from_iterator(list(corpus), trainer=trainer)
    tok.add_special_tokens(fam["special"])
    tok.add_tokens(fam["added"])
    if arch == "llama":
        bos = fam["bos"]
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.token_to_id(bos))]
        )
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def build_tiny_tokenizer(
    path: str | os.PathLike,
    *,
    arch: str = "qwen2",
    corpus: Iterable[str] | None = None,
    tokenizer_vocab_size: int = TINY_VOCAB,
    model_max_length: int = 32768,
    tools_format: str = "json",
    chats: Iterable[dict] | None = None,
) -> str:
    """Write only the tokenizer files (tokenizer.json, tokenizer_config.json, chat template) to `path`.

    Cheap (no torch): enough for code that renders chats and parses tool calls.
    """
    _write_tokenizer(os.fspath(path), arch, corpus, tokenizer_vocab_size, model_max_length, tools_format, chats)
    return os.fspath(path)


def chat_template(arch: str, tools_format: str = "json") -> str:
    if arch not in _FAMILY:
        raise ValueError(f"arch must be one of {ARCHS}, got {arch!r}")
    if arch in QWEN_STYLE:
        return qwen2_chat_template(tools_format)
    if tools_format != "json":
        raise ValueError(f"tools_format {tools_format!r} is only available for arch in {QWEN_STYLE}")
    return _FAMILY[arch]["template"]


def render_chats(template: str, chats: Iterable[dict], bos_token: str | None = None) -> list[str]:
    """Each chat ({"messages": [...], "tools": [...]}) rendered by `template`, as transformers renders it
    (sandboxed Jinja, `tojson` = `json.dumps(ensure_ascii=False)`). Used to train the tokenizer on the text
    the model will really read: template boilerplate and tool lists then become a few tokens each."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x, indent=None: json.dumps(x, ensure_ascii=False, indent=indent)
    compiled = env.from_string(template)
    return [
        compiled.render(
            messages=c["messages"], tools=c.get("tools"), add_generation_prompt=False, bos_token=bos_token or ""
        )
        for c in chats
    ]


def _write_tokenizer(
    path: str,
    arch: str,
    corpus: Iterable[str] | None,
    vocab_target: int,
    max_len: int,
    tools_format: str = "json",
    chats: Iterable[dict] | None = None,
):
    import transformers

    template = chat_template(arch, tools_format)
    fam = _FAMILY[arch]
    os.makedirs(path, exist_ok=True)
    texts = list(default_corpus() if corpus is None else corpus)
    if chats is not None:
        texts += render_chats(template, chats, fam["bos"])
    tok = _train_tokenizer(arch, texts, vocab_target)
    hf_tok = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=fam["bos"],
        eos_token=fam["eos"],
        pad_token=fam["pad"],
        model_max_length=max_len,
        clean_up_tokenization_spaces=False,
    )
    hf_tok.chat_template = template
    hf_tok.save_pretrained(path)
    # Name the class AutoTokenizer should load (see the module docstring).
    cfg_path = os.path.join(path, "tokenizer_config.json")
    with open(cfg_path) as f:
        tok_cfg = json.load(f)
    tok_cfg["tokenizer_class"] = fam["tokenizer_class"]
    with open(cfg_path, "w") as f:
        json.dump(tok_cfg, f, indent=2, ensure_ascii=False)
    return tok


def tiny_architecture(arch: str = "qwen2", **sizes) -> dict:
    """The config.json fields of `build_tiny_checkpoint(arch=arch, **sizes)` without building it (dry runs and the
    lowering proof of the `tiny` preset; the benchmarks' quickstart model). `sizes`: any of the builder's
    `ARCHITECTURE_ARGS`, its defaults for the rest; another name raises TypeError. The vocabulary is the BPE
    target (`tokenizer_vocab_size`, default `TINY_VOCAB`): a built checkpoint's vocabulary is its trained
    tokenizer's, at most that plus its special tokens (651 on the default corpus)."""
    if arch not in _FAMILY:
        raise ValueError(f"tiny arch {arch!r}: expected one of {ARCHS}")
    unknown = sorted(set(sizes) - set(ARCHITECTURE_ARGS))
    if unknown:
        raise TypeError(f"tiny_architecture: unknown size(s) {unknown}; known: {', '.join(ARCHITECTURE_ARGS)}")
    fam, row = _FAMILY[arch], model_families.get(arch)
    s = {**TINY_SIZES, **sizes}
    hf = {
        "model_type": row.model_type,
        "vocab_size": int(sizes.get("tokenizer_vocab_size", TINY_VOCAB)),
        "hidden_size": s["hidden_size"],
        "intermediate_size": s["intermediate_size"],
        "num_hidden_layers": s["num_layers"],
        "num_attention_heads": s["num_heads"],
        "num_key_value_heads": s["num_kv_heads"],
        "rope_theta": float(sizes.get("rope_theta", fam["rope_theta"])),
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": bool(sizes.get("tie_word_embeddings", fam["tie"])),
        "max_position_embeddings": 32768,
        "torch_dtype": "float32",
        **dict(row.hf_extra),
    }
    head_dim = _head_dim(arch, s["hidden_size"], s["num_heads"], sizes.get("head_dim"))
    if head_dim is not None:
        hf["head_dim"] = head_dim
    if row.attention_bias != "always":
        hf["attention_bias"] = False
    return hf


def _head_dim(arch: str, hidden_size: int, num_heads: int, head_dim: int | None) -> int | None:
    """The head_dim a tiny checkpoint's config.json writes: an explicit one for every family, else 2 x
    hidden/heads for qwen3 (the module docstring) and none (hidden/heads) for the others."""
    if head_dim is None and arch == "qwen3":
        head_dim = 2 * (hidden_size // num_heads)
    return None if head_dim is None else int(head_dim)


def build_tiny_checkpoint(
    path: str | os.PathLike,
    *,
    arch: str = "qwen2",
    hidden_size: int = TINY_SIZES["hidden_size"],
    num_layers: int = TINY_SIZES["num_layers"],
    num_heads: int = TINY_SIZES["num_heads"],
    num_kv_heads: int = TINY_SIZES["num_kv_heads"],
    head_dim: int | None = None,
    intermediate_size: int = TINY_SIZES["intermediate_size"],
    vocab_size: int | None = None,
    corpus: Iterable[str] | None = None,
    seed: int = 0,
    tie_word_embeddings: bool | None = None,
    rope_theta: float | None = None,
    rope_scaling: dict | None = None,
    max_position_embeddings: int = 32768,
    tokenizer_vocab_size: int = TINY_VOCAB,
    dtype: str = "float32",
    tools_format: str = "json",
    chats: Iterable[dict] | None = None,
) -> str:
    """Write a random-init HF checkpoint with a trained tokenizer and chat template to `path`.

    Args:
      arch: ``qwen2`` (Hermes-style tools, q/k/v bias), ``qwen3`` (Hermes-style tools, q/k RMSNorm, no
        bias) or ``llama`` (LLaMA 3.1-style tools).
      head_dim: per-head width; None = hidden/heads for qwen2 and llama, 2 x hidden/heads for qwen3
        (see the module docstring). An explicit value is written to config.json for every family.
      vocab_size: model vocabulary; None = the tokenizer's size. A larger value pads the embedding
        (real checkpoints do this); a smaller one is an error.
      corpus: texts to train the BPE on; None = `default_corpus()`.
      tools_format: how the qwen2 template lists tools: ``json`` (Qwen2.5's form) or ``signatures``
        (one short line, for CPU-sized models; see `_QWEN2_TOOLS`).
      chats: conversations ({"messages", "tools"}) rendered by the chat template and added to the
        BPE corpus, so the template's text and the tool list tokenise compactly.
      tie_word_embeddings, rope_theta: None = the family's usual value (qwen2: tied, 1e6;
        llama: untied, 5e5).
      rope_scaling: e.g. LLaMA 3.1's ``{"rope_type": "llama3", "factor": 8.0, ...}``.
      tokenizer_vocab_size: BPE target size before special tokens (reached only if the corpus
        allows that many merges).
      dtype: parameter dtype of the saved weights (``float32`` or ``bfloat16``).
    Returns the path as a string. Same arguments -> same files.
    """
    import torch
    import transformers

    path = os.fspath(path)
    tok = _write_tokenizer(path, arch, corpus, tokenizer_vocab_size, max_position_embeddings, tools_format, chats)
    fam = _FAMILY[arch]

    ids = {t: tok.token_to_id(t) for t in fam["special"] + fam["added"]}
    theta = fam["rope_theta"] if rope_theta is None else float(rope_theta)
    fields = dict(
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_position_embeddings,
        rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", **(rope_scaling or {}), "rope_theta": theta},
        tie_word_embeddings=fam["tie"] if tie_word_embeddings is None else tie_word_embeddings,
        bos_token_id=ids.get(fam["bos"]),
        eos_token_id=ids[fam["eos"]],
        pad_token_id=ids[fam["pad"]],
        dtype=dtype,
    )
    row = model_families.get(arch)  # the HF classes and fixed fields of the family
    config = _hf_config(row, arch, tok.get_vocab_size(with_added_tokens=True), vocab_size, head_dim, fields)
    model_cls = getattr(transformers, row.hf_architecture)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_cls(config).to(getattr(torch, dtype))
    model.generation_config = transformers.GenerationConfig(
        bos_token_id=ids.get(fam["bos"]), eos_token_id=[ids[t] for t in fam["stops"]], pad_token_id=ids[fam["pad"]]
    )
    model.save_pretrained(path)
    _add_legacy_rope_fields(path, theta, rope_scaling)
    return path


def _hf_config(row, arch: str, n_tokens: int, vocab_size: int | None, head_dim: int | None, fields: dict):
    """The transformers config of a tiny checkpoint: `fields` plus the vocabulary (None = the tokenizer's
    `n_tokens`; fewer is an error), head_dim (None = hidden/heads, 2 x that for qwen3; an explicit value is
    written for every family) and the family row's fixed fields (`model_families`)."""
    import transformers

    vocab_size = n_tokens if vocab_size is None else vocab_size
    if vocab_size < n_tokens:
        raise ValueError(f"vocab_size {vocab_size} is smaller than the tokenizer ({n_tokens} tokens)")
    common = dict(fields, vocab_size=vocab_size)
    head_dim = _head_dim(arch, fields["hidden_size"], fields["num_attention_heads"], head_dim)
    if head_dim is not None:
        common["head_dim"] = head_dim
    if row.attention_bias != "always":
        common["attention_bias"] = False
    return getattr(transformers, row.hf_config_class)(**row.hf_extra, **common)


def _add_legacy_rope_fields(path: str, theta: float, rope_scaling: dict | None) -> None:
    """Also write top-level ``rope_theta``/``rope_scaling`` as released Qwen2.5 / LLaMA 3.1 config.json
    files do (transformers 5 writes only ``rope_parameters``), so readers of either layout agree."""
    cfg_path = os.path.join(path, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg["rope_theta"] = theta
    cfg["rope_scaling"] = dict(rope_scaling) if rope_scaling else None
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
