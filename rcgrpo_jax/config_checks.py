"""Start-up validation of a run config. Every failure is a `ConfigError` whose message starts with the
dotted name of the field at fault (`config.train.batch_size: ...`), so a bad run stops before it
loads a model and says what to change.

`check(config, num_devices)` is cheap (no compilation); the memory fit check, which needs the
compiled update step, lives with the trainer and raises `MemoryFitError` with the shortfall.
"""

from __future__ import annotations

import math
import os

from rcgrpo_jax.config_fields import ConfigError, MemoryFitError, get, require
from rcgrpo_jax.config_lib import common
from rcgrpo_jax.data import sources, trajectories
from rcgrpo_jax.models.attention import IMPLEMENTATIONS as impls
from rcgrpo_jax.models.tiny import QWEN_STYLE
from rcgrpo_jax.sampling.decode_step import DECODE_ATTENTION

MESH_AXES = ("data", "fsdp", "tensor")
DTYPES = ("float32", "bfloat16", "float16")


def mesh_shape(mesh_cfg, num_devices: int) -> dict[str, int]:
    """Resolves -1 (at most one axis: all remaining devices) and checks the product against the devices."""
    sizes = {a: int(require({"mesh": mesh_cfg}, f"mesh.{a}")) for a in MESH_AXES}
    free = [a for a, s in sizes.items() if s == -1]
    for a, s in sizes.items():
        if s == 0 or s < -1:
            raise ConfigError(f"mesh.{a}", f"size {s} must be positive or -1 (all remaining devices)")
    if len(free) > 1:
        raise ConfigError(f"mesh.{free[1]}", f"only one mesh axis may be -1 (got {', '.join(free)})")
    fixed = math.prod(s for s in sizes.values() if s != -1)
    if fixed > num_devices:
        fake = fixed * max(1, 8 // fixed) if free else fixed  # a -1 axis: an 8-device host, as the presets assume
        raise ConfigError(
            "mesh",
            f"mesh {sizes} needs {fixed} devices but only {num_devices} are present (a CPU run or --dry_run can "
            f"fake them: XLA_FLAGS=--xla_force_host_platform_device_count={fake})",
        )
    if free:
        if num_devices % fixed:
            raise ConfigError(f"mesh.{free[0]}", f"-1 leaves {num_devices} / {fixed} devices, not a whole number")
        sizes[free[0]] = num_devices // fixed
    return sizes  # a mesh smaller than the device count runs on the first devices


def check_path(config, dotted: str, *, required: bool, must_have: str | None = None) -> None:
    """A ConfigError unless config's `dotted` path exists (when set; `required`: it must be), holds
    `must_have`, and, for an HF checkpoint's config.json, names its model_type."""
    path = get(config, dotted)
    if path is None or path == "":
        if required:
            raise ConfigError(dotted, "missing checkpoint path (set --config." + dotted + "=DIR)")
        return
    if not os.path.exists(path):
        raise ConfigError(dotted, f"{path!r} does not exist")
    if must_have and not os.path.exists(os.path.join(path, must_have)):
        raise ConfigError(dotted, f"{path!r} has no {must_have} (expected an HF checkpoint directory)")
    if must_have == "config.json":
        _check_hf_config(dotted, os.path.join(path, must_have))


def _check_hf_config(dotted: str, file: str) -> None:
    """An HF config.json must be a JSON object naming its `model_type` (what the model is built from)."""
    import json

    try:
        with open(file, encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(dotted, f"{file} cannot be read: {e}") from None
    except json.JSONDecodeError as e:
        raise ConfigError(dotted, f"{file} is not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    if not isinstance(cfg, dict) or not isinstance(cfg.get("model_type"), str):
        raise ConfigError(dotted, f"{file} is not an HF model config (a JSON object with a 'model_type')")


def resolved(config, num_devices: int):
    """`config`, or a copy with `train.grad_accum = -1` (auto) resolved for `num_devices` devices: one row per
    batch shard (mesh data x fsdp) per micro-batch, so a preset keeps its per-device activation size on any
    number of hosts (8 devices: 4 shards; 4 hosts x 8: 16)."""
    if int(get(config, "train.grad_accum", 1)) != -1:
        return config
    import copy

    shape = mesh_shape(require(config, "mesh"), num_devices)
    shards = shape["data"] * shape["fsdp"]
    batch = int(require(config, "train.batch_size"))
    if batch % shards:
        raise ConfigError(
            "train.batch_size",
            f"{batch} is not divisible by the {shards} batch shards (mesh data x fsdp = {shape['data']} x "
            f"{shape['fsdp']}) that train.grad_accum=-1 puts one row each on; set train.grad_accum or the batch",
        )
    config = copy.deepcopy(config)
    config.train.grad_accum = batch // shards
    return config


def trainer_kind(config) -> str:
    """`config.trainer`, one of the trainer kinds (`config_lib.common.TRAINERS`), else ConfigError."""
    name = config.get("trainer")
    if name not in common.TRAINERS:
        raise ConfigError("trainer", f"{name!r} is not one of {', '.join(common.TRAINERS)}")
    return name


def check(config, num_devices: int) -> dict[str, int]:
    """Validates `config` for `num_devices` devices; returns the resolved mesh shape."""
    config = resolved(config, num_devices)

    require(config, "stage")
    trainer_kind(config)
    shape = mesh_shape(require(config, "mesh"), num_devices)
    _check_model(config)
    _check_batch(config, shape)
    _check_data(config)
    _check_run(config)
    return shape


def _check_model(config) -> None:
    """The model section: a real preset needs weights (tiny may build them), the attention and dtype choices,
    the RL reference's weights, and the tiny checkpoint's tools format."""
    build_tiny = bool(get(config, "model.build_tiny", False))
    check_path(config, "model.path", required=not build_tiny, must_have="config.json")
    dec = get(config, "model.decode_attention")
    if dec is not None and dec not in DECODE_ATTENTION:  # the choices, defined once (sampling.decode_step)
        raise ConfigError("model.decode_attention", f"{dec!r} is not one of {', '.join(DECODE_ATTENTION)}")

    impl = get(config, "model.attention_impl")
    if impl is not None and impl not in impls:
        raise ConfigError("model.attention_impl", f"{impl!r} is not one of {', '.join(impls)}")
    for f in ("model.dtype", "model.param_dtype"):
        if get(config, f) is not None and get(config, f) not in DTYPES:
            raise ConfigError(f, f"unknown dtype {get(config, f)!r}; known: {', '.join(DTYPES)}")
    if "reference" in config:  # RL: the frozen stage-1 policy
        check_path(config, "reference.path", required=not build_tiny, must_have="config.json")
    if build_tiny and not get(config, "model.path"):
        arch, tools = get(config, "model.tiny_arch", "qwen2"), get(config, "model.tiny_tools_format", "json")
        if arch not in QWEN_STYLE and tools != "json":
            raise ConfigError(
                "model.tiny_tools_format",
                f"{tools!r} exists only for tiny_arch in {QWEN_STYLE} (set it to 'json' for tiny_arch={arch!r})",
            )


def _check_batch(config, shape: dict[str, int]) -> None:
    """Whole micro-batches, each split evenly over the batch shards of mesh `shape` (data x fsdp: the batch is
    split over both axes), and for RL into whole groups."""
    batch_shards = shape["data"] * shape["fsdp"]
    batch = int(require(config, "train.batch_size"))
    accum = int(get(config, "train.grad_accum", 1))
    if batch <= 0:
        raise ConfigError("train.batch_size", f"must be positive, got {batch}")
    if accum <= 0:
        raise ConfigError("train.grad_accum", f"must be positive (or -1: one row per batch shard), got {accum}")
    if batch % accum:
        raise ConfigError("train.batch_size", f"{batch} is not divisible by train.grad_accum={accum}")
    micro = batch // accum
    if micro % batch_shards:
        raise ConfigError(
            "train.batch_size",
            f"micro-batch {micro} (= {batch} / grad_accum {accum}) is not divisible "
            f"by the data axis: mesh data x fsdp = {shape['data']} x {shape['fsdp']} = {batch_shards}",
        )
    if "rl" in config:
        group = int(require(config, "rl.group_size"))
        if group <= 0:
            raise ConfigError("rl.group_size", f"must be positive, got {group}")
        if batch % group:
            raise ConfigError("train.batch_size", f"{batch} is not divisible by rl.group_size={group}")


def _check_data(config) -> None:
    """The data section: its files, the failure site and kinds, the task source and the length buckets."""
    check_path(config, "data.path", required=False)
    check_path(config, "data.exploration_path", required=False)
    site = get(config, "data.failure_site")
    if site is not None and site not in trajectories.FAILURE_SITES:
        raise ConfigError("data.failure_site", f"{site!r} is not one of {', '.join(trajectories.FAILURE_SITES)}")
    kinds = get(config, "data.failure_kinds")
    if kinds is not None:
        try:
            trajectories.failure_kinds(kinds)
        except ValueError as e:
            raise ConfigError("data.failure_kinds", str(e)) from None
    if "data" in config and "source" in config.data:
        sources.check(config.data)  # the task source and its own fields (data.world, data.steps)
    buckets = tuple(int(b) for b in get(config, "data.buckets", ()) or ())
    if "data" in config and "buckets" in config.data:
        if not buckets or any(b <= 1 for b in buckets) or list(buckets) != sorted(set(buckets)):
            raise ConfigError("data.buckets", f"need strictly increasing lengths > 1, got {buckets}")


def _check_run(config) -> None:
    """The optimizer's rate and warm-up, the run's length, the checkpoints and the multi-host start."""
    if get(config, "optim.lr") is not None and not float(config.optim.lr) >= 0:  # 0: a control run that never moves
        raise ConfigError("optim.lr", f"must be positive (or 0 for a control run), got {config.optim.lr}")
    wr = get(config, "optim.warmup_ratio")
    if wr is not None and not 0 <= float(wr) < 1:
        raise ConfigError("optim.warmup_ratio", f"must be in [0, 1), got {wr}")
    if int(get(config, "train.epochs", 1)) <= 0 and int(get(config, "train.max_steps", -1)) <= 0:
        raise ConfigError("train.epochs", "the run has no steps (epochs <= 0 and max_steps <= 0)")
    if int(get(config, "checkpoint.every_steps", 1)) <= 0:
        raise ConfigError("checkpoint.every_steps", "must be positive")
    keep = get(config, "checkpoint.max_to_keep", 1)
    if keep is not None and int(keep) <= 0:
        raise ConfigError("checkpoint.max_to_keep", "must be positive (or None to keep all)")
    init = get(config, "multihost.initialize", "auto")
    if init not in ("auto", "always", "never"):
        raise ConfigError("multihost.initialize", f"{init!r} is not one of auto, always, never")


def check_memory(field: str, needed_bytes: int, budget_bytes: int) -> None:
    """Raises `MemoryFitError` naming `field` and the shortfall when `needed_bytes` exceeds the budget."""
    if needed_bytes > budget_bytes:
        over = needed_bytes - budget_bytes
        raise MemoryFitError(
            field,
            f"the compiled step needs {needed_bytes / 1e9:.2f} GB per device, "
            f"{over / 1e9:.2f} GB over the {budget_bytes / 1e9:.2f} GB budget "
            "(raise mesh.fsdp, train.grad_accum or model.remat, or shorten data.buckets)",
        )
