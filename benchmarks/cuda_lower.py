"""The lowering proof: every production program of a preset exported for CUDA from a CPU host.

  python -m benchmarks.cuda_lower --config=configs/rc_grpo.py:qwen2_5_7b
  python -m benchmarks.cuda_lower --config=configs/sft.py:qwen2_5_7b
  python -m benchmarks.cuda_lower --config=configs/rc_grpo.py:qwen2_5_7b --tiny   # what CI runs

On 8 fake CPU devices (`--devices`; set before JAX starts) it builds the run as the trainer and the dry run do
(`train.rl_setup`; SFT: `train.sft`, `train.model_prep`), abstract parameters (no weights), and
`jax.export`s each program with `platforms=["cuda"]` at the preset's production shapes, against an abstract
H200 (compute capability 9.0) wherever JAX has abstract devices (`abstract_target`):
  RL stage:  prefill (`decode_loop.prefill_impl`), prefill_packed (`sampling.packed.prefill_impl`), append_packed
             (`sampling.packed_append`), append_rows (`session.append_rows_impl`), copy_rows
             (`row_shards.copy_rows`), decode (`decode_loop.decode_impl`, its kernel from `kernels`), ref_logprobs
             (`rl_step.make_logprob_fn`), rl_update (`rl_step.make_micro_grads`), rl_apply (`rl_step.make_apply`)
  SFT stage: sft_update (`sft.optimizer_and_state`'s step: every micro-batch and the apply)
The programs use the kernels the preset's settings pick on an H200 (`kernels`; `auto`: Pallas on jax 0.10 and
0.11), XLA attention standing in for one a CPU host cannot lower (cuDNN, tokamax); Pallas kernels are traced as
compiled Triton (`models.attention.lowering_for("cuda")`), the Triton call allowed explicitly. Export lowers
(StableHLO, Triton IR), without XLA's GPU compiler; what each program is and proves: docs/gpu.md.

Output: one JSON line per program (`program`, `ok`, `custom_calls`: the custom-call targets of the exported
module, `error`, `kernel`: its attention as lowered, `devices`, the shapes `at`, `seconds`), then `{"ok": ...,
"programs": N, "failed": [...]}`, each naming the `jax` version, the abstract `target` GPU and `Kernels.fields`
(`kernels_auto`: what an H200 runs; `auto_lowered`: that it is what was lowered); exit status 1 when a program
failed. `--tiny` shrinks the model (2 layers, head_dim 16; the preset's mesh, family and GQA ratio) and shapes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import sys
import time
from typing import Any, Callable, Iterator, Sequence

from benchmarks import model_sizes
from rcgrpo_jax import config_checks, hardware, stages
from rcgrpo_jax import sharding as sharding_lib
from rcgrpo_jax.models.attention import lowering_for, select_implementation
from rcgrpo_jax.models.transformer import abstract_params as abstract_params_of
from rcgrpo_jax.sampling import decode_loop, decode_step, packed, packed_append, row_shards, session
from rcgrpo_jax.train import model_prep, rl_setup, rl_step, sft
from rcgrpo_jax.train import state as state_lib

TRITON_CALL = "__gpu$xla.gpu.triton"
PLATFORM = "cuda"
# The GPU the programs are lowered for (`hardware.H200`), given to JAX as the abstract device of the mesh
# (`abstract_target`).
TARGET_KIND, TARGET_CORES = hardware.H200.kind, hardware.H200.cores
RL_PROGRAMS = (
    "prefill",
    "prefill_packed",
    "append_packed",
    "append_rows",
    "copy_rows",
    "decode",
    "ref_logprobs",
    "rl_update",
    "rl_apply",
)
SFT_PROGRAMS = ("sft_update",)
# Which attention each program runs (`Kernels`): "training" (`models.attention`, `model.attention_impl`),
# "prefill" (the rollout prefill and appends: `decode_step`'s own XLA attention, no setting), "decode" (the
# decode step's, `model.decode_attention`), None (no attention).
PROGRAM_ATTENTION = {
    "prefill": "prefill",
    "prefill_packed": "prefill",
    "append_packed": "prefill",
    "append_rows": "prefill",
    "copy_rows": None,
    "decode": "decode",
    "ref_logprobs": "training",
    "rl_update": "training",
    "rl_apply": None,
    "sft_update": "training",
}
TARGET_BACKEND = "gpu"  # `jax.default_backend()` on the target: what "auto" is resolved for
PREFILL_ATTENTION = "xla"  # `decode_step`'s attention for blocks of queries (prefill, appends) on every backend
LOWERS_WITHOUT_GPU = ("xla", "pallas")  # training kernels a CPU host lowers for CUDA (not cuDNN, not tokamax)
_CALL_RE = re.compile(r'custom_call\s*@"?([^"(\s]+)"?|call_target_name\s*=\s*"([^"]+)"')


def custom_calls(module_text: str) -> list[str]:
    """The sorted set of custom-call targets in a StableHLO module's text."""
    return sorted({a or b for a, b in _CALL_RE.findall(module_text)})


def tiny_model(cfg):
    """A 2-layer stand-in of `cfg`'s family (its norms, biases, RoPE) at `model_sizes.MODELS["lowering"]`'s
    sizes (head_dim 16), with `cfg`'s GQA ratio (capped at 4) over its KV heads, so the tiny programs exercise
    the same paths fast."""
    s = model_sizes.MODELS["lowering"]
    reps = max(1, min(cfg.num_heads // cfg.num_kv_heads, 4))
    return dataclasses.replace(
        cfg,
        vocab_size=s["vocab_size"],
        hidden_size=s["hidden_size"],
        intermediate_size=s["intermediate_size"],
        num_layers=s["num_hidden_layers"],
        num_heads=s["num_key_value_heads"] * reps,
        num_kv_heads=s["num_key_value_heads"],
        head_dim=s["head_dim"],
    )


@dataclasses.dataclass(frozen=True)
class Shapes:
    """What the training programs are exported at: micro-batch rows, length, micro-batches per update (the
    rollout programs' shapes: `rl_setup.RolloutShapes`)."""

    micro: int
    length: int
    grad_accum: int


def _sds(shape, dtype, sharding):
    import jax

    return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)


def abstract_target() -> Any:
    """`jax.sharding.AbstractDevice` of the target GPU, or None where this JAX has no abstract devices.

    From jax 0.11 a Pallas Triton kernel asks, at lowering, for the GPU it is lowered for (its compute
    capability picks the Triton target): with no GPU attached it reads the abstract device of the current
    abstract mesh, and fails without one ("No supported GPU devices found, please specify an abstract GPU
    device using AbstractDevice"). jax 0.10 falls back to compute capability 9.0 by itself and ignores the
    abstract device. So wherever the API exists the programs are lowered under an abstract mesh that names
    an H200 (feature-detected, not by version number); a JAX without it gets None and lowers as before."""
    import inspect

    import jax

    device_cls = getattr(jax.sharding, "AbstractDevice", None)
    mesh_cls = getattr(jax.sharding, "AbstractMesh", None)
    if device_cls is None or mesh_cls is None or not hasattr(jax.sharding, "use_abstract_mesh"):
        return None
    if "abstract_device" not in inspect.signature(mesh_cls).parameters:
        return None
    return device_cls(device_kind=TARGET_KIND, num_cores=TARGET_CORES, platform="gpu")


@contextlib.contextmanager
def on_target() -> Iterator[None]:
    """Within this context a program is traced for the target GPU: the current abstract mesh (one device
    when there is none) with `abstract_target()` as its abstract device. A no-op where JAX has none."""
    import jax

    target = abstract_target()
    if target is None:
        yield
        return
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty:  # a program traced outside a mesh context: one device
        mesh = jax.sharding.AbstractMesh((1,), ("data",))
    with jax.sharding.use_abstract_mesh(mesh.update(abstract_device=target)):
        yield


def export_for_cuda(jitted: Callable, args) -> Any:
    """`jax.export` of a jitted function at `args` for CUDA, under the current mesh given the target GPU as
    its abstract device (`on_target`), the Triton custom call allowed. Trace it `lowering_for("cuda")`."""
    from jax import export

    with on_target():
        return export.export(
            jitted, platforms=[PLATFORM], disabled_checks=[export.DisabledSafetyCheck.custom_call(TRITON_CALL)]
        )(*args)


def _export(fn: Callable, in_sh, out_sh, args, donate=()) -> dict[str, Any]:
    """Exports jit(fn) for CUDA with explicit shardings (`export_for_cuda`); returns its custom-call targets
    and device count."""
    import jax

    exp = export_for_cuda(jax.jit(fn, in_shardings=in_sh, out_shardings=out_sh, donate_argnums=donate), args)
    return {"custom_calls": custom_calls(exp.mlir_module()), "devices": exp.nr_devices}


@dataclasses.dataclass(frozen=True)
class Kernels:
    """The attention kernels of a preset's programs, per `PROGRAM_ATTENTION` kind ("training", "prefill",
    "decode"): `auto`, what the preset's settings pick on the target GPU (an H200, `TARGET_BACKEND`), and
    `lowered`, what the programs are lowered with: the same, except a training kernel a CPU host cannot lower
    (cuDNN, tokamax: docs/gpu.md), which XLA attention stands in for (then `auto_lowered` is false)."""

    auto: dict[str, str]
    lowered: dict[str, str]

    def fields(self) -> dict[str, Any]:
        """What every JSON line names: the lowered training (`attention`) and decode (`decode_attention`)
        kernels, `kernels_auto` and `auto_lowered`."""
        return {
            "attention": self.lowered["training"],
            "decode_attention": self.lowered["decode"],
            "kernels_auto": dict(self.auto),
            "auto_lowered": self.auto == self.lowered,
        }


def kernels(config, model_cfg) -> Kernels:
    """`Kernels` of a stage config and the ModelConfig its programs are lowered at (its dtype and head_dim
    decide): `model.attention_impl` through `models.attention.select_implementation` and
    `model.decode_attention` through `decode_step.select_decode_attention`, both for `TARGET_BACKEND`."""
    dims = {"dtype": model_cfg.dtype, "head_dim": model_cfg.head_dim}
    training = select_implementation(TARGET_BACKEND, model_cfg.attention_impl, **dims)
    decode_value = str(config.model.get("decode_attention", "auto"))
    decode = decode_step.select_decode_attention(TARGET_BACKEND, decode_value, head_dim=model_cfg.head_dim)
    auto = {"training": training, "prefill": PREFILL_ATTENTION, "decode": decode}
    return Kernels(auto, {**auto, "training": training if training in LOWERS_WITHOUT_GPU else "xla"})


def versions() -> dict[str, Any]:
    """What every JSON line names besides the kernels: the jax version and the abstract GPU the kernels were
    lowered for (None: this JAX's own fallback, compute capability 9.0 on jax 0.10)."""
    import jax

    target = abstract_target()
    return {"jax": jax.__version__, "target": None if target is None else target.device_kind}


def _run(name: str, build: Callable[[], dict[str, Any]], at: dict[str, int], k: Kernels) -> dict[str, Any]:
    t0 = time.perf_counter()
    try:
        got, error = build(), None
    except Exception as e:  # a failed lowering is the result being reported, with its message
        got, error = {}, f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:2000]
    row = {"program": name, "ok": error is None, "custom_calls": got.get("custom_calls", []), "error": error}
    row["kernel"] = k.lowered.get(PROGRAM_ATTENTION.get(name))
    row.update(devices=got.get("devices"), at=at, seconds=round(time.perf_counter() - t0, 2), **versions())
    row.update(k.fields())
    print(json.dumps(row), flush=True)
    return row


@dataclasses.dataclass(frozen=True)
class RLTarget:
    """What the RL stage's programs are exported at (`rl_target`): the run's set-up at the lowered model config,
    its kernels, the training shapes and the rollout shapes."""

    setup: rl_setup.RLSetup
    kernels: Kernels
    train: Shapes
    rollout: rl_setup.RolloutShapes


def rl_target(config, tiny: bool) -> RLTarget:
    """The RL run as the trainer builds it (`rl_setup.plan` and `build` on this host's devices, abstract weights),
    the training attention swapped for what a CPU host lowers (`kernels`); `tiny`: `tiny_model` at small shapes,
    chosen so each program's sub-cases (a sub-batch below the batch, copies, packed blocks) still arise."""
    import jax

    run = rl_setup.plan(config, jax.device_count(), dry=True)
    model_cfg = rl_setup.abstract_model(run)
    model_cfg = tiny_model(model_cfg) if tiny else model_cfg
    k = kernels(run.config, model_cfg)
    setup = rl_setup.build(run, dataclasses.replace(model_cfg, attention_impl=k.lowered["training"]))
    if not tiny:
        return RLTarget(setup, k, Shapes(run.micro, run.length, int(run.config.train.grad_accum)), setup.rollout)
    m = decode_loop.batch_multiple(run.mesh)
    shapes = Shapes(micro=run.mesh.shape["data"] * run.mesh.shape["fsdp"], length=128, grad_accum=1)
    # 2 * m rows, so a sub-batch (one row per shard) is below the batch.
    rollout = rl_setup.RolloutShapes(
        2 * m, 256, 64, 16, sub_batch_rows=m, copy_rows=m, packed_tokens=m * packed.QUERY_BLOCK,
        prefill_pairs=8, append_blocks=4, append_pairs=8,
    )  # fmt: skip
    return RLTarget(setup, k, shapes, rollout)


@dataclasses.dataclass(frozen=True)
class DecodeArgs:
    """The rollout programs' shared arguments, abstract and sharded under the decode rules: the sampler, its
    weights (cast and split per layer) and the ragged cache, with their shardings, and the batch shardings of
    rank 1 and 2 and the replicated one."""

    sampler: decode_loop.Sampler
    weights: Any
    weight_sh: Any
    cache: Any
    cache_sh: Any
    b1: Any
    b2: Any
    rep: Any


def decode_args(t: RLTarget) -> DecodeArgs:
    """`DecodeArgs` of a target: what the session hands its programs, at the target's rollout shapes."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    run, model_cfg, r, layout = t.setup.run, t.setup.model_cfg, t.rollout, t.kernels.lowered["decode"]
    dtype = jnp.dtype(run.decode_dtype)
    per_layer = decode_step.split_shardings(t.setup.decode_shardings)
    weights = jax.eval_shape(lambda p: decode_step.cast_and_split(p, dtype), t.setup.abstract_params)
    cache = jax.eval_shape(lambda: decode_step.init_cache(model_cfg, r.rows, r.capacity, dtype=dtype, layout=layout))
    return DecodeArgs(
        sampler=decode_loop.Sampler(model_cfg, r.max_new_tokens, run.sampling, r.prefill_width, kv_write="scatter"),
        weights=weights,
        weight_sh={**per_layer, "layers": (per_layer["layers"],) * len(weights["layers"])},
        cache=cache,
        cache_sh=decode_loop.cache_sharding(model_cfg, run.mesh, layout),
        b1=sharding_lib.batch_sharding(run.mesh, 1),
        b2=sharding_lib.batch_sharding(run.mesh, 2),
        rep=NamedSharding(run.mesh, P()),
    )


def _export_decode(t: RLTarget, fn: Callable, in_sh, out_sh, args, donate=()) -> dict[str, Any]:
    """`_export` under the run's mesh and decode rules, as the session runs its programs."""
    with decode_loop.mesh_context(t.setup.run.mesh, t.setup.run.decode_rules):
        return _export(fn, in_sh, out_sh, args, donate)


def _logits(t: RLTarget, d: DecodeArgs):
    import jax.numpy as jnp

    return _sds((t.rollout.rows, t.setup.model_cfg.vocab_size), jnp.float32, d.b2)


def _ints(n: int, sharding, *more: int):
    import jax.numpy as jnp

    return _sds((n, *more), jnp.int32, sharding)


def prefill(t: RLTarget, d: DecodeArgs) -> dict[str, Any]:
    """`decode_loop.prefill_impl`: every row's prompt at once into an empty cache."""
    r = t.rollout

    def fn(w, tokens, counts, kv):
        return decode_loop.prefill_impl(d.sampler, w, tokens, counts, kv)

    args = (d.weights, _ints(r.rows, d.b2, r.prefill_width), _ints(r.rows, d.b1), d.cache)
    return _export_decode(t, fn, (d.weight_sh, d.b2, d.b1, d.cache_sh), (d.b2, d.cache_sh), args, donate=(3,))


def append_rows(t: RLTarget, d: DecodeArgs) -> dict[str, Any]:
    """`session.append_rows_impl`: a sub-batch of rows' new turns appended to the cache."""
    r, sub = t.rollout, t.rollout.sub_batch_rows

    def fn(w, kv, logits, idx, tokens, counts):
        return session.append_rows_impl(d.sampler, w, kv, logits, idx, tokens, counts)

    args = (d.weights, d.cache, _logits(t, d), _ints(sub, d.b1), _ints(sub, d.b2, r.prefill_width), _ints(sub, d.b1))
    in_sh = (d.weight_sh, d.cache_sh, d.b2, d.b1, d.b2, d.b1)
    return _export_decode(t, fn, in_sh, (d.cache_sh, d.b2), args, donate=(1, 2))


def _packed(t: RLTarget, d: DecodeArgs, impl: Callable, sizes: Sequence[int]) -> dict[str, Any]:
    """A packed program over the cache and logits: row-sharded int32 arrays of `sizes`, then each row's last token,
    its row and its count or new length (whole on every shard)."""

    def fn(w, kv, logits, *arrays):
        return impl(d.sampler, w, kv, logits, *arrays)

    args = (d.weights, d.cache, _logits(t, d), *(_ints(n, d.b1) for n in sizes), *(_ints(1, d.rep) for _ in range(3)))
    in_sh = (d.weight_sh, d.cache_sh, d.b2) + (d.b1,) * len(sizes) + (d.rep,) * 3
    return _export_decode(t, fn, in_sh, (d.cache_sh, d.b2), args, donate=(1, 2))


def prefill_packed(t: RLTarget, d: DecodeArgs) -> dict[str, Any]:
    """`sampling.packed.prefill_impl`: tokens, rows, slots; the attention's pairs."""
    m, r = decode_loop.batch_multiple(t.setup.run.mesh), t.rollout
    return _packed(t, d, packed.prefill_impl, [r.packed_tokens] * 3 + [m * r.prefill_pairs] * 2)


def append_packed(t: RLTarget, d: DecodeArgs) -> dict[str, Any]:
    """`sampling.packed_append.append_impl`: tokens, rows, slots; the attention blocks; their pairs."""
    m, r = decode_loop.batch_multiple(t.setup.run.mesh), t.rollout
    sizes = [r.packed_tokens] * 3 + [m * r.append_blocks] * 4 + [m * r.append_pairs] * 3
    return _packed(t, d, packed_append.append_impl, sizes)


def copy_rows(t: RLTarget, d: DecodeArgs) -> dict[str, Any]:
    """`row_shards.copy_rows` of one layer's values: siblings' rows copied across shards."""
    r, model_cfg = t.rollout, t.setup.model_cfg
    at = (decode_step.kv_heads_axis(model_cfg.num_kv_heads, t.setup.run.mesh),)

    def fn(x, src, dst):
        return row_shards.copy_rows(x, src, dst, r.capacity, 2, at)

    args = (d.cache.v[0], _ints(r.copy_rows, d.rep), _ints(r.copy_rows, d.rep))
    return _export_decode(t, fn, (d.cache_sh.v[0], d.rep, d.rep), d.cache_sh.v[0], args, donate=(0,))


def decode(t: RLTarget, d: DecodeArgs) -> dict[str, Any]:
    """`decode_loop.decode_impl`: one call's budget of sampled tokens for every row."""
    import jax

    def fn(w, logits, kv, stop_ids, budgets, rng):
        return decode_loop.decode_impl(d.sampler, w, logits, kv, stop_ids, budgets, rng)

    r = t.rollout
    args = (d.weights, _logits(t, d), d.cache, _ints(r.rows, d.b2, 2), _ints(r.rows, d.b1), jax.random.key(0))
    return _export_decode(t, fn, (d.weight_sh, d.b2, d.cache_sh, d.b2, d.b1, d.rep), None, args, donate=(2,))


@contextlib.contextmanager
def _train_rules(t: RLTarget) -> Iterator[None]:
    import jax

    with jax.set_mesh(t.setup.run.mesh), sharding_lib.axis_rules(t.setup.logical):
        yield


def _params(t: RLTarget):
    import jax

    return jax.tree.map(lambda a, sh: _sds(a.shape, a.dtype, sh), t.setup.abstract_params, t.setup.param_shardings)


def _chunk_temperature(t: RLTarget) -> tuple[int, float]:
    config = t.setup.run.config
    return int(config.train.logprob_chunk), float(config.rl.temperature)


def ref_logprobs(t: RLTarget) -> dict[str, Any]:
    """`rl_step.make_logprob_fn` on one micro-batch: the reference's (and the old policy's) log-probs."""
    import jax.numpy as jnp

    tok = sharding_lib.batch_sharding(t.setup.run.mesh, 2)
    fn = rl_step.make_logprob_fn(t.setup.model_cfg, *_chunk_temperature(t))
    shape = (t.train.micro, t.train.length)
    args = (_params(t), _sds(shape, jnp.int32, tok), _sds(shape, bool, tok))
    with _train_rules(t):
        return _export(fn, (t.setup.param_shardings, tok, tok), tok, args)


def rl_update(t: RLTarget) -> dict[str, Any]:
    """`rl_step.make_micro_grads`: one micro-batch's gradient and loss sums under the chosen loss."""
    import jax

    s, c = t.setup, t.setup.run.choices
    fn = rl_step.make_micro_grads(s.model_cfg, c.loss, c.loss_options, *_chunk_temperature(t))
    with _train_rules(t):
        micro = s.run.abstract_micro(t.train.micro, t.train.length)
        micro_sh = jax.tree.map(lambda a: a.sharding, micro)
        out_sh = (s.updater.grads_sh, s.updater.sums_sh)
        return _export(fn, (s.param_shardings, micro_sh), out_sh, (_params(t), micro))


def rl_apply(t: RLTarget) -> dict[str, Any]:
    """`rl_step.make_apply`: the optimizer's step from summed gradients, the state donated."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    s = t.setup
    rep = NamedSharding(s.run.mesh, P())
    sums_sh = {k: rep for k in rl_step.SCALAR_SUMS}
    sums = {k: _sds((), jnp.float32, rep) for k in rl_step.SCALAR_SUMS}
    grads = jax.tree.map(lambda a, sh: _sds(a.shape, jnp.float32, sh), s.abstract_params, s.param_shardings)
    state = state_lib.with_shardings(s.abstract_state, s.state_shardings)
    in_sh = (s.state_shardings, s.param_shardings, sums_sh)
    with _train_rules(t):
        return _export(rl_step.make_apply(s.tx), in_sh, (s.state_shardings, rep), (state, grads, sums), donate=(0,))


def rl_builds(t: RLTarget) -> dict[str, tuple[Callable[[], dict[str, Any]], dict[str, int]]]:
    """Each of `RL_PROGRAMS`, in order: its export (a thunk) and the shapes it is exported at."""
    r, m = t.rollout, decode_loop.batch_multiple(t.setup.run.mesh)
    rollout_at = {"rows": r.rows, "capacity": r.capacity}
    train_at = {"micro": t.train.micro, "length": t.train.length}
    d = decode_args(t)
    builds = {
        "prefill": (lambda: prefill(t, d), {**rollout_at, "width": r.prefill_width}),
        "prefill_packed": (lambda: prefill_packed(t, d), {**rollout_at, "packed_tokens": r.packed_tokens}),
        "append_packed": (
            lambda: append_packed(t, d),
            {**rollout_at, "packed_tokens": r.packed_tokens, "blocks": m * r.append_blocks},
        ),
        "append_rows": (
            lambda: append_rows(t, d),
            {**rollout_at, "width": r.prefill_width, "sub_batch_rows": r.sub_batch_rows},
        ),
        "copy_rows": (lambda: copy_rows(t, d), {**rollout_at, "copy_rows": r.copy_rows}),
        "decode": (lambda: decode(t, d), {**rollout_at, "max_new_tokens": r.max_new_tokens}),
        "ref_logprobs": (lambda: ref_logprobs(t), train_at),
        "rl_update": (lambda: rl_update(t), train_at),
        "rl_apply": (lambda: rl_apply(t), {}),
    }
    assert tuple(builds) == RL_PROGRAMS, "RL_PROGRAMS names every export, in order"
    return builds


def rl_programs(config, tiny: bool) -> tuple[list[dict[str, Any]], Kernels]:
    """Exports the RL stage's programs (module docstring); returns their rows and kernels."""
    t = rl_target(config, tiny)
    return [_run(name, build, at, t.kernels) for name, (build, at) in rl_builds(t).items()], t.kernels


def sft_programs(config, tiny: bool) -> tuple[list[dict[str, Any]], Kernels]:
    """Exports the SFT step (module docstring); returns its row and kernels."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    n_dev = jax.device_count()
    config = config_checks.resolved(config, n_dev)
    mesh = sharding_lib.make_mesh(sft.check(model_prep.dry_run_config(config), n_dev))
    model_cfg = model_prep.abstract_model_config(config, extra_tokens=2 if config.get("add_reward_tokens") else 0)
    model_cfg = tiny_model(model_cfg) if tiny else model_cfg
    k = kernels(config, model_cfg)
    model_cfg = dataclasses.replace(model_cfg, attention_impl=k.lowered["training"])
    shards = mesh.shape["data"] * mesh.shape["fsdp"]
    if tiny:
        shapes = Shapes(micro=shards, length=128, grad_accum=2)
    else:
        accum = int(config.train.grad_accum)
        shapes = Shapes(int(config.train.batch_size) // accum, int(config.data.buckets[-1]), accum)

    def sft_update():
        _, state_sh, abstract, step_fn = sft.optimizer_and_state(
            config, model_cfg, abstract_params_of(model_cfg), mesh, 1000
        )
        b_sh = sharding_lib.batch_sharding(mesh, 3, row_dim=1)
        shape = (shapes.grad_accum, shapes.micro, shapes.length)
        batch = {
            "tokens": _sds(shape, jnp.int32, b_sh),
            "loss_mask": _sds(shape, jnp.int32, b_sh),
            "token_mask": _sds(shape, jnp.bool_, b_sh),
        }
        state = state_lib.with_shardings(abstract, state_sh)
        logical = model_prep.rules(config.sharding.train_rules).logical
        with jax.set_mesh(mesh), sharding_lib.axis_rules(logical):
            out_sh = (state_sh, NamedSharding(mesh, P()))
            return _export(step_fn, (state_sh, b_sh), out_sh, (state, batch), donate=(0,))

    at = {"grad_accum": shapes.grad_accum, "micro": shapes.micro, "length": shapes.length}
    return [_run("sft_update", sft_update, at, k)], k


def without_trajectory_file(config):
    """The config with a JSONL trajectory source (the AWPO presets' `data.steps.trajectories=jsonl`, whose
    `data.steps.path` is the user's file) read as the BFCL split instead: the programs' shapes come from
    `train`, `rl` and `data.buckets`, not from the episodes, and nothing here reads data."""
    import ml_collections

    steps = config.data.get("steps") if config.data.get("source") == "steps" else None
    if steps is None or steps.get("trajectories") != "jsonl" or steps.get("path"):
        return config
    c = ml_collections.ConfigDict(config.to_dict())
    c.data.steps.trajectories = "bfcl"
    print(
        "cuda_lower: data.steps.trajectories=jsonl without a path: checked as 'bfcl' (no data is read)", file=sys.stderr
    )
    return c


def lower_all(config, tiny: bool = False) -> dict[str, Any]:
    """Exports the stage's programs; prints and returns the summary line."""

    kind = stages.kind_of(config)
    config = without_trajectory_file(config)
    with lowering_for(PLATFORM):
        if kind is stages.TRAINERS["rl"]:
            rows, k = rl_programs(config, tiny)
        elif kind is stages.TRAINERS["supervised"]:
            rows, k = sft_programs(config, tiny)
        else:
            raise ValueError(f"trainer: {config.trainer!r} has no training programs to lower (rl or supervised)")
    failed = [r["program"] for r in rows if not r["ok"]]
    summary = {"ok": not failed, "programs": len(rows), "failed": failed, **versions(), **k.fields()}
    print(json.dumps(summary), flush=True)
    return summary


def _environment(argv: Sequence[str]) -> None:
    """Before JAX starts: a CPU host with `--devices` (default 8) fake devices."""
    devices = 8
    for i, a in enumerate(argv):
        if a.startswith("--devices="):
            devices = int(a.split("=", 1)[1])
        elif a == "--devices" and i + 1 < len(argv):
            devices = int(argv[i + 1])
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if "force_host_platform_device_count" not in f]
    os.environ["XLA_FLAGS"] = " ".join([*flags, f"--xla_force_host_platform_device_count={devices}"])
    os.environ["JAX_PLATFORMS"] = "cpu"


def main(argv: Sequence[str] | None = None) -> int:
    from absl import flags
    from ml_collections import config_flags

    argv = list(argv) if argv is not None else sys.argv
    fl = flags.FlagValues()
    config_flags.DEFINE_config_file("config", None, "a stage config file:preset (RL or SFT)", flag_values=fl)
    flags.DEFINE_bool("tiny", False, "a 2-layer stand-in model at small shapes (CI)", flag_values=fl)
    flags.DEFINE_integer("devices", 8, "fake CPU devices (set before JAX starts)", flag_values=fl)
    if any(a in ("-h", "--help", "-help") for a in argv[1:]):  # its own FlagValues have no help flag
        print(f"{__doc__}\nflags:\n{fl.get_help()}")
        return 0
    fl(argv)
    if fl.config is None:
        raise ValueError("--config=configs/<stage>.py:<preset> is required")
    import jax

    if jax.device_count() != fl.devices:
        raise ValueError(f"--devices {fl.devices}: JAX has {jax.device_count()}; run as `python -m` (flags set first)")
    return 0 if lower_all(fl.config, fl.tiny)["ok"] else 1


if __name__ == "__main__":
    _environment(sys.argv)
    sys.exit(main())
