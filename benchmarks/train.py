"""SFT training-step throughput: our jitted step vs HF transformers + torch.optim.AdamW on the same weights.

    python -m benchmarks.train [--models tiny,medium] [--batch 8] [--seq 512] [--repeats 3] [--devices 1]

One step = forward, backward and an AdamW update (global-norm clip 1.0 on both sides) on a batch of
random tokens, every token a target. Ours is `rcgrpo_jax.train.sft.make_train_step` (chunked
log-probs, guarded update) jitted on ONE CPU device; theirs is `Qwen2ForCausalLM(labels=...)` with
`torch.optim.AdamW`, both float32 on the same random checkpoint, in the same process. `--devices N`
(N > 1): ours on a data-parallel mesh of N XLA CPU devices (`common.data_mesh`: the batch's rows split,
the state copied, gradients averaged by XLA's partitioner); torch is unchanged.

One JSON line per model: tokens/s of each, ours/torch, and each as a fraction of the machine's
measured fp32 matmul peak (a large jnp matmul timed in the same run). Model FLOPs per step are
6 * params * tokens + attention (see `common.train_flops`). Times are medians over `--repeats` steps
after one warm-up step (compilation excluded). The machine is shared: every row carries the load.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
from typing import Any

from benchmarks import common, model_sizes
from rcgrpo_jax import models
from rcgrpo_jax.train import optim as optim_lib
from rcgrpo_jax.train import sft
from rcgrpo_jax.train import state as state_lib

LR, CLIP = 1e-5, 1.0


def build_models(name: str, seq: int):
    """(HF torch model, our ModelConfig, our params) of `model_sizes.MODELS[name]` holding the same random float32
    weights."""
    import torch

    torch.manual_seed(0)
    hf = model_sizes.hf_model(name, max_position_embeddings=max(seq, 1024))
    with tempfile.TemporaryDirectory() as d:
        hf.save_pretrained(d)
        config, params = models.load_hf(d, dtype="float32")
    return hf.train(), config, params


def ours_step_fn(config, params, batch_tokens, *, chunk: int, device, unroll: int = 1, mesh=None):
    """A zero-argument callable running one of our SFT steps (state threaded through, donated): on
    `device`, or with `mesh` (a data mesh) the batch's rows split over its devices and the state copied."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    ocfg = common.constant_optim(LR, CLIP)
    tx = optim_lib.make_optimizer(ocfg, 1000)
    lr_fn = optim_lib.schedule(LR, 1000, 0.0, 1.0)
    config = dataclasses.replace(config, scan_unroll=unroll)
    step = jax.jit(sft.make_train_step(config, tx, lr_fn, chunk), donate_argnums=(0,))
    tokens = jnp.asarray(batch_tokens, jnp.int32)[None]  # [grad_accum=1, B, T]
    rows = device if mesh is None else NamedSharding(mesh, P(None, "data"))  # tokens [1, B, T]: B split
    batch = jax.device_put(
        {"tokens": tokens, "loss_mask": jnp.ones_like(tokens), "token_mask": jnp.ones(tokens.shape, bool)}, rows
    )
    copied = device if mesh is None else NamedSharding(mesh, P())
    holder = {"state": jax.device_put(state_lib.create(params, tx, jax.random.PRNGKey(0)), copied)}

    def run() -> float:
        holder["state"], metrics = step(holder["state"], batch)
        return float(jax.block_until_ready(metrics["loss"]))

    return run


def torch_step_fn(hf, batch_tokens):
    """A zero-argument callable running one HF + torch.optim.AdamW step."""
    import torch

    o = common.constant_optim(LR, CLIP)
    opt = torch.optim.AdamW(hf.parameters(), lr=LR, betas=(o.b1, o.b2), eps=o.eps, weight_decay=o.weight_decay)
    ids = torch.as_tensor(batch_tokens, dtype=torch.long)

    def run() -> float:
        loss = hf(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(hf.parameters(), CLIP)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(loss.detach())

    return run


def bench_model(
    name: str,
    *,
    batch: int,
    seq: int,
    repeats: int,
    chunk: int,
    peak: float,
    skip_torch: bool = False,
    profile: bool = False,
    unroll: int = 1,
    devices: int = 1,
) -> dict[str, Any]:
    import jax
    import numpy as np
    import torch

    row: dict[str, Any] = {
        "bench": "train_step",
        "model": name,
        "batch": batch,
        "seq": seq,
        "chunk": chunk,
        "unroll": unroll,
        "devices": devices,
        "repeats": repeats,
        "torch_threads": torch.get_num_threads(),
    }
    hf, config, params = build_models(name, seq)
    n_params = common.param_count(params)
    tokens = np.random.default_rng(0).integers(1, config.vocab_size, (batch, seq))
    flops = common.train_flops(n_params, config, batch, seq)
    row.update(params=n_params, gflop_per_step=flops / 1e9, peak_gflop_s=peak / 1e9)

    if batch % devices:
        raise ValueError(f"--devices {devices} must divide --batch {batch}")
    ours = ours_step_fn(
        config,
        params,
        tokens,
        chunk=min(chunk, config.vocab_size),
        device=jax.devices()[0],
        unroll=unroll,
        mesh=common.data_mesh(devices),
    )
    del params
    t_ours, _ = common.time_call(ours, repeats=repeats)
    row.update(ours_step_s=t_ours, ours_tok_s=batch * seq / t_ours, ours_frac_peak=flops / t_ours / peak)
    if profile:
        row["ours_op_ms"] = common.op_time_breakdown(ours)
    if not skip_torch:
        theirs = torch_step_fn(hf, tokens)
        t_torch, _ = common.time_call(theirs, repeats=repeats)
        row.update(
            torch_step_s=t_torch,
            torch_tok_s=batch * seq / t_torch,
            torch_frac_peak=flops / t_torch / peak,
            ratio=t_torch / t_ours,
        )
    row["load_avg_1m"] = common.load_average()
    return row


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="tiny,medium")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--chunk", type=int, default=8192, help="vocabulary chunk of the log-probs (config default)")
    ap.add_argument("--peak-n", type=int, default=2048, help="side of the square matmul that measures the peak")
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument(
        "--unroll", type=int, default=1, help="layers unrolled in our layer loop (model.scan_unroll; -1 = all)"
    )
    ap.add_argument("--profile", action="store_true", help="add ours' time per XLA op family (one profiled step)")
    ap.add_argument("--devices", type=int, default=1, help=common.DEVICES_HELP)
    args = ap.parse_args(argv)
    if args.devices < 1:
        ap.error("--devices must be at least 1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    rows = []
    info = {"bench": "machine", **common.machine_info()}
    with common.guarded(info):
        info["matmul_peak_gflop_s"] = common.matmul_peak(args.peak_n) / 1e9
    rows.append(info)
    peak = info.get("matmul_peak_gflop_s", float("nan")) * 1e9
    for name in args.models.split(","):
        row: dict[str, Any] = {"bench": "train_step", "model": name}
        with common.guarded(row):
            row.update(
                bench_model(
                    name,
                    batch=args.batch,
                    seq=args.seq,
                    repeats=args.repeats,
                    chunk=args.chunk,
                    peak=peak,
                    skip_torch=args.skip_torch,
                    profile=args.profile,
                    unroll=args.unroll,
                    devices=args.devices,
                )
            )
        rows.append(row)
    return rows


if __name__ == "__main__":
    common.as_command()
    main()
