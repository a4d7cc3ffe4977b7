"""The tunix side of `benchmarks.sampler`: google-tunix's vanilla JAX sampler, one sampling call per request.

    <bench-env python> -m benchmarks.tunix_peer --checkpoint DIR --work WORK.json

Run as a subprocess in the bench env (`launch/bench_env.sh tunix` builds it; tunix is never a dependency
of the package, so this module imports neither tunix nor jax at import time, and nothing else of
rcgrpo_jax but `benchmarks.common`). The checkpoint is the HF safetensors directory the parent benchmark wrote;
tunix's own loader (`tunix.models.qwen2.params.create_model_from_safe_tensors`) maps it into tunix's
own Qwen2 (`tunix.models.qwen2.model.Qwen2`, float32), and `tunix.generate.sampler.Sampler` samples.

The work (WORK.json, written by the parent): "prompts" (token-id rows, all of one length), "new_tokens",
"temperature", "seed", and "greedy_tokens" (K >= 0). Tunix's sampler takes strings: `IdTokenizer` turns
a row of ids into its decimal text and back, with no BOS, and with pad and EOS ids outside the
vocabulary, so no prompt is padded (every row is exactly the prompt length, a power of two or
`max_prompt_length`), no sampled token is ever masked as padding, and no row stops early: each call
samples exactly `new_tokens` per row (checked). Sampling is top-p mode with top_p = 1 and no top-k,
which tunix runs as a plain categorical draw from logits / temperature over the whole vocabulary (the
same distribution as ours and HF's); the KV cache holds prompt + new tokens exactly.

The protocol over stdin/stdout: `TunixPeer`'s docstring. The parent's side (`TunixPeer`, `start`, `ready`,
`peer_command`, `peer_env`) lives here too, so `benchmarks.sampler` holds only the rounds and the row's fields.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any


class IdTokenizer:
    """The minimal tokenizer tunix's `TokenizerAdapter` accepts (encode, decode, bos_id, eos_id, pad_id),
    over texts that are token ids written in decimal ("17 4 1023"). No BOS (`bos_id` 0 is falsy, so
    `Sampler.tokenize` prepends nothing); pad and EOS are ids no model of `vocab_size` can sample."""

    def __init__(self, vocab_size: int):
        self.vocab_size = int(vocab_size)

    def encode(self, text: str, **kw) -> list[int]:
        ids = [int(t) for t in text.split()]
        bad = [t for t in ids if not 0 <= t < self.vocab_size]
        if bad:
            raise ValueError(f"token ids outside [0, {self.vocab_size}): {bad[:5]}")
        return ids

    def decode(self, ids, **kw) -> str:
        return " ".join(str(int(t)) for t in ids)

    def bos_id(self) -> int:
        return 0

    def pad_id(self) -> int:
        return self.vocab_size

    def eos_id(self) -> int:
        return self.vocab_size + 1


def tunix_config(hf_config: dict, dtype):
    """tunix's Qwen2 `ModelConfig` for an HF Qwen2 `config.json` (transformers 4.x keeps rope_theta at
    the top level, 5.x under rope_parameters)."""
    from tunix.models.qwen2 import model as qwen2

    if hf_config.get("model_type") != "qwen2":
        raise ValueError(f"tunix_peer loads Qwen2 checkpoints, not {hf_config.get('model_type')!r}")
    theta = hf_config.get("rope_theta") or (hf_config.get("rope_parameters") or {}).get("rope_theta")
    if theta is None:
        raise ValueError("config.json has no rope_theta")
    heads = int(hf_config["num_attention_heads"])
    return qwen2.ModelConfig(
        num_layers=int(hf_config["num_hidden_layers"]),
        vocab_size=int(hf_config["vocab_size"]),
        embed_dim=int(hf_config["hidden_size"]),
        hidden_dim=int(hf_config["intermediate_size"]),
        num_heads=heads,
        head_dim=int(hf_config.get("head_dim") or hf_config["hidden_size"] // heads),
        num_kv_heads=int(hf_config["num_key_value_heads"]),
        rope_theta=theta,
        norm_eps=float(hf_config["rms_norm_eps"]),
        use_tied_embedding=bool(hf_config.get("tie_word_embeddings", False)),
        dtype=dtype,
        param_dtype=dtype,
    )


def check_work(work: dict) -> None:
    """Clear errors for a malformed WORK.json (before anything heavy is imported)."""
    prompts = work.get("prompts")
    if not prompts or not all(isinstance(p, list) and p for p in prompts):
        raise ValueError("work needs 'prompts': a non-empty list of non-empty token-id lists")
    if len({len(p) for p in prompts}) != 1:
        raise ValueError("every prompt must have the same length (tunix would left-pad the shorter ones)")
    if int(work.get("new_tokens", 0)) < 1:
        raise ValueError("work needs 'new_tokens' >= 1")
    if float(work.get("temperature", 0.0)) <= 0.0:
        raise ValueError("work needs 'temperature' > 0 (the timed calls sample; greedy is 'greedy_tokens')")
    if int(work.get("greedy_tokens", 0)) < 0:
        raise ValueError("'greedy_tokens' must be >= 0")


# ------------------------------------------------------------------ the parent's side (benchmarks.sampler)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def error_text(e: Exception) -> str:
    """The row's `<peer>_error` text of an exception."""
    return f"{type(e).__name__}: {e}"[:500]


def peer_command(python: str, checkpoint: str, work: str) -> list[str]:
    """The tunix worker's command line (run from any directory; PYTHONPATH names this tree)."""
    return [python, "-m", "benchmarks.tunix_peer", "--checkpoint", checkpoint, "--work", work]


def peer_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The worker's environment: this tree first on PYTHONPATH; the test suite's fake-device flag
    dropped (the worker's `common.as_command` drops it too); the JAX platform kept, so tunix runs on
    the backend ours runs on."""
    env = dict(os.environ if environ is None else environ)
    flags = [f for f in env.get("XLA_FLAGS", "").split() if "force_host_platform_device_count" not in f]
    env["XLA_FLAGS"] = " ".join(flags)
    env["PYTHONPATH"] = os.pathsep.join([ROOT] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


class TunixPeer:
    """`benchmarks.tunix_peer` as a subprocess: `__call__()` runs one timed sampling call, returns its seconds.

    Started with the checkpoint still on disk; `loaded()` returns once the worker holds the weights (the
    checkpoint may go), `ready()` once it has compiled and done its greedy check (its info message).

    Protocol over stdin/stdout, one JSON object per line. Once the weights are in memory the worker prints
    {"loaded": true} (the parent may then delete the checkpoint). After loading, one untimed warm-up call at the
    timed shape (compilation) and, when K > 0, one greedy call of K new tokens, the worker prints
    {"ready": true, "greedy": [[K ids] per row] (K > 0), "load_s", "warmup_s", "tunix_version",
    "jax_backend", "params"}. Then each line on stdin runs one timed call (a fresh seed each) and prints
    {"round": i, "s": wall seconds of the call, tokens back on the host, "cpu_s": the process's CPU seconds
    (all threads) over the same span, "tokens": tokens sampled}. EOF on stdin ends it with {"done": true}."""

    def __init__(self, python: str, checkpoint: str, work: dict[str, Any], tmp: str):
        """`work` as `benchmarks.tunix_peer` reads it, written to `tmp`/tunix_work.json (kept until `loaded()`)."""
        path = os.path.join(tmp, "tunix_work.json")
        with open(path, "w") as f:
            json.dump(work, f)
        self.proc = subprocess.Popen(
            peer_command(python, checkpoint, path),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=peer_env(),
        )
        self.info: dict[str, Any] = {}

    def _read(self, want: str) -> dict[str, Any]:
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(
                    f"tunix_peer exited (rc {self.proc.wait()}) waiting for {want!r}; its stderr is above"
                )
            try:
                msg = json.loads(line)
            except ValueError:
                continue  # a library's own prints
            if isinstance(msg, dict) and want in msg:
                return msg

    def loaded(self) -> None:
        self._read("loaded")

    def ready(self) -> dict[str, Any]:
        self.info = self._read("ready")
        return self.info

    def __call__(self) -> float:
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        return float(self._read("round")["s"])

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            self.proc.wait()


def start(python: str | None, checkpoint: str, prompts, new: int, greedy: int, row: dict) -> TunixPeer | None:
    """The tunix worker on `checkpoint` (returns once it holds the weights, so the checkpoint may go; it
    compiles while ours does), or None with `row["tunix_error"]` set."""
    peer = None
    try:
        if python is None:
            raise RuntimeError("no tunix bench env (launch/bench_env.sh tunix)")
        work = {"prompts": prompts.tolist(), "new_tokens": new, "temperature": 1.0, "seed": 0}
        peer = TunixPeer(python, checkpoint, {**work, "greedy_tokens": greedy}, checkpoint)
        peer.loaded()
        return peer
    except Exception as e:  # noqa: BLE001 - a failed peer must not hide ours
        row["tunix_error"] = error_text(e)
        if peer is not None:
            peer.close()
        return None


def ready(peer: TunixPeer, row: dict) -> list[list[int]] | None:
    """Wait for the worker's warm-up; its version and warm-up seconds go into `row`; its greedy rows
    back (None if it did none or failed: then `row["tunix_error"]`)."""
    try:
        info = peer.ready()
    except Exception as e:  # noqa: BLE001
        row["tunix_error"] = error_text(e)
        return None
    row.update(tunix_version=info.get("tunix_version"), tunix_warmup_s=info.get("warmup_s"))
    return info.get("greedy")


# ------------------------------------------------------------------------------- the worker's side


def _say(obj) -> None:
    print(json.dumps(obj), flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args(argv)
    with open(args.work) as f:
        work = json.load(f)
    check_work(work)

    t0 = time.perf_counter()
    import jax
    import jax.numpy as jnp
    import numpy as np
    import tunix
    from flax import nnx
    from tunix.generate import sampler as sampler_lib
    from tunix.models.qwen2 import params as qwen2_params

    with open(f"{args.checkpoint}/config.json") as f:
        cfg = tunix_config(json.load(f), jnp.float32)
    model = qwen2_params.create_model_from_safe_tensors(args.checkpoint, cfg, dtype=jnp.float32)
    # tunix's loader leaves a parameter the checkpoint does not name as its abstract shape: refuse that.
    state = nnx.state(model, nnx.Param)
    missing = [".".join(map(str, p)) for p, x in jax.tree.leaves_with_path(state) if not isinstance(x, jax.Array)]
    if missing:
        raise RuntimeError(f"tunix's loader left parameters unloaded: {missing[:5]}")
    n_params = sum(int(x.size) for x in jax.tree.leaves(state))
    _say({"loaded": True})  # the checkpoint directory is no longer needed

    prompts = [list(map(int, p)) for p in work["prompts"]]
    tok = IdTokenizer(cfg.vocab_size)
    texts = [tok.decode(p) for p in prompts]
    plen, new, temp = len(prompts[0]), int(work["new_tokens"]), float(work["temperature"])
    k = int(work.get("greedy_tokens", 0))
    cache = sampler_lib.CacheConfig(
        cache_size=plen + max(new, k), num_layers=cfg.num_layers, num_kv_heads=cfg.num_kv_heads, head_dim=cfg.head_dim
    )
    sampler = sampler_lib.Sampler(model, tok, cache)
    no_stop = [tok.eos_id()]

    def call(seed: int):
        out = sampler(
            texts,
            max_generation_steps=new,
            max_prompt_length=plen,
            temperature=temp,
            top_p=1.0,
            top_k=None,
            eos_tokens=no_stop,
            seed=seed,
        )
        got = [len(t) for t in out.tokens]
        if any(n != new for n in got):
            raise RuntimeError(f"tunix sampled {sorted(set(got))} tokens per row, not {new}")
        return out

    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    call(int(work.get("seed", 0)))  # warm-up: compilation of prefill and decode at the timed shape
    warmup_s = time.perf_counter() - t0
    ready = {
        "ready": True,
        "load_s": load_s,
        "warmup_s": warmup_s,
        "tunix_version": getattr(tunix, "__version__", "?"),
        "jax_backend": jax.default_backend(),
        "params": n_params,
    }
    if k:
        out = sampler(texts, max_generation_steps=k, max_prompt_length=plen, eos_tokens=no_stop)  # greedy mode
        ready["greedy"] = [np.asarray(t).tolist() for t in out.tokens]
    _say(ready)
    for i, _ in enumerate(iter(sys.stdin.readline, "")):
        t, cpu = time.perf_counter(), time.process_time()
        call(int(work.get("seed", 0)) + 1 + i)  # the tokens are on the host when it returns
        _say({"round": i, "s": time.perf_counter() - t, "cpu_s": time.process_time() - cpu, "tokens": len(texts) * new})
    _say({"done": True})


if __name__ == "__main__":
    from benchmarks import common

    common.as_command()
    main()
