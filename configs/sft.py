"""SFT baseline: fine-tune on expert trajectories only (paper Table 10: lr 1e-5, batch 16, 2 epochs, AdamW).

  python -m rcgrpo_jax.main --config=configs/sft.py:tiny --workdir=/tmp/sft
  python -m rcgrpo_jax.main --config=configs/sft.py:qwen2_5_7b --config.model.path=/models/Qwen2.5-7B-Instruct \
      --config.data.path=/data/sft.jsonl --workdir=/ckpt/sft
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from configs import common  # noqa: E402


def get_config(arg: str | None = None):
  preset = common.parse_preset(arg)
  c = common.base("sft", preset, lr=1e-5)
  c.data.kind = "expert"
  if preset == "tiny":  # a random tiny model learns quickly at a large step size; the run is capped
    c.optim.lr = 3e-3
    c.optim.warmup_ratio = 0.1
    c.train.batch_size = 4
    c.train.grad_accum = 4  # one 4-8k-token sequence at a time keeps CPU memory to a few GB
    c.train.epochs = 100
    c.train.max_steps = 6
    c.checkpoint.every_steps = 2
    c.train.logprob_chunk = 256
  else:
    c.train.grad_accum = 4  # 16 = 4 x 4: one 16k-token sequence per batch shard (data x fsdp = 4) per micro-batch
  return c
