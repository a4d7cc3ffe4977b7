"""Supervised fine-tuning (SFT baseline) and RCTP-FT: cross-entropy on assistant tokens only.

Host side: sft_data.py turns conversations into bucketed (tokens, loss_mask) batches whose order is a
pure function of (seed, step). Device side: one jitted step = a scan over micro-batches summing (loss
sum, token count) and gradients, one exact token-mean, a guarded AdamW update (non-finite -> skipped).
Parameters and optimizer state are sharded by the FSDP rules; the state is donated. `SFTTrainer` is the
runner's trainer (train/runner.py).
"""

from __future__ import annotations

import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from rcgrpo_jax import config_checks, config_fields, multihost
from rcgrpo_jax import sharding as sharding_lib
from rcgrpo_jax.chat import end_of_turn_ids
from rcgrpo_jax.data import tiny_checkpoint
from rcgrpo_jax.models.transformer import abstract_params as abstract_params_of
from rcgrpo_jax.models.transformer import forward, output_embedding
from rcgrpo_jax.rl.logprobs import chunked_logprobs_and_entropy
from rcgrpo_jax.train import memory, model_prep, runner, sft_data
from rcgrpo_jax.train import optim as optim_lib
from rcgrpo_jax.train import state as state_lib

# ----------------------------------------------------------------------------------------------------
# Loss and step (pure, jitted).


def token_loss(model_cfg, params, batch: dict[str, jax.Array], chunk: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(sum of -log p over assistant target tokens, their count, sum of entropies there) for [B, L] arrays.
    Logits are never materialised: hidden states meet the output embedding a vocabulary chunk at a time."""

    tokens, token_mask = batch["tokens"], batch["token_mask"]
    positions = jnp.maximum(jnp.cumsum(token_mask, axis=-1) - 1, 0).astype(jnp.int32)
    hidden, _ = forward(model_cfg, params, tokens, positions, token_mask, return_hidden=True)
    targets = tokens[:, 1:]
    weight = (batch["loss_mask"][:, 1:] * token_mask[:, 1:]).astype(jnp.float32)
    logp, entropy = chunked_logprobs_and_entropy(
        hidden[:, :-1], output_embedding(model_cfg, params), targets, min(chunk, model_cfg.vocab_size)
    )
    return -(logp * weight).sum(), weight.sum(), (entropy * weight).sum()


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
        lr = lr_fn(state_lib.applied_updates(state.opt_state))
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


def compile_step(
    step_fn, abstract_state: state_lib.TrainState, state_sh, batch_shape: tuple[int, int, int], mesh: Mesh, logical_map
):
    """AOT-compiles the step for one bucket length (state donated); activations are constrained by the
    rule set's logical map (batch over data x fsdp)."""
    b_sh = sharding_lib.batch_sharding(mesh, 3, row_dim=1)  # [grad_accum, micro, L]: rows over data x fsdp
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
# The trainer.


class SFTTrainer:
    """SFT / RCTP-FT for the stage runner: the model (RCTP-FT: with the reward tokens added first, so the data
    tokenise them as single tokens), the bucketed data, and one compiled step per bucket length."""

    progress_keys = None

    def __init__(self, config, workdir: str):

        config = config_checks.resolved(config, jax.device_count())
        self.config, self.stage = config, config.stage
        self.mesh = sharding_lib.make_mesh(check(config, jax.device_count()))
        rules = config.sharding.train_rules
        model = model_prep.load(
            config,
            tiny_checkpoint.model_dir(config, workdir),
            self.mesh,
            model_prep.rules(rules),
            reward_tokens=bool(config.get("add_reward_tokens")),
        )
        self.model_cfg, self.tokenizer, self._params = model.config, model.tokenizer, model.params
        self.data = sft_data.build_data(
            sft_data.load_examples(config, workdir),
            self.tokenizer,
            end_of_turn_ids(self.tokenizer),
            buckets=config.data.buckets,
            batch_size=config.train.batch_size,
            grad_accum=config.train.grad_accum,
            seed=config.seed,
            truncate=config.data.truncate,
            max_examples=config.data.max_examples,
        )
        self.total_steps = step_count(config, self.data.steps_per_epoch)
        self.tx, self.state_sh, self.abstract, self.step_fn = optimizer_and_state(
            config, self.model_cfg, abstract_params_of(self.model_cfg), self.mesh, self.total_steps
        )
        self.logical = model_prep.rules(rules).logical
        self.batch_sh = sharding_lib.batch_sharding(self.mesh, 3, row_dim=1)
        # Compile the longest bucket first: it is the memory high-water mark, checked before training starts.
        self.compiled: dict[int, Any] = {}
        biggest = self._compiled(self.data.buckets[-1])
        if config.memory.check_fit:
            report = memory.memory_report(biggest, self.abstract, self.state_sh)
            config_checks.check_memory(
                "memory.device_bytes",
                int(report["peak_gb"] * 1e9),
                memory.device_budget(int(config.memory.device_bytes)),
            )

    def _compiled(self, length: int):
        if length not in self.compiled:
            micro = self.config.train.batch_size // self.config.train.grad_accum
            shape = (self.config.train.grad_accum, micro, length)
            self.compiled[length] = compile_step(
                self.step_fn, self.abstract, self.state_sh, shape, self.mesh, self.logical
            )
        return self.compiled[length]

    def init_state(self) -> state_lib.TrainState:
        params, self._params = self._params, None
        return jax.jit(
            lambda p: state_lib.create(p, self.tx, jax.random.PRNGKey(self.config.seed)),
            out_shardings=self.state_sh,
            donate_argnums=(0,),
        )(params)

    def restore_target(self) -> state_lib.TrainState:
        self._params = None
        return state_lib.with_shardings(self.abstract, self.state_sh)

    def fingerprint(self) -> str:
        return self.data.fingerprint()

    def step(self, state: state_lib.TrainState, step: int):
        batch_np = self.data.batch(step)
        length = batch_np["tokens"].shape[-1]
        fn = self._compiled(length)
        t0 = time.perf_counter()
        state, metrics = fn(state, multihost.place(batch_np, self.batch_sh))
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

    def export(self, state, path: str) -> None:
        model_prep.export_hf(self.model_cfg, state.params, self.tokenizer, path)


def optimizer_and_state(config, model_cfg, abstract_params, mesh: Mesh, n_steps: int):
    """(optimizer, state shardings, abstract state, step function) of an SFT run of `n_steps` steps."""
    p_sh = model_prep.param_shardings(abstract_params, mesh, config.sharding.train_rules)
    tx = optim_lib.make_optimizer(config.optim, n_steps)
    lr_fn = optim_lib.schedule(config.optim.lr, n_steps, config.optim.warmup_ratio, config.optim.end_lr_ratio)
    abstract = state_lib.abstract_state(abstract_params, tx)
    state_sh = state_lib.state_shardings(abstract, mesh, p_sh, tx)
    return tx, state_sh, abstract, make_train_step(model_cfg, tx, lr_fn, config.train.logprob_chunk)


def check(config, num_devices: int) -> dict[str, int]:
    """Start-up validation of a supervised stage; returns the mesh shape."""
    shape = config_checks.check(config, num_devices)
    if config.data.get("kind") not in ("expert", "rctp"):
        raise config_fields.ConfigError("data.kind", f"{config.data.get('kind')!r} is not one of expert, rctp")
    sft_data.check_files(config)
    return shape


def step_count(config, steps_per_epoch: int) -> int:
    """epochs x steps per epoch, capped by `train.max_steps` when that is > 0."""
    n = int(config.train.epochs) * steps_per_epoch
    if int(config.train.max_steps) > 0:
        n = min(n, int(config.train.max_steps)) if n > 0 else int(config.train.max_steps)
    return n


def run(config, workdir: str, *, stop_after: int | None = None) -> dict[str, Any]:
    """Trains from the latest checkpoint in `workdir` (or from the start); see train/runner.py."""
    return runner.run(SFTTrainer(config, workdir), runner.settings_of(config), workdir, stop_after=stop_after)
