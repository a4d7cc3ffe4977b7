"""Model preparation shared by every trainer: the checkpoint's ModelConfig, the
parameters placed on their shardings, the reward tokens, the HF export, and the memory figures of a
compiled step (dry runs and the start-up fit check).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
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


def rules(name: str):
    """A rule set of rcgrpo_jax.sharding by config name (`sharding.train_rules` / `sharding.decode_rules`)."""
    table = {"train": sharding_lib.TRAIN_RULES, "decode": sharding_lib.DECODE_RULES}
    if name not in table:
        raise config_fields.ConfigError("sharding.train_rules", f"unknown rule set {name!r}; known: {', '.join(table)}")
    return table[name]


def param_shardings(abstract_params, mesh: Mesh, rules_name: str):
    r = rules(rules_name)
    return sharding_lib.param_shardings(abstract_params, mesh, r.params, r.logical)


@dataclasses.dataclass
class LoadedModel:
    """A checkpoint loaded onto the mesh: its ModelConfig, parameters (on `rules_name`'s shardings) and tokenizer."""

    config: Any
    params: Any
    tokenizer: Any


def load(config, path: str, mesh: Mesh, rules_name: str, *, reward_tokens: bool = False) -> LoadedModel:
    """The HF checkpoint at `path` on the mesh; with `reward_tokens` the two reward tokens are added when
    missing (new embedding rows = the mean of the known rows) and the parameters re-placed."""
    from transformers import AutoTokenizer

    model_cfg = model_config(config, path)
    params = load_hf(path, dtype=model_cfg.param_dtype, mesh=mesh, rules=rules(rules_name))[1]
    model = LoadedModel(model_cfg, params, AutoTokenizer.from_pretrained(path))
    if reward_tokens and not (
        reward_tokens_lib.known_by(model.tokenizer) and model_cfg.vocab_size >= len(model.tokenizer)
    ):
        model_cfg, params, tokenizer, _ = models.add_reward_tokens(model_cfg, params, model.tokenizer)
        p_sh = param_shardings(jax.eval_shape(lambda: params), mesh, rules_name)
        model = LoadedModel(model_cfg, jax.device_put(params, p_sh), tokenizer)
    return model


def export_hf(model_cfg, params, tokenizer, path: str) -> None:
    """The trained policy as an HF directory (safetensors + config + tokenizer) any HF server can load."""

    save_hf(model_cfg, params, path, tokenizer=tokenizer)


# ---------------------------------------------------------------- memory figures


def device_budget(config) -> int:
    """Bytes one device may use: what the device reports, else `memory.device_bytes`."""
    stats = None
    try:
        stats = jax.local_devices()[0].memory_stats()
    except Exception:  # CPU devices do not report
        pass
    if stats and stats.get("bytes_limit"):
        return int(stats["bytes_limit"])
    return int(config.memory.device_bytes)


def shard_bytes(tree, shardings) -> int:
    """Bytes one device holds of `tree` (abstract or concrete) under `shardings`."""
    total = 0
    for a, s in zip(jax.tree.leaves(tree), jax.tree.leaves(shardings)):
        total += int(np.prod(s.shard_shape(a.shape))) * jnp.dtype(a.dtype).itemsize
    return total


def program_bytes(compiled) -> int:
    """Bytes one device needs while a compiled program runs: its arguments, its outputs not aliased to
    (donated) arguments, its temporaries and its code (XLA's memory analysis)."""
    ma = compiled.memory_analysis()
    code = int(getattr(ma, "generated_code_size_in_bytes", 0))
    return (
        int(ma.argument_size_in_bytes)
        + int(ma.output_size_in_bytes)
        - int(ma.alias_size_in_bytes)
        + int(ma.temp_size_in_bytes)
        + code
    )


def memory_report(compiled, abstract_state, state_sh) -> dict[str, float]:
    """Per-device GB: parameters and optimizer state (from their shardings), and XLA's figures."""
    ma = compiled.memory_analysis()
    args = int(ma.argument_size_in_bytes)
    out = int(ma.output_size_in_bytes)
    alias = int(ma.alias_size_in_bytes)
    temp = int(ma.temp_size_in_bytes)
    code = int(getattr(ma, "generated_code_size_in_bytes", 0))
    return {
        "params_gb": shard_bytes(abstract_state.params, state_sh.params) / 1e9,
        "opt_state_gb": shard_bytes(abstract_state.opt_state, state_sh.opt_state) / 1e9,
        "arguments_gb": args / 1e9,
        "outputs_gb": out / 1e9,
        "aliased_gb": alias / 1e9,
        "temp_gb": temp / 1e9,
        "code_gb": code / 1e9,
        "peak_gb": (args + out - alias + temp + code) / 1e9,
    }


PHASES = ("update", "reference", "cast", "prefill", "session", "decode")  # session: its row copies


def memory_plan(
    phases: dict[str, float],
    resident: dict[str, float],
    resident_during: dict[str, Sequence[str]],
    limit_gb: float,
) -> dict[str, Any]:
    """The dry run's per-device memory plan (GB).

    phases: what each program needs beyond the resident buffers it reads (a phase a trainer does not
      run is 0); resident: the buffers that outlive a program (train state, reference, decode weights,
      KV cache); resident_during[phase]: the names of those that are alive while the phase runs.
      per_device_gb.resident = sum(resident); per_device_gb.peak = max over phases of
      (phase + its resident buffers); fits = peak <= limit_gb.
    """
    unknown = {n for names in resident_during.values() for n in names} - set(resident)
    if unknown or set(phases) - set(PHASES) or set(resident_during) != set(phases):
        raise ValueError(f"memory plan: unknown resident buffers {sorted(unknown)} or phases {sorted(phases)}")
    during = {ph: sum(resident[n] for n in resident_during[ph]) for ph in phases}
    totals = {ph: phases[ph] + during[ph] for ph in phases}
    peak_phase = max(totals, key=totals.get)
    per_device = {ph: float(phases.get(ph, 0.0)) for ph in PHASES}
    per_device["resident"] = float(sum(resident.values()))
    per_device["peak"] = float(totals[peak_phase])
    return {
        "per_device_gb": per_device,
        "resident_gb": {k: float(v) for k, v in resident.items()},
        "resident_during_gb": during,
        "peak_phase": peak_phase,
        "limit_gb": float(limit_gb),
        "fits": bool(per_device["peak"] <= limit_gb),
    }


def dry_run_config(config):
    """Dry runs need no weights: a copy that validates as if a checkpoint were given."""
    import ml_collections

    if config.model.path:
        return config
    c = ml_collections.ConfigDict(config.to_dict())
    c.model.build_tiny = True
    return c
