"""The HF checkpoint a stage starts from: `model.path`, or a tiny random one built offline under the workdir
whose tokenizer is trained on the configured task source's text (`models.tiny.build_tiny_checkpoint` fed by
`data.sources`). Trainers, evaluation and the ablation pipeline all start here, so it sits below them.
"""

from __future__ import annotations

import os

import jax

from rcgrpo_jax import multihost
from rcgrpo_jax.data import sources
from rcgrpo_jax.models.tiny import build_tiny_checkpoint


def model_dir(config, workdir: str) -> str:
    """The HF checkpoint to start from: `model.path`, or a tiny one built once under the workdir."""
    if config.model.path:
        return config.model.path
    path = os.path.join(workdir, "tiny_model")
    if not os.path.exists(os.path.join(path, "config.json")):
        if jax.process_index() == 0:
            build_tiny(config, path)
        multihost.sync("tiny_model")
    return path


def build_tiny(config, path: str, **sizes) -> str:
    """A random tiny checkpoint of `model.tiny_arch` whose tokenizer is trained on the configured task
    source's text, rendered through the checkpoint's own chat template (`model.tiny_tools_format`)."""

    corpus, chats = sources.tokenizer_corpus(config.data), sources.tokenizer_chats(config.data)
    return build_tiny_checkpoint(
        path,
        arch=config.model.tiny_arch,
        tools_format=config.model.tiny_tools_format,
        corpus=corpus,
        chats=chats,
        **sizes,
    )
