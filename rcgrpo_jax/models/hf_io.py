"""HF checkpoint <-> params: config.json + safetensors (one file, or shards with model.safetensors.index.json).

Loading is abstract first: param shapes come from `jax.eval_shape`, shardings from the rules, and each
param is built with `jax.make_array_from_callback`, so every device reads only its own shard from the
memory-mapped files; no device (and no host buffer) ever holds the whole model. The safetensors format
(8-byte header length, JSON header, raw little-endian data) is read and written here directly, because
the numpy backend of the `safetensors` package has no bfloat16.

Every param name mapping lives in HF_TABLE below.
"""

from __future__ import annotations

import json
import os
import re
import struct
from typing import Any, Callable, Iterable, Iterator

import jax
import ml_dtypes
import numpy as np

from rcgrpo_jax import sharding as shd
from rcgrpo_jax.models.config import ModelConfig
from rcgrpo_jax.models.transformer import abstract_params

# (our param path, HF tensor name, stored transposed in HF). '{i}' marks a per-layer tensor; ours are
# stacked along a leading [L] axis (nn.scan). HF Linear weights are [out, in]; our kernels are [in, out].
HF_TABLE: tuple[tuple[str, str, bool], ...] = (
    ("embed/embedding", "model.embed_tokens.weight", False),
    ("layers/input_norm/scale", "model.layers.{i}.input_layernorm.weight", False),
    ("layers/post_attn_norm/scale", "model.layers.{i}.post_attention_layernorm.weight", False),
    ("layers/attn/q_proj/kernel", "model.layers.{i}.self_attn.q_proj.weight", True),
    ("layers/attn/q_proj/bias", "model.layers.{i}.self_attn.q_proj.bias", False),
    ("layers/attn/k_proj/kernel", "model.layers.{i}.self_attn.k_proj.weight", True),
    ("layers/attn/k_proj/bias", "model.layers.{i}.self_attn.k_proj.bias", False),
    ("layers/attn/v_proj/kernel", "model.layers.{i}.self_attn.v_proj.weight", True),
    ("layers/attn/v_proj/bias", "model.layers.{i}.self_attn.v_proj.bias", False),
    ("layers/attn/o_proj/kernel", "model.layers.{i}.self_attn.o_proj.weight", True),
    ("layers/attn/o_proj/bias", "model.layers.{i}.self_attn.o_proj.bias", False),
    ("layers/attn/q_norm/scale", "model.layers.{i}.self_attn.q_norm.weight", False),
    ("layers/attn/k_norm/scale", "model.layers.{i}.self_attn.k_norm.weight", False),
    ("layers/mlp/gate_proj/kernel", "model.layers.{i}.mlp.gate_proj.weight", True),
    ("layers/mlp/up_proj/kernel", "model.layers.{i}.mlp.up_proj.weight", True),
    ("layers/mlp/down_proj/kernel", "model.layers.{i}.mlp.down_proj.weight", True),
    ("final_norm/scale", "model.norm.weight", False),
    ("lm_head/kernel", "lm_head.weight", True),
)
_TABLE = {ours: (hf, transposed) for ours, hf, transposed in HF_TABLE}

# HF tensors we may find but do not need: RoPE buffers, and lm_head.weight duplicated in tied checkpoints.
_IGNORABLE = (r"rotary_emb\.inv_freq$",)

_ST_DTYPES = {
    "F64": np.dtype(np.float64),
    "F32": np.dtype(np.float32),
    "F16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "I64": np.dtype(np.int64),
    "I32": np.dtype(np.int32),
    "I16": np.dtype(np.int16),
    "I8": np.dtype(np.int8),
    "U8": np.dtype(np.uint8),
    "BOOL": np.dtype(bool),
}
_ST_NAMES = {v: k for k, v in _ST_DTYPES.items()}


# ----------------------------------------------------------------------------------------------------
# safetensors files


class SafetensorsReader:
    """Lazy, memory-mapped access to all tensors of a checkpoint dir (single file or index of shards)."""

    def __init__(self, path: str | os.PathLike):
        path = os.fspath(path)
        index = os.path.join(path, "model.safetensors.index.json")
        if os.path.exists(index):
            with open(index) as f:
                files = sorted(set(json.load(f)["weight_map"].values()))
        elif os.path.exists(os.path.join(path, "model.safetensors")):
            files = ["model.safetensors"]
        else:
            raise FileNotFoundError(f"no model.safetensors or model.safetensors.index.json in {path}")
        self._entries: dict[str, tuple[np.memmap, np.dtype, tuple[int, ...], int, int]] = {}
        for name in files:
            self._read_header(os.path.join(path, name))

    def _read_header(self, file: str) -> None:
        with open(file, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        data = np.memmap(file, dtype=np.uint8, mode="r")
        for name, info in header.items():
            if name == "__metadata__":
                continue
            if info["dtype"] not in _ST_DTYPES:
                raise ValueError(f"{file}: tensor {name} has unsupported dtype {info['dtype']}")
            begin, end = info["data_offsets"]
            self._entries[name] = (data, _ST_DTYPES[info["dtype"]], tuple(info["shape"]), 8 + n + begin, 8 + n + end)

    def names(self) -> set[str]:
        return set(self._entries)

    def shape(self, name: str) -> tuple[int, ...]:
        return self._entries[name][2]

    def get(self, name: str) -> np.ndarray:
        """A read-only view backed by the file: slicing it reads only the sliced bytes."""
        data, dtype, shape, begin, end = self._entries[name]
        return data[begin:end].view(dtype).reshape(shape)


def write_safetensors(
    file: str | os.PathLike,
    specs: list[tuple[str, np.dtype, tuple[int, ...]]],
    arrays: Iterable[tuple[str, np.ndarray]],
    metadata: dict[str, str] | None = None,
) -> None:
    """Streams tensors to one safetensors file. `specs` fixes the header; `arrays` yields the tensors in
    the same order, so only one tensor (or one stacked param) needs to be on the host at a time."""
    header: dict[str, Any] = {"__metadata__": metadata or {"format": "pt"}}
    offset = 0
    for name, dtype, shape in specs:
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        header[name] = {
            "dtype": _ST_NAMES[np.dtype(dtype)],
            "shape": list(shape),
            "data_offsets": [offset, offset + nbytes],
        }
        offset += nbytes
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # data starts 8-byte aligned
    with open(file, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for (name, dtype, shape), (got_name, arr) in zip(specs, arrays, strict=True):
            if got_name != name or arr.dtype != dtype or arr.shape != tuple(shape):
                raise ValueError(
                    f"tensor {got_name} {arr.dtype}{arr.shape} does not match header {name} {dtype}{shape}"
                )
            f.write(np.ascontiguousarray(arr).tobytes())


# ----------------------------------------------------------------------------------------------------
# load


def _hf_source(ours: str) -> tuple[str, bool]:
    if ours not in _TABLE:
        raise ValueError(f"param {ours!r} has no entry in hf_io.HF_TABLE")
    return _TABLE[ours]


def _expected_names(abstract: Any, num_layers: int) -> list[str]:
    names = []
    for path, _ in jax.tree_util.tree_leaves_with_path(abstract):
        hf, _ = _hf_source(shd.path_str(path))
        names += [hf.format(i=i) for i in range(num_layers)] if "{i}" in hf else [hf]
    return names


def _host_view(reader: SafetensorsReader, name: str, transposed: bool, shape: tuple[int, ...]) -> np.ndarray:
    arr = reader.get(name)
    arr = arr.T if transposed else arr
    if arr.shape != tuple(shape):
        raise ValueError(f"HF tensor {name} has shape {reader.shape(name)}, expected {shape} (transposed={transposed})")
    return arr


def _load_param(reader: SafetensorsReader, ours: str, aval: jax.ShapeDtypeStruct, sharding: jax.sharding.Sharding):
    hf, transposed = _hf_source(ours)
    dtype = np.dtype(aval.dtype)
    if "{i}" in hf:
        per_layer = [_host_view(reader, hf.format(i=i), transposed, aval.shape[1:]) for i in range(aval.shape[0])]

        def shard(index: tuple[slice, ...]) -> np.ndarray:
            return np.stack([per_layer[i][index[1:]] for i in range(aval.shape[0])[index[0]]]).astype(dtype)
    else:
        whole = _host_view(reader, hf, transposed, aval.shape)

        def shard(index: tuple[slice, ...]) -> np.ndarray:
            return np.asarray(whole[index]).astype(dtype)

    return jax.make_array_from_callback(aval.shape, sharding, shard)


def load_hf(
    path: str | os.PathLike,
    *,
    dtype: Any = None,
    mesh: jax.sharding.Mesh | None = None,
    rules: shd.Rules | None = None,
    remat: bool = False,
) -> tuple[ModelConfig, dict]:
    """Reads an HF Qwen2/Qwen3/LLaMA checkpoint dir into (config, params).

    `dtype` sets both the param and compute dtype (default: the checkpoint's stored dtype). With `mesh`,
    each param is placed on its NamedSharding from `rules` (default `sharding.TRAIN_RULES`); without one,
    on the default device.
    """
    config = ModelConfig.from_hf(path, dtype=dtype, remat=remat)
    abstract = abstract_params(config)
    if mesh is None:
        device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
        shardings = jax.tree.map(lambda _: device, abstract)
    else:
        rules = rules or shd.TRAIN_RULES
        shardings = shd.param_shardings(abstract, mesh, rules.params, rules.logical)
    reader = SafetensorsReader(path)
    expected = _expected_names(abstract, config.num_layers)
    missing = [n for n in expected if n not in reader.names()]
    if missing:
        raise ValueError(f"{path}: checkpoint lacks tensors {missing[:8]}{' ...' if len(missing) > 8 else ''}")
    ignorable = {"lm_head.weight"} if config.tie_word_embeddings else set()
    extra = sorted(
        n for n in reader.names() - set(expected) if n not in ignorable and not any(re.search(p, n) for p in _IGNORABLE)
    )
    if extra:
        raise ValueError(f"{path}: checkpoint has tensors this model does not use: {extra[:8]}")
    params = jax.tree_util.tree_map_with_path(
        lambda p, aval, s: _load_param(reader, shd.path_str(p), aval, s), abstract, shardings
    )
    return config, params


# ----------------------------------------------------------------------------------------------------
# save


def _to_host(x: jax.Array) -> np.ndarray:
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(jax.device_get(x))


def _hf_tensors(params: dict, num_layers: int) -> tuple[list, Callable[[], Iterator[tuple[str, np.ndarray]]]]:
    leaves = [(shd.path_str(p), x) for p, x in jax.tree_util.tree_leaves_with_path(params)]
    specs = []
    for ours, x in leaves:
        hf, transposed = _hf_source(ours)
        shape = tuple(x.shape[1:] if "{i}" in hf else x.shape)
        shape = shape[::-1] if transposed else shape
        names = [hf.format(i=i) for i in range(num_layers)] if "{i}" in hf else [hf]
        specs += [(n, np.dtype(x.dtype), shape) for n in names]

    def arrays() -> Iterator[tuple[str, np.ndarray]]:
        for ours, x in leaves:
            hf, transposed = _hf_source(ours)
            host = _to_host(x)  # one param (all layers of it) on the host at a time
            layers = [(hf.format(i=i), host[i]) for i in range(num_layers)] if "{i}" in hf else [(hf, host)]
            for name, arr in layers:
                yield name, (arr.T if transposed else arr)

    return specs, arrays


def save_hf(config: ModelConfig, params: dict, path: str | os.PathLike, *, tokenizer: Any = None) -> None:
    """Writes config.json + model.safetensors (HF names, params' dtype) that
    transformers.AutoModelForCausalLM.from_pretrained loads; also the tokenizer if given."""
    path = os.fspath(path)
    specs, arrays = _hf_tensors(params, config.num_layers)
    if jax.process_index() == 0:
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(config.to_hf(), f, indent=2)
        write_safetensors(os.path.join(path, "model.safetensors"), specs, arrays())
        if tokenizer is not None:
            tokenizer.save_pretrained(path)
    else:  # other hosts still take part in the gathers
        for _ in arrays():
            pass
