"""Model preparation shared by every trainer: the checkpoint's ModelConfig, the
parameters placed on their shardings, the reward tokens and the HF export (the memory figures of a compiled
step are `train.memory`'s).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
from jax.sharding import Mesh

from rcgrpo_jax import config_fields, models
from rcgrpo_jax import sharding as sharding_lib
from rcgrpo_jax.config_lib import common
from rcgrpo_jax.models import reward_tokens as reward_tokens_lib
from rcgrpo_jax.models.config import ModelConfig
from rcgrpo_jax.models.hf_io import load_hf, save_hf
from rcgrpo_jax.models.tiny import tiny_architecture


def model_config(config, path_or_dict) -> Any:
    """ModelConfig of an HF directory (or config.json dict) with the run's dtype, remat and unroll."""

    cfg = ModelConfig.from_hf(
        path_or_dict,
        dtype=config.model.dtype,
        param_dtype=config.model.param_dtype,
        remat=bool(config.model.remat),
        scan_unroll=int(config.model.scan_unroll),
    )
    return dataclasses.replace(cfg, attention_impl=str(config.model.get("attention_impl", "auto")))


def abstract_model_config(config, *, extra_tokens: int = 0) -> Any:
    """The ModelConfig a dry run sizes: `model.path`'s, else the preset's published architecture (for a
    checkpoint built offline, `model.build_tiny`: the one it would build, `tiny.tiny_architecture`)."""
    if config.model.path:
        hf = config.model.path
    elif config.model.get("build_tiny"):
        hf = tiny_architecture(config.model.get("tiny_arch", "qwen2"))
    else:
        hf = common.hf_architecture(config.preset)
    cfg = model_config(config, hf)
    return dataclasses.replace(cfg, vocab_size=cfg.vocab_size + extra_tokens) if extra_tokens else cfg


def rules(name: str, field: str = "sharding.train_rules") -> sharding_lib.Rules:
    """A rule set of rcgrpo_jax.sharding by config name (`sharding.train_rules` / `sharding.decode_rules`); an
    unknown name is a ConfigError naming `field`."""
    table = {"train": sharding_lib.TRAIN_RULES, "decode": sharding_lib.DECODE_RULES}
    if name not in table:
        raise config_fields.ConfigError(field, f"unknown rule set {name!r}; known: {', '.join(table)}")
    return table[name]


def param_shardings(abstract_params, mesh: Mesh, rules_name: str):
    """The parameters' shardings under the rule set named `rules_name` (`rules`)."""
    return rules(rules_name).shardings(abstract_params, mesh)


@dataclasses.dataclass
class LoadedModel:
    """A checkpoint loaded onto the mesh: its ModelConfig, parameters (on a rule set's shardings) and tokenizer."""

    config: Any
    params: Any
    tokenizer: Any


def load(config, path: str, mesh: Mesh, rule_set: sharding_lib.Rules, *, reward_tokens: bool = False) -> LoadedModel:
    """The HF checkpoint at `path` on the mesh, its parameters on `rule_set`'s shardings (`rules`); with
    `reward_tokens` the two reward tokens are added when missing (new embedding rows = the mean of the known
    rows) and the parameters re-placed."""
    from transformers import AutoTokenizer

    model_cfg = model_config(config, path)
    params = load_hf(path, dtype=model_cfg.param_dtype, mesh=mesh, rules=rule_set)[1]
    model = LoadedModel(model_cfg, params, AutoTokenizer.from_pretrained(path))
    if reward_tokens and not (
        reward_tokens_lib.known_by(model.tokenizer) and model_cfg.vocab_size >= len(model.tokenizer)
    ):
        model_cfg, params, tokenizer, _ = models.add_reward_tokens(model_cfg, params, model.tokenizer)
        p_sh = rule_set.shardings(jax.eval_shape(lambda: params), mesh)
        model = LoadedModel(model_cfg, jax.device_put(params, p_sh), tokenizer)
    return model


def export_hf(model_cfg, params, tokenizer, path: str) -> None:
    """The trained policy as an HF directory (safetensors + config + tokenizer) any HF server can load."""

    save_hf(model_cfg, params, path, tokenizer=tokenizer)


def dry_run_config(config):
    """Dry runs need no weights: a copy that validates as if a checkpoint were given."""
    import ml_collections

    if config.model.path:
        return config
    c = ml_collections.ConfigDict(config.to_dict())
    c.model.build_tiny = True
    return c
