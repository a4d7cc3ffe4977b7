"""Sampler throughput vs HF transformers `generate` (PyTorch CPU) and google-tunix's vanilla JAX sampler,
on the same random checkpoint.

    python -m benchmarks.sampler [--models tiny,medium] [--repeats 3] [--peers hf,tunix] [--devices 1]

Prints one JSON line per model: batch 8, prompt 128, 128 new tokens, temperature 1.0 (no top-k/top-p
on any side, no early stop). Figures are medians over repeats after a warm-up (compilation is not
counted); each repeat is one round that runs ours, then each peer (ours, hf, tunix), so the peers are
measured in the same rounds as ours. `ratio` = HF seconds / ours, `ratio_tunix` = tunix seconds / ours
(> 1: ours is faster), with the range of the per-round ratios.

Peers (`--peers`): "hf" runs in this process; "tunix" (`benchmarks.tunix_peer`) runs as a subprocess in its
bench-only env (`launch/bench_env.sh tunix`, built on demand when `--peers` names it). By default: hf,
plus tunix when its env is already built. The tunix peer loads the same safetensors checkpoint into
tunix's own Qwen2 and, before the rounds, samples `--greedy-check` tokens greedily: the row reports the
fraction of prompts whose greedy tokens equal ours (`greedy_match_tunix`) and HF's
(`greedy_match_hf_tunix`), and ours against HF (`greedy_match_hf`). A failed peer sets `<peer>_error`
in the row; ours and the other peers are still reported.

`--devices N` (N > 1) runs ours on a data-parallel mesh of N XLA CPU devices (`common.data_mesh`: each
device decodes batch / N rows with its own copy of the weights, the programs at the same time); the peers
are unchanged (tunix on its single device, HF on torch's threads). The row says `devices`.

Each line also places the decode step against the memory-bandwidth bound (`bench_model`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from benchmarks import common, model_sizes, tunix_peer
from rcgrpo_jax import models, sharding
from rcgrpo_jax.sampling import buckets, generate

BATCH, PROMPT, NEW = 8, 128, 128
PEERS = ("hf", "tunix")
GREEDY = 8
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_peers(spec: str | None, tunix_built: bool) -> tuple[str, ...]:
    """The peers a run measures: `spec` is a comma list of PEERS ("" or "none": ours only); None (the
    default) means hf, plus tunix when its bench env is already built (`tunix_built`)."""
    if spec is None:
        return ("hf", "tunix") if tunix_built else ("hf",)
    names = [n.strip() for n in spec.split(",") if n.strip() and n.strip() != "none"]
    bad = [n for n in names if n not in PEERS]
    if bad:
        raise ValueError(f"unknown peer(s) {bad}: choose from {', '.join(PEERS)} (or none)")
    return tuple(dict.fromkeys(names))


def bench_env(peer: str, check: bool = False) -> str:
    """The interpreter of `peer`'s bench env via launch/bench_env.sh, layered over this interpreter
    (PYTHON, unless set): building it first, or with `check` only if it is built and current."""
    cmd = ["bash", os.path.join(ROOT, "launch", "bench_env.sh"), peer] + (["--check"] if check else [])
    env = {**os.environ, "PYTHON": os.environ.get("PYTHON", sys.executable)}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode:
        raise RuntimeError(f"launch/bench_env.sh {peer}{' --check' if check else ''} failed: {out.stderr[-2000:]}")
    return out.stdout.strip().splitlines()[-1]


def peer_fields(times: dict[str, list[float]], tokens: int) -> dict[str, Any]:
    """The peers' JSON fields from per-round seconds (`times["ours"]` and one list per measured peer, each
    of one figure per round): tok/s, ratio = median peer / median ours, the per-round ratios' range."""
    ours = statistics.median(times["ours"])
    out: dict[str, Any] = {}
    for peer, ts in times.items():
        if peer == "ours" or not ts:
            continue
        if len(ts) != len(times["ours"]):
            raise ValueError(f"{peer}: {len(ts)} rounds against ours' {len(times['ours'])}")
        name = "ratio" if peer == "hf" else f"ratio_{peer}"
        t = statistics.median(ts)
        out[f"{peer}_tok_s"] = round(tokens / t, 1)
        out[name] = round(t / ours, 2)
        per = [p / o for p, o in zip(ts, times["ours"])]
        out[f"{name}_min"], out[f"{name}_max"] = round(min(per), 2), round(max(per), 2)
    return out


def read_bandwidth(nbytes: int) -> float:
    """Bytes/s the host reads with all its cores (one numpy reduction per core, each over its share of
    an `nbytes` buffer of at least 4 MiB), median of 3. Sized like the decode step's working set, so a
    set that fits the last-level cache is measured against that cache, not DRAM."""
    import numpy as np

    buf = np.ones(max(int(nbytes), 4 * 2**20) // 4, np.float32)
    parts = np.array_split(buf, os.cpu_count() or 1)
    reps = max(3, min(100, 2**30 // buf.nbytes))

    def read(part):
        for _ in range(reps):
            part.sum()  # numpy releases the GIL, so the threads read concurrently

    rates = []
    for _ in range(3):
        threads = [threading.Thread(target=read, args=(p,)) for p in parts]
        t = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        rates.append(buf.nbytes * reps / (time.perf_counter() - t))
    return statistics.median(rates)


def read_weight_bytes(config, params) -> int:
    """Weight bytes one decode step reads: all but the embedding table, of which only the fed rows are
    gathered (tied, it is read whole as the output layer)."""
    import jax

    total = sum(x.nbytes for x in jax.tree.leaves(params))
    return int(total if config.tie_word_embeddings else total - params["embed"]["embedding"].nbytes)


def rounds(sides: dict[str, Any], repeats: int, row: dict) -> dict[str, list[float]]:
    """Seconds per round of each side: `repeats` rounds, each calling every side once in `sides`' order
    (ours first). A peer that raises is dropped with `row["<peer>_error"]` (and no figures); ours raising
    ends the measurement."""
    times: dict[str, list[float]] = {k: [] for k in sides}
    live = dict(sides)
    for _ in range(repeats):
        for name, fn in list(live.items()):
            try:
                times[name].append(float(fn()))
            except Exception as e:  # noqa: BLE001
                if name == "ours":
                    raise
                row[f"{name}_error"] = tunix_peer.error_text(e)
                del live[name], times[name]
    return times


def greedy_match(a, b, k: int) -> float:
    """Fraction of rows whose first `k` tokens agree in `a` and `b` (lists of token-id rows)."""
    if len(a) != len(b):
        raise ValueError(f"{len(a)} rows against {len(b)}")
    return sum(list(x[:k]) == list(y[:k]) for x, y in zip(a, b)) / max(len(a), 1)


def greedy_fields(rows: dict[str, Any], k: int) -> dict[str, Any]:
    """The greedy check's fields from each side's greedy token rows (None or absent: that side did
    none): greedy_match_hf (ours vs HF), greedy_match_tunix (ours vs tunix), greedy_match_hf_tunix."""
    out: dict[str, Any] = {"greedy_tokens": k}
    pairs = {"greedy_match_hf": ("ours", "hf"), "greedy_match_tunix": ("ours", "tunix")}
    pairs["greedy_match_hf_tunix"] = ("hf", "tunix")
    for field, (a, b) in pairs.items():
        if rows.get(a) is not None and rows.get(b) is not None:
            out[field] = greedy_match(rows[a], rows[b], k)
    return out


def hf_greedy(hf, prompts, k: int) -> list[list[int]]:
    """HF's greedy continuation of `k` tokens per prompt row (no stop)."""
    import torch

    ids = torch.tensor(prompts)
    with torch.no_grad():
        out = hf.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=k,
            min_new_tokens=k,
            pad_token_id=0,
            eos_token_id=None,
        )
    return out[:, ids.shape[1] :].tolist()


def bench_model(
    name: str,
    repeats: int,
    batch: int = BATCH,
    prompt: int = PROMPT,
    new: int = NEW,
    peers: tuple[str, ...] = ("hf",),
    tunix_python: str | None = None,
    greedy: int = GREEDY,
    devices: int = 1,
) -> dict:
    """One model's row. `peers` as `parse_peers` gives them; `tunix_python` the tunix env's interpreter
    (None with "tunix" in `peers`: the row says the env is missing); `greedy` tokens for the greedy check
    (0: none); `devices`: ours on `common.data_mesh(devices)`.

    The row also places the decode step against the memory-bandwidth bound: the bytes one step must read
    (every weight but the embedding table, once per device, plus the KV-cache span the loop attends over),
    the read bandwidth of all cores measured at that working-set size, the fraction of that bound the step
    reaches, and `bound_ratio`: the ratio to HF a decode running exactly at the bound would reach (our
    measured prefill plus NEW - 1 bound steps). A goal above `bound_ratio` is out of reach here."""
    import jax
    import numpy as np
    import torch

    torch.manual_seed(0)
    hf = model_sizes.hf_model(name, max_position_embeddings=4096).eval()
    rng = np.random.default_rng(0)
    prompts = rng.integers(1, hf.config.vocab_size, (batch, prompt))
    peer_row: dict[str, Any] = {"peers": ",".join(peers)}
    with tempfile.TemporaryDirectory() as d:
        hf.save_pretrained(d)
        config, params = models.load_hf(d, dtype="float32")
        tunix = tunix_peer.start(tunix_python, d, prompts, new, greedy, peer_row) if "tunix" in peers else None
    mesh = common.data_mesh(devices)
    ours_params = params if mesh is None else sharding.shard_params(params, mesh, sharding.DECODE_RULES)

    def ours(new: int) -> float:
        t = time.perf_counter()
        res = generate(
            config,
            ours_params,
            prompts.tolist(),
            max_new_tokens=new,
            temperature=1.0,
            rng=jax.random.key(int(rng.integers(1 << 30))),
            mesh=mesh,
        )
        assert all(n == new for n in res.lengths)
        return time.perf_counter() - t

    def theirs() -> float:
        ids = torch.tensor(prompts)
        t = time.perf_counter()
        with torch.no_grad():
            out = hf.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                max_new_tokens=new,
                min_new_tokens=new,
                pad_token_id=0,
                eos_token_id=None,
            )
        assert out.shape[1] == prompt + new
        return time.perf_counter() - t

    sides: dict[str, Any] = {"ours": lambda: ours(new)}
    greedy_rows: dict[str, Any] = {}
    try:
        ours(new), ours(1)  # compile
        if "hf" in peers:
            theirs()
            sides["hf"] = theirs
        if greedy:
            greedy_rows["ours"] = generate(
                config, ours_params, prompts.tolist(), max_new_tokens=greedy, temperature=0, mesh=mesh
            ).tokens
            greedy_rows["hf"] = hf_greedy(hf, prompts, greedy) if "hf" in peers else None
        if tunix is not None:
            greedy_rows["tunix"] = tunix_peer.ready(tunix, peer_row)
            sides["tunix"] = tunix if "tunix_error" not in peer_row else None
        times = rounds({k: v for k, v in sides.items() if v is not None}, repeats, peer_row)
    finally:
        if tunix is not None:
            tunix.close()
    peer_row.update(greedy_fields(greedy_rows, greedy) if greedy else {})
    peer_row.update(peer_fields(times, batch * new))
    t_ours = statistics.median(times["ours"])
    t_prefill = statistics.median(ours(1) for _ in range(repeats))
    # The decode loop attends over the whole cache: the prompt's length bucket plus the budget's.
    span = buckets.length_bucket(prompt) + buckets.length_bucket(new)
    step_bytes = int(  # each device streams its own copy of the weights; the rows' KV is split between them
        common.decode_step_bytes(
            devices * read_weight_bytes(config, params), config, batch, span, kv_bytes=config.jnp_dtype.itemsize
        )
    )
    per_step = max(t_ours - t_prefill, 1e-9) / max(new - 1, 1)
    bw = read_bandwidth(step_bytes)
    bound_s = t_prefill + (new - 1) * step_bytes / bw
    return {
        "model": name,
        "devices": devices,
        "ours_tok_s": round(batch * new / t_ours, 1),
        **peer_row,
        "batch": batch,
        "prompt": prompt,
        "new_tokens": new,
        "prefill_ms": round(t_prefill * 1e3, 2),
        # Unrounded: emit() prints 4 significant digits, and a noisy 1-repeat smoke run can give a
        # sub-microsecond step that fixed decimals would round to 0.
        "decode_step_ms": per_step * 1e3,
        "decode_tok_s": batch / per_step,
        "step_bytes": step_bytes,
        "read_bandwidth_gb_s": bw / 1e9,
        "bandwidth_bound_fraction": (step_bytes / bw) / per_step,
        **({"bound_ratio": round(statistics.median(times["hf"]) / bound_s, 2)} if times.get("hf") else {}),
        "load_avg_1m": common.load_average(),
        "jax_backend": jax.default_backend(),
        "jax_devices": jax.device_count(),
        "torch_threads": torch.get_num_threads(),
    }


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="tiny,medium")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch", type=int, default=BATCH)
    ap.add_argument("--prompt", type=int, default=PROMPT)
    ap.add_argument("--new", type=int, default=NEW, help="new tokens per prompt (at least 2)")
    ap.add_argument(
        "--peers",
        default=None,
        help=f"comma list of {', '.join(PEERS)} or none (default: hf, plus tunix when its bench env is built)",
    )
    ap.add_argument("--tunix-python", default=None, help="the tunix env's python (default: launch/bench_env.sh tunix)")
    ap.add_argument("--greedy-check", type=int, default=GREEDY, help="greedy tokens compared across sides (0: none)")
    ap.add_argument("--devices", type=int, default=1, help=common.DEVICES_HELP)
    args = ap.parse_args(argv)
    if args.devices < 1:
        ap.error("--devices must be at least 1")
    if args.new < 2:
        ap.error("--new must be at least 2 (the decode step is timed as (t(new) - t(1)) / (new - 1))")
    if args.greedy_check < 0:
        ap.error("--greedy-check must be >= 0")
    try:
        built = args.peers is None and args.tunix_python is None and _tunix_built()
        peers = parse_peers(args.peers, built or args.tunix_python is not None)
    except ValueError as e:
        ap.error(str(e))
    python, env_error = args.tunix_python, None
    if "tunix" in peers and python is None:
        try:
            python = bench_env("tunix")
        except RuntimeError as e:
            env_error = str(e)[:500]
    rows = []
    for name in args.models.split(","):
        with common.guarded({"bench": "sampler", "model": name}) as row:
            row.update(
                bench_model(
                    name,
                    args.repeats,
                    args.batch,
                    args.prompt,
                    args.new,
                    peers,
                    python,
                    args.greedy_check,
                    args.devices,
                )
            )
            if env_error:
                row["tunix_error"] = env_error
        rows.append(row)
    return rows


def _tunix_built() -> bool:
    try:
        bench_env("tunix", check=True)
        return True
    except RuntimeError:
        return False


if __name__ == "__main__":
    common.as_command()
    main()
