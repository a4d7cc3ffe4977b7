"""One GRPO step: ours (the project's sampler + `train.rl_step`) against HF TRL's GRPOTrainer, same work.

    python -m benchmarks.grpo_step [--betas 0,0.04] [--rounds 3] [--prompts 16] [--group 8]
        [--prompt-len 128] [--new 128] [--micro 32] [--no-peer] [--devices 1]

The work: `--prompts` prompts x `--group` samples, each prompt exactly `--prompt-len` tokens, each
completion exactly `--new` sampled tokens (temperature 1, no top-k/p, no stop), float32, on the tiny
random Qwen2 checkpoint (`models.tiny.build_tiny_checkpoint` at d=256, 4 layers, ~3.2M parameters, built
offline); reward `trl_peer.reward_of` on the completion ids; GRPO advantages; one optimizer step of the
clipped surrogate (token mean) + beta * k3 KL to the frozen initial policy (the reference pass runs only
when beta > 0), AdamW lr 1e-6, global-norm clip 1.

Ours: `sampling.generate` (one batch of all prompts x samples), rewards and advantages on the host,
`rl_batch.pack`, the reference pass (`rl_step.jit_logprobs`) and `rl_step.Updater` (micro-batches of
`--micro` rows, gradients accumulated exactly) on one CPU device: the trainer's own pieces, with the layer
loop unrolled as the tiny preset has it (`--unroll`, rcgrpo_jax/config_lib/common.py). `--devices N` (N > 1):
the same pieces on a data-parallel mesh of N XLA CPU devices (`common.data_mesh`), TRL unchanged.
Peer: `trl_peer` in the bench env (`launch/bench_env.sh trl`), a subprocess that runs one TRL step
whenever asked, so the two alternate in the same run (ABBA order per round: drift cancels in the medians).

JSON lines: a "machine" row (with the fp32 matmul peak measured in the same run); per beta one row per
round (ours, peer, ratio); then a summary per beta with medians over rounds (each side's first step is a
warm-up, not counted), ratio = peer / ours, ours' per-phase split (generate / host / reference / update),
the update's model FLOPs and fraction of the matmul peak, whether any step after the warm-up compiled, the
load average and each side's process CPU seconds (`cpu_ratio` = peer / ours; reading them: docs/performance.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

from benchmarks import common, model_sizes
from benchmarks.trl_peer import reward_of
from rcgrpo_jax import models
from rcgrpo_jax import sharding as sharding_lib
from rcgrpo_jax.models.tiny import build_tiny_checkpoint, default_corpus
from rcgrpo_jax.models.transformer import abstract_params
from rcgrpo_jax.rl import advantages
from rcgrpo_jax.sampling import decode_loop, decode_step, generate
from rcgrpo_jax.sampling import session as session_lib
from rcgrpo_jax.train import model_prep, optim, rl_batch, rl_step
from rcgrpo_jax.train import state as state_lib

ARCH = model_sizes.builder_arch("tiny")  # the benchmarks' tiny model (benchmarks/model_sizes.py)
LR = 1e-6
PHASES = ("generate", "host", "reference", "update")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclasses.dataclass(frozen=True)
class Work:
    prompts: int = 16
    group: int = 8
    prompt_len: int = 128
    new: int = 128
    seed: int = 0


def make_prompts(tokenizer, n: int, length: int, seed: int) -> list[list[int]]:
    """`n` prompts of exactly `length` token ids, windows of the tiny tokenizer's own corpus that survive
    decode -> encode unchanged (TRL takes text; both sides then see the same ids)."""

    ids = tokenizer(" ".join(default_corpus()) * 4, add_special_tokens=False)["input_ids"]
    if len(ids) < 2 * length:
        raise ValueError(f"corpus of {len(ids)} tokens is too short for {length}-token prompts")
    rng = np.random.default_rng(seed)
    out: list[list[int]] = []
    for _ in range(200 * n):
        start = int(rng.integers(0, len(ids) - length))
        window = ids[start : start + length]
        if tokenizer(tokenizer.decode(window), add_special_tokens=False)["input_ids"] == window:
            out.append(window)
            if len(out) == n:
                return out
    raise RuntimeError(f"found only {len(out)} of {n} prompts that survive decode -> encode")


def group_advantages(rewards: np.ndarray, group: int, eps: float = 1e-4) -> np.ndarray:
    """GRPO: (r - group mean) / (group std + eps), the registry's "grpo" estimator, flat [N * G]."""

    adv, _ = advantages.get("grpo")(np.asarray(rewards, np.float32).reshape(-1, group))
    return np.asarray(adv, np.float32).reshape(-1)


def ratio(peer_s: float, ours_s: float) -> float:
    """How many times faster ours is: peer seconds / our seconds (> 1: ours is faster)."""
    return peer_s / ours_s


def summarize(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the rounds of ours, peer and our phases; ratio = median peer / median ours, with
    the range of the per-round ratios. Rounds without a peer figure give ours only."""
    ours = [r["ours_s"] for r in rounds]
    out: dict[str, Any] = {"rounds": len(rounds), "ours_s": statistics.median(ours)}
    for p in PHASES:
        out[f"ours_{p}_s"] = statistics.median(r[f"ours_{p}_s"] for r in rounds)
    if all("ours_cpu_s" in r for r in rounds):
        out["ours_cpu_s"] = statistics.median(r["ours_cpu_s"] for r in rounds)
    peers = [r["peer_s"] for r in rounds if r.get("peer_s") is not None]
    if peers and len(peers) == len(rounds):
        out["peer_s"] = statistics.median(peers)
        out["ratio"] = ratio(out["peer_s"], out["ours_s"])
        per = [r["ratio"] for r in rounds]
        out["ratio_min"], out["ratio_max"] = min(per), max(per)
        if "ours_cpu_s" in out and all("peer_cpu_s" in r for r in rounds):
            out["peer_cpu_s"] = statistics.median(r["peer_cpu_s"] for r in rounds)
            out["cpu_ratio"] = ratio(out["peer_cpu_s"], out["ours_cpu_s"])
    return out


class OursStep:
    """One GRPO step with the project's pieces, on one CPU device; `__call__(key)` returns phase seconds."""

    def __init__(
        self,
        checkpoint: str,
        work: Work,
        prompts: list[list[int]],
        beta: float,
        micro: int,
        chunk: int,
        unroll: int,
        devices: int = 1,
    ):
        import jax
        import ml_collections

        self.work, self.beta = work, beta
        n = work.prompts * work.group
        if n % micro:
            raise ValueError(f"--micro {micro} must divide the {n} rows")
        if micro % devices:
            raise ValueError(f"--devices {devices} must divide the --micro {micro} rows of a micro-batch")
        config, params = models.load_hf(checkpoint, dtype="float32")
        self.config = dataclasses.replace(config, scan_unroll=unroll)
        self.sample_mesh = common.data_mesh(devices)  # None: the sampler's single-device path
        self.mesh = self.sample_mesh or sharding_lib.make_mesh({"fsdp": 1}, jax.devices()[:1])
        p_sh = model_prep.param_shardings(abstract_params(self.config), self.mesh, "train")
        tx = optim.make_optimizer(common.constant_optim(LR), 10**6)
        abstract = state_lib.abstract_state(abstract_params(self.config), tx)
        state_sh = state_lib.state_shardings(abstract, self.mesh, p_sh, tx)
        self.logical = model_prep.rules("train").logical
        chunk = min(chunk, self.config.vocab_size)
        loss_cfg = ml_collections.ConfigDict({"kl_beta": beta, "kl_estimator": "k3", "agg_mode": "token-mean"})
        self.updater = rl_step.Updater(self.config, tx, "ppo_clip", loss_cfg, chunk, state_sh, self.mesh, 1.0)
        self.ref_fn = rl_step.jit_logprobs(rl_step.make_logprob_fn(self.config, chunk, 1.0), p_sh, self.mesh)
        self.ref_params = jax.device_put(params, p_sh) if beta else None
        self.state = jax.jit(lambda p: state_lib.create(p, tx, jax.random.PRNGKey(work.seed)), out_shardings=state_sh)(
            jax.device_put(params, p_sh)
        )
        self.prompts = [p for p in prompts for _ in range(work.group)]  # group-major rows
        self.length = work.prompt_len + work.new
        self.micro = micro
        self.last: dict[str, Any] = {}

    def __call__(self, key) -> dict[str, float]:
        import jax

        w, t = self.work, {}
        t0 = time.perf_counter()
        res = generate(
            self.config,
            self.state.params,
            self.prompts,
            max_new_tokens=w.new,
            temperature=1.0,
            rng=key,
            mesh=self.sample_mesh,
        )
        t["generate"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        if any(n != w.new for n in res.lengths):
            raise RuntimeError(f"a completion is not {w.new} tokens: {sorted(set(res.lengths))}")
        rewards = np.asarray([reward_of(c) for c in res.tokens], np.float32)
        adv = group_advantages(rewards, w.group)
        p = w.prompt_len
        batch = rl_batch.pack(
            [np.asarray(pr + c, np.int32) for pr, c in zip(self.prompts, res.tokens)],
            [np.r_[np.zeros(p), np.ones(w.new)].astype(np.float32)] * len(self.prompts),
            [np.r_[np.zeros(p, np.float32), lp] for lp in res.logprobs],
            adv,
            common.rollout_inputs("grpo", len(adv)),
            length=self.length,
            pad_id=0,
        )
        micros = [np.arange(i, i + self.micro) for i in range(0, batch.rows, self.micro)]
        buckets = (self.length,)
        t["host"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        with jax.set_mesh(self.mesh), sharding_lib.axis_rules(self.logical):
            t["reference"] = 0.0  # no reference pass without a KL
            if self.beta:
                ref = np.zeros_like(batch.old_logp)
                for rows in micros:
                    mb = batch.take(rows, buckets).put(self.mesh)
                    ref[rows] = np.asarray(self.ref_fn(self.ref_params, mb.tokens, mb.token_mask))
                batch = batch.replace(ref_logp=ref)
                t["reference"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            self.state, metrics, _ = self.updater(
                self.state, [batch.take(rows, buckets).put(self.mesh) for rows in micros]
            )
            metrics = jax.device_get(metrics)
        t["update"] = time.perf_counter() - t0
        self.last = {
            "loss": float(metrics["loss"]),
            "finite": bool(metrics["finite"]),
            "reward_mean": float(rewards.mean()),
            "compiled": self.compiled(),
        }
        return t

    def compiled(self) -> int:
        """Programs compiled so far by the jitted pieces of a step (the decode session's appends of this model
        and mesh, the sampler's decode, the reference pass, micro-batch gradients, their sum, the optimizer
        apply): constant after the warm-up step unless a step recompiles."""

        appends = [
            f
            for layout in decode_step.LAYOUTS
            for f in session_lib.programs(self.config, self.sample_mesh, layout).values()
        ]
        fns = (*appends, decode_loop.decode_jit, self.ref_fn, *self.updater.programs())
        return sum(f._cache_size() for f in fns)


class TRLPeer:
    """The TRL worker (`trl_peer`) in the bench env, one step per `__call__()`; seconds of that step."""

    def __init__(self, python: str, checkpoint: str, work: Work, prompts, beta: float, steps: int, tmp: str):
        path = os.path.join(tmp, f"work_{beta}.json")
        with open(path, "w") as f:
            json.dump({"prompts": prompts, "group": work.group, "new_tokens": work.new, "lr": LR, "seed": work.seed}, f)
        env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
        env["PYTHONPATH"] = ROOT
        env.setdefault("TOKENIZERS_PARALLELISM", "false")
        cmd = [python, "-m", "benchmarks.trl_peer", "--checkpoint", checkpoint, "--work", path]
        cmd += ["--beta", str(beta), "--steps", str(steps), "--outdir", os.path.join(tmp, f"trl_{beta}")]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.info: dict[str, Any] = {}

    def _read(self) -> dict[str, Any]:
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"trl_peer exited (rc {self.proc.wait()}); its stderr is above")
            try:
                msg = json.loads(line)
            except ValueError:
                continue  # the trainer's own prints (a Python dict repr is not JSON)
            if isinstance(msg, dict):
                return msg

    def __call__(self) -> tuple[float, float]:
        """(wall seconds, CPU seconds of the worker's threads) of one TRL step."""
        msg = self._read()
        if "ready" not in msg:
            raise RuntimeError(f"trl_peer: expected a ready line, got {msg}")
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        done = self._read()
        return float(done["step_s"]), float(done["step_cpu_s"])

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            for _ in range(3):
                msg = self._read()
                if msg.get("done"):
                    self.info = msg
                    break
        except (RuntimeError, OSError, ValueError):
            pass
        finally:
            if self.proc.poll() is None:
                self.proc.terminate()
            self.proc.wait()


def peer_python(explicit: str | None) -> str:
    """The bench env's interpreter: --peer-python, else `launch/bench_env.sh trl` (creating the env)."""
    if explicit:
        return explicit
    out = subprocess.run(["bash", os.path.join(ROOT, "launch", "bench_env.sh"), "trl"], capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"launch/bench_env.sh trl failed: {out.stderr[-2000:]}")
    return out.stdout.strip().splitlines()[-1]


def bench_beta(
    beta: float, args, work: Work, checkpoint: str, prompts, tmp: str, python: str | None, peak: float
) -> list[dict]:
    import jax

    rows = []
    ours = OursStep(checkpoint, work, prompts, beta, args.micro, args.chunk, args.unroll, args.devices)
    peer = TRLPeer(python, checkpoint, work, prompts, beta, args.rounds + 1, tmp) if python else None
    key = jax.random.key(work.seed)
    try:
        key, k = jax.random.split(key)
        ours(k)  # warm-up: compilation
        warm_compiled = ours.compiled()
        if peer:
            peer()  # warm-up: TRL's first step
        for r in range(args.rounds):
            row: dict[str, Any] = {"bench": "grpo_step_round", "beta": beta, "round": r}
            key, k = jax.random.split(key)
            order = ("ours", "peer") if r % 2 == 0 else ("peer", "ours")
            for side in order:
                if side == "ours":
                    cpu = time.process_time()
                    t = ours(k)
                    row["ours_cpu_s"] = time.process_time() - cpu
                    row.update({f"ours_{p}_s": t.get(p, 0.0) for p in PHASES})
                    row["ours_s"] = sum(t.values())
                    row.update({f"ours_{k_}": v for k_, v in ours.last.items()})
                elif peer:
                    row["peer_s"], row["peer_cpu_s"] = peer()
            if peer:
                row["ratio"] = ratio(row["peer_s"], row["ours_s"])
                row["cpu_ratio"] = ratio(row["peer_cpu_s"], row["ours_cpu_s"])
            row["load_avg_1m"] = common.load_average()
            rows.append(common.emit(row))
    finally:
        if peer:
            peer.close()
    summary = {
        "bench": "grpo_step",
        "beta": beta,
        **dataclasses.asdict(work),
        "micro": args.micro,
        "unroll": args.unroll,
        "devices": args.devices,
    }
    summary.update(summarize(rows))
    summary["recompiled_after_warmup"] = any(r["ours_compiled"] != warm_compiled for r in rows)
    # Model FLOPs of the update (forward + backward over every row, common.train_flops) against the
    # machine's measured matmul peak: how far the update is from compute-bound.
    n = work.prompts * work.group
    flops = common.train_flops(common.param_count(ours.state.params), ours.config, n, work.prompt_len + work.new)
    summary["update_gflop"] = flops / 1e9
    summary["ours_update_frac_peak"] = flops / summary["ours_update_s"] / peak
    if peer:
        summary["peer"] = (
            f"trl {peer.info.get('trl_version', '?')} GRPOTrainer (torch threads {peer.info.get('torch_threads', '?')})"
        )
    summary["load_avg_1m"] = common.load_average()
    return rows + [common.emit(summary)]


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--betas", default="0,0.04")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--micro", type=int, default=32, help="our micro-batch rows (gradients accumulated exactly)")
    ap.add_argument("--chunk", type=int, default=8192, help="vocabulary chunk of our log-probs")
    ap.add_argument(
        "--unroll", type=int, default=-1, help="our layer loop's unroll (model.scan_unroll; -1, all: the tiny preset's)"
    )
    ap.add_argument("--no-peer", action="store_true", help="ours only (no bench env needed)")
    ap.add_argument("--peer-python", default=None, help="the bench env's python (default: launch/bench_env.sh trl)")
    ap.add_argument("--peak-n", type=int, default=1024, help="side of the square matmul that measures the peak")
    ap.add_argument("--arch", default=None, help="JSON overrides of the tiny checkpoint's sizes")
    ap.add_argument("--devices", type=int, default=1, help=common.DEVICES_HELP)
    args = ap.parse_args(argv)
    if args.devices < 1:
        ap.error("--devices must be at least 1")
    work = Work(args.prompts, args.group, args.prompt_len, args.new)
    rows: list[dict[str, Any]] = []
    info = {"bench": "machine", **common.machine_info()}
    python = None
    with common.guarded(info):
        info["matmul_peak_gflop_s"] = common.matmul_peak(args.peak_n) / 1e9
        python = None if args.no_peer else peer_python(args.peer_python)
        info["peer_python"] = python
    rows.append(info)
    if not args.no_peer and python is None:
        return rows
    arch = {**ARCH, **(json.loads(args.arch) if args.arch else {})}
    with tempfile.TemporaryDirectory() as tmp:
        import transformers

        ckpt = build_tiny_checkpoint(os.path.join(tmp, "ckpt"), arch="qwen2", **arch)
        tok = transformers.AutoTokenizer.from_pretrained(ckpt)
        prompts = make_prompts(tok, work.prompts, work.prompt_len, work.seed)
        for beta in (float(b) for b in args.betas.split(",")):
            row = {"bench": "grpo_step", "beta": beta}
            try:
                peak = info.get("matmul_peak_gflop_s", float("nan")) * 1e9
                rows += bench_beta(beta, args, work, ckpt, prompts, tmp, python, peak)
            except Exception as e:  # noqa: BLE001 - one beta's failure must not hide the other's row
                import traceback

                traceback.print_exc(file=sys.stderr)
                row["error"] = f"{type(e).__name__}: {e}"[:500]
                rows.append(common.emit(row))
    return rows


if __name__ == "__main__":
    common.as_command()
    main()
