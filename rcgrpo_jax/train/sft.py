"""Supervised fine-tuning (SFT baseline) and RCTP-FT: cross-entropy on assistant tokens only.

Host side: conversations (OpenAI chat JSONL: {"messages": [...], "tools": [...]}) are rendered with
the checkpoint's chat template into (tokens, loss_mask) arrays, exactly as the rollout engine would
see them (append-only segments), and grouped into length buckets so only a few shapes compile.
The order of examples is a pure function of (seed, step), so the step counter is the data position.

Device side: one jitted step = a scan over micro-batches summing (loss sum, token count) and
gradients, one exact token-mean, a guarded AdamW update (non-finite -> skipped). Parameters and
optimizer state are sharded by the FSDP rules; the state is donated.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import logging as absl_logging
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from rcgrpo_jax import config_checks
from rcgrpo_jax import sharding as sharding_lib
from rcgrpo_jax.train import checkpoint as ckpt_lib
from rcgrpo_jax.train import logging as log_lib
from rcgrpo_jax.train import loop as loop_lib
from rcgrpo_jax.train import optim as optim_lib
from rcgrpo_jax.train import state as state_lib

BATCH_AXES = ("data", "fsdp")  # the batch dimension is split over both (FSDP is data parallel too)


# ----------------------------------------------------------------------------------------------------
# Tokenisation: (tokens, loss_mask) from a conversation.


def _encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []


def tokenize_conversation(
    tokenizer, messages: Sequence[dict], tools: Sequence[dict] | None, end_of_turn: Sequence[int]
) -> tuple[np.ndarray, np.ndarray]:
    """(tokens int32 [T], loss_mask int32 [T]) with loss_mask = 1 exactly on assistant turns.

    The rendered conversation is cut into context and assistant pieces, each tokenised on its own, the
    way the rollout engine builds its context: prompt tokens, then the sampled turn (text up to and
    including its end-of-turn token), then the rendered delta (whatever the template writes after the
    end-of-turn token, e.g. Qwen's newline, belongs to the delta). So SFT trains on exactly the token
    sequences the policy meets when sampling. Raises NotAppendOnlyError if the template rewrites earlier
    turns for this conversation.
    """
    from rcgrpo_jax.chat import NotAppendOnlyError, render_text

    full = render_text(tokenizer, messages, tools, add_generation_prompt=False)
    ends = [tokenizer.convert_ids_to_tokens(int(i)) for i in end_of_turn]
    cuts: list[tuple[int, int]] = []  # (start, end) character spans of assistant turns
    for i, m in enumerate(messages):
        if m.get("role") != "assistant":
            continue
        before = render_text(tokenizer, messages[:i], tools, add_generation_prompt=True)
        upto = render_text(tokenizer, messages[: i + 1], tools, add_generation_prompt=False)
        if not (upto.startswith(before) and full.startswith(upto)):
            raise NotAppendOnlyError(f"chat template is not append-only at message {i}: prefix renders differ")
        turn = upto[len(before) :]
        stop = max((turn.rfind(e) + len(e) for e in ends if e in turn), default=len(turn))
        cuts.append((len(before), len(before) + stop))
    tokens: list[int] = []
    mask: list[int] = []
    pos = 0
    for start, end in cuts:
        ctx, turn = _encode(tokenizer, full[pos:start]), _encode(tokenizer, full[start:end])
        tokens += ctx + turn
        mask += [0] * len(ctx) + [1] * len(turn)
        pos = end
    tail = _encode(tokenizer, full[pos:])
    tokens += tail
    mask += [0] * len(tail)
    return np.asarray(tokens, np.int32), np.asarray(mask, np.int32)


def read_jsonl(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


# ----------------------------------------------------------------------------------------------------
# Dataset: bucketed, deterministic order.


@dataclasses.dataclass(frozen=True)
class SFTData:
    """Tokenised examples and the rule mapping a step to its batch."""

    tokens: tuple[np.ndarray, ...]
    loss_mask: tuple[np.ndarray, ...]
    buckets: tuple[int, ...]
    batch_size: int
    grad_accum: int
    seed: int
    pad_id: int
    truncated: int = 0  # examples cut to the largest bucket
    dropped: int = 0  # examples dropped (too long, or no assistant token left)

    @property
    def num_examples(self) -> int:
        return len(self.tokens)

    @property
    def steps_per_epoch(self) -> int:
        return self.num_examples // self.batch_size

    def fingerprint(self) -> str:
        """Identifies the data and its order; a resume with different data is refused."""
        h = hashlib.sha256()
        for t, m in zip(self.tokens, self.loss_mask):
            h.update(t.tobytes())
            h.update(m.tobytes())
        h.update(json.dumps([self.buckets, self.batch_size, self.grad_accum, self.seed]).encode())
        return h.hexdigest()[:16]

    def bucket(self, length: int) -> int:
        return next(b for b in self.buckets if b >= length)

    def indices(self, step: int) -> np.ndarray:
        """The example indices of optimizer step `step`: epoch e is a fresh permutation seeded by (seed, e)."""
        epoch, i = divmod(int(step), self.steps_per_epoch)
        perm = np.random.default_rng([self.seed, epoch]).permutation(self.num_examples)
        return perm[i * self.batch_size : (i + 1) * self.batch_size]

    def batch(self, step: int) -> dict[str, np.ndarray]:
        """Arrays [grad_accum, micro, L] with L the smallest bucket holding the batch's longest example."""
        idx = self.indices(step)
        length = self.bucket(max(len(self.tokens[j]) for j in idx))
        tokens = np.full((len(idx), length), self.pad_id, np.int32)
        loss_mask = np.zeros((len(idx), length), np.int32)
        token_mask = np.zeros((len(idx), length), bool)
        for r, j in enumerate(idx):
            n = len(self.tokens[j])
            tokens[r, :n] = self.tokens[j]
            loss_mask[r, :n] = self.loss_mask[j]
            token_mask[r, :n] = True
        shape = (self.grad_accum, len(idx) // self.grad_accum, length)
        return {
            "tokens": tokens.reshape(shape),
            "loss_mask": loss_mask.reshape(shape),
            "token_mask": token_mask.reshape(shape),
        }


def build_data(
    examples: Sequence[dict],
    tokenizer,
    end_of_turn: Sequence[int],
    *,
    buckets: Sequence[int],
    batch_size: int,
    grad_accum: int,
    seed: int,
    truncate: bool = True,
    max_examples: int = -1,
) -> SFTData:
    buckets = tuple(int(b) for b in buckets)
    if max_examples > 0:
        examples = examples[:max_examples]
    toks, masks, truncated, dropped = [], [], 0, 0
    for ex in examples:
        t, m = tokenize_conversation(tokenizer, ex["messages"], ex.get("tools"), end_of_turn)
        if len(t) > buckets[-1]:
            if not truncate:
                dropped += 1
                continue
            t, m, truncated = t[: buckets[-1]], m[: buckets[-1]], truncated + 1
        if m[1:].sum() == 0:  # nothing to learn from (the first token is never a target)
            dropped += 1
            continue
        toks.append(t)
        masks.append(m)
    if len(toks) < batch_size:
        raise config_checks.ConfigError(
            "train.batch_size", f"{batch_size} is larger than the {len(toks)} usable examples"
        )
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    return SFTData(tuple(toks), tuple(masks), buckets, batch_size, grad_accum, seed, int(pad), truncated, dropped)


# ----------------------------------------------------------------------------------------------------
# Loss and step (pure, jitted).


def token_loss(model_cfg, params, batch: dict[str, jax.Array], chunk: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(sum of -log p over assistant target tokens, their count, sum of entropies there) for [B, L] arrays.
    Logits are never materialised: hidden states meet the output embedding a vocabulary chunk at a time."""
    from rcgrpo_jax.models.transformer import forward, output_embedding
    from rcgrpo_jax.rl.logprobs import chunked_logprobs_and_entropy

    tokens, token_mask = batch["tokens"], batch["token_mask"]
    positions = jnp.maximum(jnp.cumsum(token_mask, axis=-1) - 1, 0).astype(jnp.int32)
    hidden, _ = forward(model_cfg, params, tokens, positions, token_mask, return_hidden=True)
    targets = tokens[:, 1:]
    weight = (batch["loss_mask"][:, 1:] * token_mask[:, 1:]).astype(jnp.float32)
    logp, entropy = chunked_logprobs_and_entropy(
        hidden[:, :-1], output_embedding(model_cfg, params), targets, min(chunk, model_cfg.vocab_size)
    )
    return -(logp * weight).sum(), weight.sum(), (entropy * weight).sum()


def _applied_updates(opt_state) -> jax.Array:
    """The optimizer's own step count (skipped steps excluded), which drives the lr schedule."""
    counts = optax.tree_utils.tree_get_all_with_path(opt_state, "count")
    return counts[0][1] if counts else jnp.zeros((), jnp.int32)


def make_train_step(model_cfg, tx: optax.GradientTransformation, lr_fn: optax.Schedule, chunk: int) -> Callable:
    """`step(state, batch) -> (state, metrics)` for a batch of arrays [grad_accum, micro, L].

    Micro-batch gradients of the loss *sum* are added up and divided once by the total token count, so
    accumulation gives exactly the token-mean gradient of the whole batch."""

    def micro_grads(params, micro):
        def f(p):
            s, n, ent = token_loss(model_cfg, p, micro, chunk)
            return s, (n, ent)

        (s, (n, ent)), g = jax.value_and_grad(f, has_aux=True)(params)
        return s, n, ent, g

    def step(state: state_lib.TrainState, batch):
        def body(carry, micro):
            s_acc, n_acc, e_acc, g_acc = carry
            s, n, ent, g = micro_grads(state.params, micro)
            return (s_acc + s, n_acc + n, e_acc + ent, jax.tree.map(jnp.add, g_acc, g)), None

        zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), state.params)
        init = (jnp.zeros((), jnp.float32),) * 3 + (zeros,)
        (s, n, ent, g), _ = jax.lax.scan(body, init, batch)
        denom = jnp.maximum(n, 1.0)
        grads = jax.tree.map(lambda x, p: (x / denom).astype(p.dtype), g, state.params)
        loss = s / denom
        lr = lr_fn(_applied_updates(state.opt_state))
        new_state, finite = state_lib.apply_gradients(state, grads, tx, loss)
        metrics = {
            "loss": loss,
            "grad_norm": optax.tree.norm(grads),
            "lr": lr,
            "entropy": ent / denom,
            "loss_tokens": n,
            "finite": finite,
            "nonfinite_in_row": new_state.nonfinite,
            "param_norm": optax.tree.norm(new_state.params),
        }
        return new_state, metrics

    return step


def batch_sharding(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P(None, BATCH_AXES, None))


def put_batch(batch: dict[str, np.ndarray], sharding: NamedSharding) -> dict[str, jax.Array]:
    """Host arrays -> global arrays. With several processes each one passes only the rows its devices
    hold (its contiguous slice of each micro-batch), assembled by make_array_from_process_local_data."""
    if jax.process_count() == 1:
        return jax.device_put(batch, sharding)
    n, pid = jax.process_count(), jax.process_index()
    out = {}
    for k, v in batch.items():
        rows = v.shape[1] // n
        out[k] = jax.make_array_from_process_local_data(sharding, v[:, pid * rows : (pid + 1) * rows], v.shape)
    return out


def compile_step(
    step_fn, abstract_state: state_lib.TrainState, state_sh, batch_shape: tuple[int, int, int], mesh: Mesh, logical_map
):
    """AOT-compiles the step for one bucket length (state donated); activations are constrained by the
    rule set's logical map (batch over data x fsdp)."""
    b_sh = batch_sharding(mesh)
    abstract_batch = {
        "tokens": jax.ShapeDtypeStruct(batch_shape, jnp.int32, sharding=b_sh),
        "loss_mask": jax.ShapeDtypeStruct(batch_shape, jnp.int32, sharding=b_sh),
        "token_mask": jax.ShapeDtypeStruct(batch_shape, jnp.bool_, sharding=b_sh),
    }
    jitted = jax.jit(
        step_fn, in_shardings=(state_sh, b_sh), out_shardings=(state_sh, NamedSharding(mesh, P())), donate_argnums=(0,)
    )
    with jax.set_mesh(mesh), sharding_lib.axis_rules(logical_map):
        return jitted.lower(state_lib.with_shardings(abstract_state, state_sh), abstract_batch).compile()


# ----------------------------------------------------------------------------------------------------
# Model preparation (shared with the RL trainer).


def model_dir(config, workdir: str) -> str:
    """The HF checkpoint to start from: `model.path`, or a tiny one built once under the workdir."""
    if config.model.path:
        return config.model.path
    path = os.path.join(workdir, "tiny_model")
    if not os.path.exists(os.path.join(path, "config.json")):
        if jax.process_index() == 0:
            build_tiny(config, path)
        _sync("tiny_model")
    return path


def build_tiny(config, path: str, **sizes) -> str:
    """A random tiny checkpoint of `model.tiny_arch` whose tokenizer is trained on the configured task
    source's text, rendered through the checkpoint's own chat template (`model.tiny_tools_format`)."""
    from rcgrpo_jax.data import sources
    from rcgrpo_jax.models.tiny import build_tiny_checkpoint

    return build_tiny_checkpoint(
        path,
        arch=config.model.tiny_arch,
        tools_format=config.model.tiny_tools_format,
        corpus=sources.tokenizer_corpus(config.data),
        chats=sources.tokenizer_chats(config.data),
        **sizes,
    )


def _sync(name: str) -> None:
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def model_config(config, path_or_dict) -> Any:
    from rcgrpo_jax.models.config import ModelConfig

    return ModelConfig.from_hf(
        path_or_dict,
        dtype=config.model.dtype,
        param_dtype=config.model.param_dtype,
        remat=bool(config.model.remat),
        scan_unroll=int(config.model.scan_unroll),
    )


def rules(name: str):
    """A rule set of rcgrpo_jax.sharding by config name (`sharding.train_rules` / `sharding.decode_rules`)."""
    table = {"train": sharding_lib.TRAIN_RULES, "decode": sharding_lib.DECODE_RULES}
    if name not in table:
        raise config_checks.ConfigError("sharding.train_rules", f"unknown rule set {name!r}; known: {', '.join(table)}")
    return table[name]


def param_shardings(abstract_params, mesh: Mesh, rules_name: str):
    r = rules(rules_name)
    return sharding_lib.param_shardings(abstract_params, mesh, r.params, r.logical)


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


def memory_report(compiled, abstract_state: state_lib.TrainState, state_sh) -> dict[str, float]:
    """Per-device GB: parameters and optimizer state (from their shardings), and XLA's figures."""

    def shard_bytes(tree, shardings):
        total = 0
        for a, s in zip(jax.tree.leaves(tree), jax.tree.leaves(shardings)):
            shape = s.shard_shape(a.shape)
            total += int(np.prod(shape)) * jnp.dtype(a.dtype).itemsize
        return total

    ma = compiled.memory_analysis()
    args = int(ma.argument_size_in_bytes)
    out = int(ma.output_size_in_bytes)
    alias = int(ma.alias_size_in_bytes)
    temp = int(ma.temp_size_in_bytes)
    code = int(getattr(ma, "generated_code_size_in_bytes", 0))
    peak = args + out - alias + temp + code
    return {
        "params_gb": shard_bytes(abstract_state.params, state_sh.params) / 1e9,
        "opt_state_gb": shard_bytes(abstract_state.opt_state, state_sh.opt_state) / 1e9,
        "arguments_gb": args / 1e9,
        "outputs_gb": out / 1e9,
        "aliased_gb": alias / 1e9,
        "temp_gb": temp / 1e9,
        "code_gb": code / 1e9,
        "peak_gb": peak / 1e9,
    }


# ----------------------------------------------------------------------------------------------------
# The run.


def total_steps(config, steps_per_epoch: int) -> int:
    n = int(config.train.epochs) * steps_per_epoch
    if int(config.train.max_steps) > 0:
        n = min(n, int(config.train.max_steps)) if n > 0 else int(config.train.max_steps)
    return n


def load_examples(config, workdir: str) -> list[dict]:
    """`data.path`, else the stage's dataset built from the train tasks of `data.source` into workdir/data (SFT: expert
    trajectories; RCTP-FT: expert + failure 1:1 with reward goals), over the first `data.max_examples`
    tasks when that is set."""
    if config.data.path:
        return read_jsonl(config.data.path)
    from rcgrpo_jax.data import datasets, sources

    out = os.path.join(workdir, "data")
    name = {"expert": "sft.jsonl", "rctp": "rctp_ft.jsonl"}[config.data.kind]
    if not os.path.exists(os.path.join(out, name)):
        if jax.process_index() == 0:
            datasets.build_all(out, split="train", seed=int(config.seed), ids=sources.tasks(config.data, "train"))
        _sync("sft_data")
    return read_jsonl(os.path.join(out, name))


def run(config, workdir: str, *, stop_after: int | None = None) -> dict[str, Any]:
    """Trains from the latest checkpoint in `workdir` (or from the start). `stop_after` ends the process's
    work after that many steps of this call without a final save (tests use it to simulate a crash).
    Returns a summary dict (last step, last metrics, stop reason)."""
    from transformers import AutoTokenizer

    from rcgrpo_jax.chat import end_of_turn_ids
    from rcgrpo_jax.models.hf_io import load_hf
    from rcgrpo_jax.models.transformer import abstract_params as abstract_params_of

    shape = config_checks.check(config, jax.device_count())
    os.makedirs(workdir, exist_ok=True)
    is_main = jax.process_index() == 0
    mesh = sharding_lib.make_mesh(shape)

    # Model and tokenizer (RCTP-FT: the reward tokens first, so the data tokenises them as single tokens).
    path = model_dir(config, workdir)
    model_cfg = model_config(config, path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    abstract_params = abstract_params_of(model_cfg)
    p_sh = param_shardings(abstract_params, mesh, config.sharding.train_rules)
    params = load_hf(path, dtype=model_cfg.param_dtype, mesh=mesh, rules=rules(config.sharding.train_rules))[1]
    if config.get("add_reward_tokens", False):
        from rcgrpo_jax import models

        model_cfg, params, tokenizer, _ = models.add_reward_tokens(model_cfg, params, tokenizer)
        abstract_params = jax.eval_shape(lambda: params)
        p_sh = param_shardings(abstract_params, mesh, config.sharding.train_rules)
        params = jax.device_put(params, p_sh)

    data = build_data(
        load_examples(config, workdir),
        tokenizer,
        end_of_turn_ids(tokenizer),
        buckets=config.data.buckets,
        batch_size=config.train.batch_size,
        grad_accum=config.train.grad_accum,
        seed=config.seed,
        truncate=config.data.truncate,
        max_examples=config.data.max_examples,
    )
    n_steps = total_steps(config, data.steps_per_epoch)
    tx = optim_lib.make_optimizer(config.optim, n_steps)
    lr_fn = optim_lib.schedule(config.optim.lr, n_steps, config.optim.warmup_ratio, config.optim.end_lr_ratio)
    abstract = state_lib.abstract_state(abstract_params, tx)
    state_sh = state_lib.state_shardings(abstract, mesh, p_sh, tx)
    step_fn = make_train_step(model_cfg, tx, lr_fn, config.train.logprob_chunk)
    logical = rules(config.sharding.train_rules).logical

    # Compile the longest bucket first: it is the memory high-water mark, checked before training starts.
    micro = config.train.batch_size // config.train.grad_accum
    compiled: dict[int, Any] = {}
    biggest = data.buckets[-1]
    compiled[biggest] = compile_step(
        step_fn, abstract, state_sh, (config.train.grad_accum, micro, biggest), mesh, logical
    )
    if config.memory.check_fit:
        report = memory_report(compiled[biggest], abstract, state_sh)
        config_checks.check_memory("memory.device_bytes", int(report["peak_gb"] * 1e9), device_budget(config))

    ckpt = ckpt_lib.Checkpointer(
        os.path.join(workdir, "checkpoints"),
        every_steps=config.checkpoint.every_steps,
        max_to_keep=config.checkpoint.max_to_keep,
        async_save=config.checkpoint.async_save,
    )
    start = ckpt.latest_step()
    with jax.set_mesh(mesh):
        if start is None:
            state = jax.jit(
                lambda p: state_lib.create(p, tx, jax.random.PRNGKey(config.seed)),
                out_shardings=state_sh,
                donate_argnums=(0,),
            )(params)
            start = 0
        else:
            del params
            state, meta = ckpt.restore(start, state_lib.with_shardings(abstract, state_sh))
            if meta.get("data_fingerprint") != data.fingerprint():
                raise config_checks.ConfigError(
                    "data.path", "the data differ from those of the checkpoint being resumed"
                )
            absl_logging.info("resumed from step %d", start)

    logger = log_lib.MetricsLogger(
        workdir, is_main=is_main, tensorboard=config.log.tensorboard, resume_step=start if start > 0 else None
    )
    progress = log_lib.Progress(n_steps, start, enabled=is_main and config.log.progress, desc=config.stage)
    b_sh = batch_sharding(mesh)
    meta = lambda s: {
        "step": int(s),
        "data_position": int(s),
        "data_fingerprint": data.fingerprint(),
        "total_steps": n_steps,
        "stage": config.stage,
    }

    def one_step(state, step):
        batch_np = data.batch(step)
        length = batch_np["tokens"].shape[-1]
        if length not in compiled:
            compiled[length] = compile_step(step_fn, abstract, state_sh, batch_np["tokens"].shape, mesh, logical)
        t0 = time.perf_counter()
        state, metrics = compiled[length](state, put_batch(batch_np, b_sh))
        metrics = jax.device_get(metrics)
        dt = time.perf_counter() - t0
        metrics.update(
            {
                "seq_len": length,
                "time/step_s": dt,
                "time/tokens_per_s": float(batch_np["token_mask"].sum()) / max(dt, 1e-9),
            }
        )
        return state, metrics

    try:
        with jax.set_mesh(mesh):
            state, step, reason, last = loop_lib.run_steps(
                one_step,
                state,
                start=start,
                n_steps=n_steps,
                config=config,
                ckpt=ckpt,
                logger=logger,
                progress=progress,
                meta=meta,
                stop_after=stop_after,
            )
    finally:
        ckpt.close()
        logger.close()
        progress.close()
    if reason == "done" and config.checkpoint.export_hf:
        export_hf(model_cfg, state.params, tokenizer, os.path.join(workdir, "hf"))
    return {"step": step, "reason": reason, "metrics": last, "total_steps": n_steps}


def export_hf(model_cfg, params, tokenizer, path: str) -> None:
    """The trained policy as an HF directory (safetensors + config + tokenizer) any HF server can load."""
    from rcgrpo_jax.models.hf_io import save_hf

    save_hf(model_cfg, params, path, tokenizer=tokenizer)


# ----------------------------------------------------------------------------------------------------
# Will it fit? Compile the update step against abstract parameters and read XLA's memory analysis.


def dry_run(config) -> dict[str, float]:
    """Per-device memory of the SFT update step at the largest bucket, without allocating the model."""
    from rcgrpo_jax.models.transformer import abstract_params as abstract_params_of

    shape = config_checks.check(config, jax.device_count()) if config.model.path else _check_without_path(config)
    mesh = sharding_lib.make_mesh(shape)
    if config.model.path:
        hf = config.model.path
    else:
        from configs import common  # the published architectures, for dry runs without weights

        hf = common.hf_architecture(config.preset)
    model_cfg = model_config(config, hf)
    if config.get("add_reward_tokens", False):
        model_cfg = dataclasses.replace(model_cfg, vocab_size=model_cfg.vocab_size + 2)
    abstract_params = abstract_params_of(model_cfg)
    p_sh = param_shardings(abstract_params, mesh, config.sharding.train_rules)
    tx = optim_lib.make_optimizer(config.optim, 1000)
    lr_fn = optim_lib.schedule(config.optim.lr, 1000, config.optim.warmup_ratio, config.optim.end_lr_ratio)
    abstract = state_lib.abstract_state(abstract_params, tx)
    state_sh = state_lib.state_shardings(abstract, mesh, p_sh, tx)
    step_fn = make_train_step(model_cfg, tx, lr_fn, config.train.logprob_chunk)
    logical = rules(config.sharding.train_rules).logical
    micro = config.train.batch_size // config.train.grad_accum
    length = int(config.data.buckets[-1])
    compiled = compile_step(step_fn, abstract, state_sh, (config.train.grad_accum, micro, length), mesh, logical)
    report = memory_report(compiled, abstract, state_sh)
    report.update(
        {
            "devices": jax.device_count(),
            "seq_len": length,
            "micro_batch": micro,
            "grad_accum": int(config.train.grad_accum),
            "budget_gb": device_budget(config) / 1e9,
        }
    )
    return report


def _check_without_path(config) -> dict[str, int]:
    """Dry runs need no weights: validate as if the checkpoint path were given."""
    import ml_collections

    c = ml_collections.ConfigDict(config.to_dict())
    c.model.build_tiny = True
    return config_checks.check(c, jax.device_count())
