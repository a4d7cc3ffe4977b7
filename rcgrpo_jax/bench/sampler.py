"""Sampler throughput vs HF transformers `generate` (PyTorch CPU) on the same random checkpoint.

    python -m rcgrpo_jax.bench.sampler [--models tiny,medium] [--repeats 3]

Prints one JSON line per model: batch 8, prompt 128, 128 new tokens, temperature 1.0 (no top-k/top-p
on either side, no early stop). Figures are medians over repeats after a warm-up (compilation is not
counted). The medium line adds the decode-only rate and its fraction of the memory-bandwidth bound
(weight bytes read per decode step / measured copy bandwidth).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

MODELS = {
    "tiny": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=704, vocab_size=1024),
    "medium": dict(hidden_size=1024, num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=8,
                   intermediate_size=2816, vocab_size=32000),
}
BATCH, PROMPT, NEW = 8, 128, 128


def _copy_bandwidth() -> float:
    """Bytes/s of a large memory copy (read + write counted), median of 5."""
    import numpy as np

    src = np.ones(64 * 2**20 // 4 * 4, np.float32)  # 256 MiB
    dst = np.empty_like(src)
    times = []
    for _ in range(5):
        t = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - t)
    return 2 * src.nbytes / statistics.median(times)


def bench_model(name: str, repeats: int) -> dict:
    import jax
    import numpy as np
    import torch
    import transformers

    from rcgrpo_jax import models
    from rcgrpo_jax.sampling import generate

    cfg = transformers.Qwen2Config(max_position_embeddings=4096, tie_word_embeddings=False, **MODELS[name])
    torch.manual_seed(0)
    hf = transformers.Qwen2ForCausalLM(cfg).eval()
    with tempfile.TemporaryDirectory() as d:
        hf.save_pretrained(d)
        config, params = models.load_hf(d, dtype="float32")
    rng = np.random.default_rng(0)
    prompts = rng.integers(1, cfg.vocab_size, (BATCH, PROMPT))

    def ours(new: int) -> float:
        t = time.perf_counter()
        res = generate(config, params, prompts.tolist(), max_new_tokens=new, temperature=1.0,
                       rng=jax.random.key(int(rng.integers(1 << 30))))
        assert all(n == new for n in res.lengths)
        return time.perf_counter() - t

    def theirs() -> float:
        ids = torch.tensor(prompts)
        t = time.perf_counter()
        with torch.no_grad():
            out = hf.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=1.0,
                              top_k=0, top_p=1.0, max_new_tokens=NEW, min_new_tokens=NEW, pad_token_id=0,
                              eos_token_id=None)
        assert out.shape[1] == PROMPT + NEW
        return time.perf_counter() - t

    ours(NEW), ours(1)  # compile
    t_ours = statistics.median(ours(NEW) for _ in range(repeats))
    theirs()
    t_hf = statistics.median(theirs() for _ in range(repeats))
    row = {"model": name, "ours_tok_s": round(BATCH * NEW / t_ours, 1), "hf_tok_s": round(BATCH * NEW / t_hf, 1),
           "ratio": round(t_hf / t_ours, 2), "batch": BATCH, "prompt": PROMPT, "new_tokens": NEW,
           "jax_backend": jax.default_backend(), "jax_devices": jax.device_count(), "torch_threads": torch.get_num_threads()}
    if name == "medium":
        t_prefill = statistics.median(ours(1) for _ in range(repeats))
        per_step = max(t_ours - t_prefill, 1e-9) / (NEW - 1)
        weight_bytes = sum(x.nbytes for x in jax.tree.leaves(params))
        bw = _copy_bandwidth()
        row.update(decode_tok_s=round(BATCH / per_step, 1), weight_bytes=weight_bytes,
                   copy_bandwidth_gb_s=round(bw / 1e9, 2),
                   bandwidth_bound_fraction=round((weight_bytes / bw) / per_step, 3))
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="tiny,medium")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # One real CPU device: the test suite's 8 fake devices would split the host's cores between them.
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if "force_host_platform_device_count" not in f]
    os.environ["XLA_FLAGS"] = " ".join(flags)
    for name in args.models.split(","):
        print(json.dumps(bench_model(name, args.repeats)), flush=True)


if __name__ == "__main__":
    main()
