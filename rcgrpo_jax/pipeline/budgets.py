"""Named budgets of the ablation: world size, model size, steps and learning rates of every stage.

`quickstart` is the one-command CPU reproduction (about 30 minutes on 2 cores); `smoke` runs every
stage for a few steps on a tiny world (the pipeline test). RL budgets are equal for every RL row:
one `rl` section is applied to GRPO and RC-GRPO alike. Tune these on the TRAIN split only
(`--eval_split=train`), never on the test split.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping


@dataclasses.dataclass(frozen=True)
class Budget:
  name: str
  world: Mapping[str, int]  # data.world: seed, train_per_type, test_per_type
  model: Mapping[str, int]  # build_tiny_checkpoint sizes
  sft: Mapping[str, Any]  # dotted config overrides of the SFT stage (configs/sft.py:tiny)
  rctp: Mapping[str, Any]  # ... of RCTP-FT (configs/rctp_ft.py:tiny)
  rl: Mapping[str, Any]  # ... of every RL run (configs/grpo.py:tiny and configs/rc_grpo.py:tiny)
  eval: Mapping[str, Any]  # the eval section (configs/eval.py:tiny)
  # Planned seconds per stage on a 2-core machine, only for the console ETA.
  plan_s: Mapping[str, float] = dataclasses.field(default_factory=dict)


_COMMON_TRAIN = {"train.grad_accum": 1, "optim.warmup_ratio": 0.05, "checkpoint.every_steps": 50,
                 "log.tensorboard": False, "data.buckets": (256, 320, 384, 512, 768)}

QUICKSTART = Budget(
    name="quickstart",
    world={"seed": 0, "train_per_type": 64, "test_per_type": 16},
    # The prototype's size: d=128, 3 layers, RoPE (about 0.7M parameters with the world's ~900 tokens).
    model={"hidden_size": 128, "num_layers": 3, "num_heads": 4, "num_kv_heads": 2, "intermediate_size": 256,
           "tokenizer_vocab_size": 512},
    # Episodes are ~800 tokens (the tool list is ~500): 48 steps of 16 reached loss 1.0 and 0% greedy success
    # on the train split, so stage 1 takes more, smaller steps (about 1.3M tokens each).
    sft={**_COMMON_TRAIN, "train.batch_size": 8, "train.max_steps": 200, "optim.lr": 3e-3},
    rctp={**_COMMON_TRAIN, "train.batch_size": 8, "train.max_steps": 200, "optim.lr": 3e-3},
    # configs/grpo.py:tiny per step: 8 tasks x group 4 at temperature 1.0; the same for every RL row.
    rl={"train.max_steps": 10, "log.tensorboard": False, "checkpoint.every_steps": 5},
    eval={"batch_size": 80, "max_step_tokens": 64, "max_context": 2048},
    plan_s={"setup": 60, "eval": 30, "sft": 480, "rctp_ft": 480, "rl": 120},
)

SMOKE = Budget(
    name="smoke",
    world={"seed": 0, "train_per_type": 4, "test_per_type": 2},
    model={"hidden_size": 32, "num_layers": 1, "num_heads": 2, "num_kv_heads": 1, "intermediate_size": 64,
           "tokenizer_vocab_size": 512},
    sft={**_COMMON_TRAIN, "train.batch_size": 4, "train.max_steps": 2, "optim.lr": 3e-3},
    rctp={**_COMMON_TRAIN, "train.batch_size": 4, "train.max_steps": 2, "optim.lr": 3e-3},
    rl={"train.max_steps": 1, "train.batch_size": 8, "train.grad_accum": 2, "rl.num_minibatches": 1,
        "log.tensorboard": False},
    eval={"batch_size": 16, "max_step_tokens": 16, "max_context": 1536},
    plan_s={"setup": 10, "eval": 5, "sft": 10, "rctp_ft": 10, "rl": 10},
)

BUDGETS = {b.name: b for b in (QUICKSTART, SMOKE)}


def get(name: str) -> Budget:
  if name not in BUDGETS:
    raise ValueError(f"unknown budget {name!r}; known: {', '.join(BUDGETS)}")
  return BUDGETS[name]
