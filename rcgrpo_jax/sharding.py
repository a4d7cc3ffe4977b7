"""Mesh construction and sharding as data.

A param's sharding is found in two steps, both plain data:
  1. an ordered list of (regex on the 'a/b/c' param path, logical axes tuple): the first regex that
     `re.search`es the path gives one logical name per array dim;
  2. a map logical axis -> mesh axis (a name, a tuple of names, or None = replicated).
Train and decode use the same param rules with different maps: training splits weights over 'fsdp'
(FSDP) and 'tensor' (tensor parallel); decoding keeps weights whole over 'fsdp' (which then only
splits the batch) and splits over 'tensor'.

Activations are constrained from model code by logical name through `constrain`, which reads the map
installed by `axis_rules(logical_map)` (flax's logical-axis-rules context) and is a no-op when no mesh
or no map is set, so the same model code runs unsharded in tests.
"""

from __future__ import annotations

import logging
import math
import re
from typing import Any, Mapping, NamedTuple, Sequence

import flax.linen as nn
import jax
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

MESH_AXES = ("data", "fsdp", "tensor")
BATCH_AXES = ("data", "fsdp")  # a batch's rows are split over both (FSDP is data parallel too)

LogicalAxes = tuple[str | None, ...]
ParamRules = Sequence[tuple[str, LogicalAxes]]
LogicalMap = Mapping[str, str | tuple[str, ...] | None]

# Param logical axes. 'layers' is the stacked-layer axis from nn.scan.
PARAM_RULES: tuple[tuple[str, LogicalAxes], ...] = (
    (r"^embed/embedding$", ("vocab", "embed")),
    (r"^layers/attn/[qkv]_proj/kernel$", ("layers", "embed", "heads")),
    (r"^layers/attn/[qkv]_proj/bias$", ("layers", "heads")),
    (r"^layers/attn/o_proj/kernel$", ("layers", "heads", "embed")),
    (r"^layers/attn/o_proj/bias$", ("layers", None)),  # [L, D] (Qwen3 attention_bias): small, whole
    (r"^layers/attn/[qk]_norm/scale$", ("layers", "norm")),  # [L, Dh] (Qwen3): whole on every device
    (r"^layers/mlp/(gate|up)_proj/kernel$", ("layers", "embed", "mlp")),
    (r"^layers/mlp/down_proj/kernel$", ("layers", "mlp", "embed")),
    (r"^layers/\w+_norm/scale$", ("layers", "norm")),
    (r"^final_norm/scale$", ("norm",)),
    (r"^lm_head/kernel$", ("embed", "vocab")),
)

# Activation logical axes used in model code (separate names from the param axes, because in FSDP the
# activations' feature dim stays whole while the weights' 'embed' dim is split over 'fsdp').
_ACTIVATIONS: dict[str, Any] = {
    "batch": ("data", "fsdp"),
    "seq": None,
    "hidden": None,
    "act_heads": "tensor",
    "act_kv_heads": "tensor",
    "act_mlp": "tensor",
    "act_vocab": "tensor",
}

TRAIN_LOGICAL_MAP: dict[str, Any] = {
    "layers": None,
    "embed": "fsdp",
    "heads": "tensor",
    "mlp": "tensor",
    "vocab": "tensor",
    "norm": None,
    **_ACTIVATIONS,
}

DECODE_LOGICAL_MAP: dict[str, Any] = {**TRAIN_LOGICAL_MAP, "embed": None}


class Rules(NamedTuple):
    """A param rule list with the logical map to use it with."""

    params: ParamRules
    logical: LogicalMap

    def shardings(self, abstract_params: Any, mesh: Mesh) -> Any:
        """The NamedSharding tree of `abstract_params` under these rules (`param_shardings`)."""
        return param_shardings(abstract_params, mesh, self.params, self.logical)


TRAIN_RULES = Rules(PARAM_RULES, TRAIN_LOGICAL_MAP)
DECODE_RULES = Rules(PARAM_RULES, DECODE_LOGICAL_MAP)


def make_mesh(axes: Mapping[str, int] | Any, devices: Sequence[jax.Device] | None = None) -> Mesh:
    """Mesh over ('data', 'fsdp', 'tensor') from sizes such as {'data': 1, 'fsdp': -1, 'tensor': 2}.

    Missing axes have size 1; one axis may be -1 (all remaining devices). If the product is smaller than
    the device count, the first devices are used. Axes are Auto (sharding by jit + constraints).
    """
    devices = list(devices if devices is not None else jax.devices())
    sizes = {name: 1 for name in MESH_AXES}
    for name in list(axes.keys()):
        if name not in MESH_AXES:
            raise ValueError(f"mesh axis {name!r} is not one of {MESH_AXES}")
        sizes[name] = int(axes[name])
    rest = [n for n, s in sizes.items() if s == -1]
    if len(rest) > 1:
        raise ValueError(f"mesh: at most one axis may be -1, got {rest}")
    if any(s == 0 or s < -1 for s in sizes.values()):
        raise ValueError(f"mesh: axis sizes must be positive or -1, got {sizes}")
    known = math.prod(s for s in sizes.values() if s != -1)
    if rest:
        if len(devices) % known:
            raise ValueError(f"mesh: {len(devices)} devices are not divisible by the fixed axes {sizes}")
        sizes[rest[0]] = len(devices) // known
    total = math.prod(sizes.values())
    if total > len(devices):
        raise ValueError(f"mesh: {sizes} needs {total} devices but only {len(devices)} exist")
    shape = tuple(sizes[n] for n in MESH_AXES)
    return jax.make_mesh(shape, MESH_AXES, axis_types=(AxisType.Auto,) * 3, devices=devices[:total])


def path_str(path: tuple) -> str:
    """'a/b/c' for a jax key path."""
    parts = []
    for k in path:
        for attr in ("key", "name", "idx"):
            if hasattr(k, attr):
                parts.append(str(getattr(k, attr)))
                break
        else:
            parts.append(str(k))
    return "/".join(parts)


def logical_axes_for(path: str, rules: ParamRules) -> LogicalAxes:
    for pattern, axes in rules:
        if re.search(pattern, path):
            return tuple(axes)
    raise ValueError(f"no sharding rule matches param {path!r}")


def _as_tuple(mesh_axes: Any) -> tuple[str, ...]:
    if mesh_axes is None:
        return ()
    return (mesh_axes,) if isinstance(mesh_axes, str) else tuple(mesh_axes)


def logical_to_spec(
    logical: LogicalAxes,
    logical_map: LogicalMap,
    mesh: Mesh | None = None,
    shape: Sequence[int] | None = None,
    *,
    name: str = "array",
) -> PartitionSpec:
    """PartitionSpec for logical axes. Raises if a logical axis is unmapped or a mesh axis repeats.

    With `mesh` and `shape`, mesh axes absent from the mesh are dropped, and a dim not divisible by its
    mesh axes' size is left whole (logged), since jax requires even splits.
    """
    entries: list[Any] = []
    used: list[str] = []
    for dim, axis in enumerate(logical):
        if axis is None:
            entries.append(None)
            continue
        if axis not in logical_map:
            raise ValueError(f"{name}: logical axis {axis!r} has no entry in the logical->mesh map")
        mesh_axes = _as_tuple(logical_map[axis])
        if mesh is not None:
            mesh_axes = tuple(a for a in mesh_axes if a in mesh.shape)
        for a in mesh_axes:
            if a in used:
                raise ValueError(f"{name}: mesh axis {a!r} is used twice in one spec {tuple(logical)}")
            used.append(a)
        if mesh is not None and shape is not None and mesh_axes:
            split = math.prod(mesh.shape[a] for a in mesh_axes)
            if shape[dim] % split:
                logging.warning(
                    "%s: dim %d (size %d) not divisible by %s; left whole", name, dim, shape[dim], mesh_axes
                )
                mesh_axes = ()
        entries.append(None if not mesh_axes else mesh_axes[0] if len(mesh_axes) == 1 else mesh_axes)
    return PartitionSpec(*entries)


def param_specs(abstract_params: Any, rules: ParamRules, logical_map: LogicalMap, mesh: Mesh | None = None) -> Any:
    """PartitionSpec tree matching the params (arrays or ShapeDtypeStructs)."""

    def one(path, leaf):
        name = path_str(path)
        logical = logical_axes_for(name, rules)
        if len(logical) != len(leaf.shape):
            raise ValueError(f"rule for {name!r} names {len(logical)} axes but the param has shape {leaf.shape}")
        return logical_to_spec(logical, logical_map, mesh, leaf.shape, name=name)

    return jax.tree_util.tree_map_with_path(one, abstract_params)


def param_shardings(abstract_params: Any, mesh: Mesh, rules: ParamRules, logical_map: LogicalMap) -> Any:
    """NamedSharding tree matching the params. Every param must match a rule."""
    specs = param_specs(abstract_params, rules, logical_map, mesh)
    return jax.tree.map(lambda s: NamedSharding(mesh, s), specs, is_leaf=lambda x: isinstance(x, PartitionSpec))


def shard_params(params: Any, mesh: Mesh, rules: Rules = TRAIN_RULES) -> Any:
    """Moves an existing params tree onto its shardings (reshards if already placed)."""
    return jax.device_put(params, param_shardings(params, mesh, rules.params, rules.logical))


def axis_rules(logical_map: LogicalMap):
    """Context manager installing the logical map for `constrain` (flax's logical axis rules)."""
    return nn.logical_axis_rules(tuple((k, v) for k, v in logical_map.items()))


def constrain(x: jax.Array, logical: LogicalAxes) -> jax.Array:
    """Sharding constraint by logical names; a no-op without a mesh (jax.set_mesh) and `axis_rules`."""
    rules = nn.get_logical_axis_rules()
    mesh = jax.sharding.get_abstract_mesh()
    if not rules or mesh.empty:
        return x
    spec = logical_to_spec(logical, dict(rules), mesh, x.shape, name="activation")
    return jax.lax.with_sharding_constraint(x, spec)


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


__all__ = [
    "MESH_AXES",
    "PARAM_RULES",
    "TRAIN_LOGICAL_MAP",
    "DECODE_LOGICAL_MAP",
    "TRAIN_RULES",
    "DECODE_RULES",
    "Rules",
    "make_mesh",
    "path_str",
    "logical_axes_for",
    "logical_to_spec",
    "param_specs",
    "param_shardings",
    "shard_params",
    "axis_rules",
    "constrain",
    "replicated",
]


def batch_sharding(mesh: Mesh, ndim: int, row_dim: int = 0) -> NamedSharding:
    """Rows (dimension `row_dim` of an `ndim`-dimensional batch array) over BATCH_AXES, the rest whole."""
    spec = [None] * ndim
    spec[row_dim] = BATCH_AXES
    return NamedSharding(mesh, PartitionSpec(*spec))
