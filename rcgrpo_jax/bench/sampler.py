"""Sampler throughput vs HF transformers `generate` (PyTorch CPU) on the same random checkpoint.

    python -m rcgrpo_jax.bench.sampler [--models tiny,medium] [--repeats 3]

Prints one JSON line per model: batch 8, prompt 128, 128 new tokens, temperature 1.0 (no top-k/top-p
on either side, no early stop). Figures are medians over repeats after a warm-up (compilation is not
counted). Each line also places the decode step against the memory-bandwidth bound: the bytes one
step must read (every weight but the embedding table, plus the KV-cache span the loop attends over),
the read bandwidth of all cores measured at that working-set size, the fraction of that bound the
step reaches, and `bound_ratio`: the ratio to HF a decode running exactly at the bound would reach
(our measured prefill plus NEW - 1 bound steps). A goal above `bound_ratio` is out of reach here.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time

from rcgrpo_jax.bench import common

MODELS = {
    "tiny": dict(
        hidden_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=704,
        vocab_size=1024,
    ),
    "medium": dict(
        hidden_size=1024,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=8,
        intermediate_size=2816,
        vocab_size=32000,
    ),
}
BATCH, PROMPT, NEW = 8, 128, 128


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


def bench_model(name: str, repeats: int, batch: int = BATCH, prompt: int = PROMPT, new: int = NEW) -> dict:
    import jax
    import numpy as np
    import torch
    import transformers

    from rcgrpo_jax import models
    from rcgrpo_jax.sampling import buckets, generate

    cfg = transformers.Qwen2Config(max_position_embeddings=4096, tie_word_embeddings=False, **MODELS[name])
    torch.manual_seed(0)
    hf = transformers.Qwen2ForCausalLM(cfg).eval()
    with tempfile.TemporaryDirectory() as d:
        hf.save_pretrained(d)
        config, params = models.load_hf(d, dtype="float32")
    rng = np.random.default_rng(0)
    prompts = rng.integers(1, cfg.vocab_size, (batch, prompt))

    def ours(new: int) -> float:
        t = time.perf_counter()
        res = generate(
            config,
            params,
            prompts.tolist(),
            max_new_tokens=new,
            temperature=1.0,
            rng=jax.random.key(int(rng.integers(1 << 30))),
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

    ours(new), ours(1)  # compile
    t_ours = statistics.median(ours(new) for _ in range(repeats))
    t_prefill = statistics.median(ours(1) for _ in range(repeats))
    theirs()
    t_hf = statistics.median(theirs() for _ in range(repeats))
    # The decode loop attends over the whole cache: the prompt's length bucket plus the budget's.
    span = buckets.length_bucket(prompt) + buckets.length_bucket(new)
    step_bytes = int(
        common.decode_step_bytes(
            read_weight_bytes(config, params), config, batch, span, kv_bytes=config.jnp_dtype.itemsize
        )
    )
    per_step = max(t_ours - t_prefill, 1e-9) / max(new - 1, 1)
    bw = read_bandwidth(step_bytes)
    bound_s = t_prefill + (new - 1) * step_bytes / bw
    return {
        "model": name,
        "ours_tok_s": round(batch * new / t_ours, 1),
        "hf_tok_s": round(batch * new / t_hf, 1),
        "ratio": round(t_hf / t_ours, 2),
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
        "bound_ratio": round(t_hf / bound_s, 2),
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
    args = ap.parse_args(argv)
    if args.new < 2:
        ap.error("--new must be at least 2 (the decode step is timed as (t(new) - t(1)) / (new - 1))")
    rows = []
    for name in args.models.split(","):
        with common.guarded({"bench": "sampler", "model": name}) as row:
            row.update(bench_model(name, args.repeats, args.batch, args.prompt, args.new))
        rows.append(row)
    return rows


if __name__ == "__main__":
    common.as_command()
    main()
