"""Tiny offline HF checkpoints: load with transformers, identical ids on both tokenizer paths, determinism."""

import json
import os
import unicodedata

import numpy as np
import pytest
import tokenizers
import torch
import transformers
from hypothesis import given, settings
from hypothesis import strategies as st

from rcgrpo_jax.models.tiny import build_tiny_checkpoint

ARCHS = ("qwen2", "llama")


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    """Default-size checkpoint per arch, plus both tokenizer loading paths."""
    out = {}
    for arch in ARCHS:
        path = build_tiny_checkpoint(tmp_path_factory.mktemp(arch), arch=arch)
        out[arch] = dict(
            path=path,
            auto=transformers.AutoTokenizer.from_pretrained(path),
            raw=tokenizers.Tokenizer.from_file(os.path.join(path, "tokenizer.json")),
        )
    return out


@pytest.mark.parametrize("arch", ARCHS)
def test_loads_with_transformers_with_the_requested_shape(ckpts, arch):
    c = ckpts[arch]
    model = transformers.AutoModelForCausalLM.from_pretrained(c["path"])
    tok = c["auto"]
    assert type(model).__name__ == {"qwen2": "Qwen2ForCausalLM", "llama": "LlamaForCausalLM"}[arch]
    assert type(tok).__name__ == {"qwen2": "Qwen2Tokenizer", "llama": "TokenizersBackend"}[arch]
    cfg = model.config
    assert (
        cfg.hidden_size,
        cfg.num_hidden_layers,
        cfg.num_attention_heads,
        cfg.num_key_value_heads,
        cfg.intermediate_size,
    ) == (64, 2, 4, 2, 128)
    assert cfg.vocab_size == len(tok)
    assert cfg.tie_word_embeddings == (arch == "qwen2")
    raw_cfg = json.load(open(os.path.join(c["path"], "config.json")))
    theta = {"qwen2": 1e6, "llama": 5e5}[arch]
    assert raw_cfg["rope_theta"] == theta and cfg.rope_parameters["rope_theta"] == theta
    eos = {"qwen2": "<|im_end|>", "llama": "<|eot_id|>"}[arch]
    assert cfg.eos_token_id == tok.convert_tokens_to_ids(eos) == tok.eos_token_id
    gen = json.load(open(os.path.join(c["path"], "generation_config.json")))
    assert tok.convert_tokens_to_ids(eos) in gen["eos_token_id"]
    prompt = tok.apply_chat_template([{"role": "user", "content": "ls"}], tokenize=False, add_generation_prompt=True)
    ids = torch.tensor([tok(prompt, add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        logits = model(ids).logits
    assert logits.shape == (1, ids.shape[1], len(tok)) and torch.isfinite(logits).all()


@pytest.mark.parametrize("arch", ARCHS)
def test_special_tokens_are_single_ids_after_the_bpe_vocab(ckpts, arch):
    tok = ckpts[arch]["auto"]
    names = {
        "qwen2": [
            "<|endoftext|>",
            "<|im_start|>",
            "<|im_end|>",
            "<tool_call>",
            "</tool_call>",
            "<tool_response>",
            "</tool_response>",
        ],
        "llama": [
            "<|begin_of_text|>",
            "<|end_of_text|>",
            "<|start_header_id|>",
            "<|end_header_id|>",
            "<|eot_id|>",
            "<|eom_id|>",
            "<|python_tag|>",
        ],
    }[arch]
    ids = [tok(n, add_special_tokens=False)["input_ids"] for n in names]
    assert all(len(i) == 1 for i in ids)
    assert sorted(i[0] for i in ids) == list(range(len(tok) - len(names), len(tok)))
    if arch == "qwen2":  # tool tags survive skip_special_tokens so a parser still sees them
        text = "<tool_call>\n{}\n</tool_call><|im_end|>"
        assert tok.decode(tok(text)["input_ids"], skip_special_tokens=True) == "<tool_call>\n{}\n</tool_call>"


TEXTS = [
    "Hello world",
    "  leading and   inner   spaces\t\ttabs\n\n\nnewlines \r\n",
    "x = 1234567890 + 3.14159e-7",
    '{"name": "mv", "arguments": {"source": "a.txt", "destination": "b/"}}',
    "café naïve Zürich — “quotes” ‘single’ …",
    "e\u0301 versus \u00e9, A\u030a, \ufb01 ligature",  # NFC matters
    "Ελληνικά русский 中文文本 日本語のテキスト 한국어 العربية हिन्दी",
    "emoji 🚀✨👩‍👩‍👧 flags 🇩🇪",
    "I'm, you're, they'LL, it's, we'VE",
    "<|im_start|>user\nhi<|im_end|>\n<tool_call>x</tool_call>",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhey<|eot_id|>",
    "\u0000\u001f\u007f\ufeff",
]


@pytest.mark.parametrize("arch", ARCHS)
def test_both_tokenizer_loading_paths_give_identical_ids(ckpts, arch):
    auto, raw = ckpts[arch]["auto"], ckpts[arch]["raw"]
    for text in TEXTS:
        for special in (False, True):
            assert (
                auto(text, add_special_tokens=special)["input_ids"] == raw.encode(text, add_special_tokens=special).ids
            ), (text, special)
    if arch == "llama":  # the BOS post-processor is part of tokenizer.json and survives loading
        assert auto("hi")["input_ids"][0] == auto.bos_token_id
    else:
        assert auto("hi")["input_ids"] == auto("hi", add_special_tokens=False)["input_ids"]


@settings(max_examples=100, deadline=None)
@given(text=st.text(st.characters(blacklist_categories=("Cs",)), max_size=40))
def test_identical_ids_and_decode_round_trip_on_random_text(ckpts, text):
    for arch in ARCHS:
        auto, raw = ckpts[arch]["auto"], ckpts[arch]["raw"]
        ids = auto(text, add_special_tokens=False)["input_ids"]
        assert ids == raw.encode(text, add_special_tokens=False).ids
        # qwen2 normalises to NFC first (as Qwen2Tokenizer does); llama keeps the text as is.
        expect = unicodedata.normalize("NFC", text) if arch == "qwen2" else text
        assert auto.decode(ids) == expect


def test_same_seed_same_files_other_seed_other_weights(tmp_path):
    kw = dict(arch="llama", hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=32)
    a = build_tiny_checkpoint(tmp_path / "a", seed=3, **kw)
    b = build_tiny_checkpoint(tmp_path / "b", seed=3, **kw)
    c = build_tiny_checkpoint(tmp_path / "c", seed=4, **kw)
    for name in sorted(os.listdir(a)):
        assert open(os.path.join(a, name), "rb").read() == open(os.path.join(b, name), "rb").read(), name
    wa = transformers.AutoModelForCausalLM.from_pretrained(a).state_dict()
    wc = transformers.AutoModelForCausalLM.from_pretrained(c).state_dict()
    assert not np.allclose(wa["model.embed_tokens.weight"].numpy(), wc["model.embed_tokens.weight"].numpy())


def test_padded_vocab_rope_scaling_and_custom_corpus(tmp_path):
    scaling = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    corpus = ["alpha beta gamma delta"] * 50
    path = build_tiny_checkpoint(
        tmp_path / "p",
        arch="llama",
        hidden_size=16,
        num_layers=1,
        num_heads=2,
        num_kv_heads=1,
        intermediate_size=32,
        vocab_size=512,
        corpus=corpus,
        rope_scaling=scaling,
        tie_word_embeddings=True,
    )
    tok = transformers.AutoTokenizer.from_pretrained(path)
    cfg = transformers.AutoConfig.from_pretrained(path)
    assert cfg.vocab_size == 512 > len(tok) and cfg.tie_word_embeddings
    assert cfg.rope_parameters["rope_type"] == "llama3" and cfg.rope_parameters["factor"] == 8.0
    assert json.load(open(os.path.join(path, "config.json")))["rope_scaling"] == scaling
    assert tok("alpha beta", add_special_tokens=False)["input_ids"] == [
        tok.convert_tokens_to_ids("alpha"),
        tok.convert_tokens_to_ids("Ġbeta"),
    ]
    with pytest.raises(ValueError, match="smaller than the tokenizer"):
        build_tiny_checkpoint(tmp_path / "q", arch="qwen2", vocab_size=10)
    with pytest.raises(ValueError, match="arch"):
        build_tiny_checkpoint(tmp_path / "r", arch="gpt2")


CHAT = {
    "messages": [
        {"role": "user", "content": 'Move "bako.txt" to "ri".'},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "type": "function",
                    "function": {"name": "mv", "arguments": {"source": "bako.txt", "destination": "ri"}},
                }
            ],
        },
        {"role": "tool", "content": "None"},
    ],
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "mv",
                "description": "Move a file.",
                "parameters": {
                    "type": "object",
                    "properties": {"source": {"type": "string"}, "destination": {"type": "string"}},
                    "required": ["source", "destination"],
                },
            },
        },
        {
            "type": "function",
            "function": {"name": "ls", "description": "List.", "parameters": {"type": "object", "properties": {}}},
        },
    ],
}


def test_signature_tool_list_and_chats_in_the_tokenizer_corpus(tmp_path):
    from rcgrpo_jax.chat import get_parser
    from rcgrpo_jax.models.tiny import chat_template, render_chats

    small = dict(
        hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=32, tokenizer_vocab_size=400
    )
    plain = build_tiny_checkpoint(tmp_path / "plain", tools_format="signatures", **small)
    trained = build_tiny_checkpoint(tmp_path / "chats", tools_format="signatures", chats=[CHAT] * 20, **small)
    tok = transformers.AutoTokenizer.from_pretrained(trained)
    text = tok.apply_chat_template(CHAT["messages"], tools=CHAT["tools"], tokenize=False)
    # transformers renders exactly what render_chats (the corpus builder) renders
    assert render_chats(chat_template("qwen2", "signatures"), [CHAT]) == [text]
    assert text.startswith("<|im_start|>system\nTools: mv(source, destination) ls()<|im_end|>\n")
    # the assistant's call is the Hermes parser's own format, and parses back
    call = get_parser("hermes").format([{"name": "mv", "arguments": {"source": "bako.txt", "destination": "ri"}}])
    assert "<|im_start|>assistant\n" + call + "<|im_end|>" in text
    # the rendered chats in the corpus make the conversation shorter in tokens (here 76 vs 112)
    n_plain = len(transformers.AutoTokenizer.from_pretrained(plain)(text)["input_ids"])
    assert len(tok(text)["input_ids"]) < 0.8 * n_plain
    with pytest.raises(ValueError, match="tools_format"):
        build_tiny_checkpoint(tmp_path / "x", tools_format="yaml", **small)
    with pytest.raises(ValueError, match="only available"):
        build_tiny_checkpoint(tmp_path / "y", arch="llama", tools_format="signatures", **small)


@pytest.mark.parametrize("arch", ARCHS)
def test_tiny_architecture_is_the_built_checkpoints_without_its_vocabulary(ckpts, arch):
    """What a dry run and the lowering proof size for the tiny preset (`tiny_architecture`) is the model
    `build_tiny_checkpoint` builds, but for the vocabulary (its trained tokenizer's size) and token ids."""
    import dataclasses

    from rcgrpo_jax.models.config import ModelConfig
    from rcgrpo_jax.models.tiny import TINY_VOCAB, tiny_architecture

    built = ModelConfig.from_hf(ckpts[arch]["path"])
    sized = ModelConfig.from_hf(tiny_architecture(arch))
    assert sized.vocab_size == TINY_VOCAB and built.vocab_size <= TINY_VOCAB + 16  # the BPE target + specials
    same = {"vocab_size": 0, "bos_token_id": None, "eos_token_id": None}
    assert dataclasses.replace(sized, **same) == dataclasses.replace(built, **same)


def test_tiny_architecture_at_given_sizes_is_the_checkpoint_built_at_them(tmp_path):
    """`tiny_architecture(arch, **sizes)` takes the builder's architecture arguments (the quickstart budget's
    `model`: benchmarks.model_sizes' `world`) and sizes the checkpoint they build, but for the vocabulary."""
    import dataclasses

    from rcgrpo_jax.models.config import ModelConfig
    from rcgrpo_jax.models.tiny import ARCHITECTURE_ARGS, tiny_architecture

    sizes = dict(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64)
    sizes.update(head_dim=24, rope_theta=1e4, tokenizer_vocab_size=300)
    assert set(sizes) <= set(ARCHITECTURE_ARGS)
    built = ModelConfig.from_hf(build_tiny_checkpoint(tmp_path / "m", arch="qwen3", **sizes))
    sized = ModelConfig.from_hf(tiny_architecture("qwen3", **sizes))
    assert sized.vocab_size == 300 and 300 < built.vocab_size <= 300 + 9  # the BPE target + qwen3's 9 tokens
    assert (sized.head_dim, sized.rope_theta, sized.num_layers) == (24, 1e4, 1)
    same = {"vocab_size": 0, "bos_token_id": None, "eos_token_id": None}
    assert dataclasses.replace(sized, **same) == dataclasses.replace(built, **same)
    with pytest.raises(TypeError, match="unknown size"):
        tiny_architecture("qwen3", num_hidden_layers=2)
