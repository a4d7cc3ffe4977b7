"""Named budgets of the ablation: world size, model size, steps and learning rates of every stage.

`quickstart` is the one-command CPU reproduction (about 15 minutes on 2 cores); `reproduce` is the same run
with the control pair (`control` below; launch/reproduce.sh); `smoke` runs every stage for a few steps on a
tiny world (the pipeline test). RL budgets are equal for every RL row: one `rl` section is applied to GRPO
and RC-GRPO alike. Tune these on the TRAIN split only
(`--eval_split=train`), never on the test split.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping


@dataclasses.dataclass(frozen=True)
class Budget:
    name: str
    world: Mapping[str, Any]  # data.world: seed, train_per_type, test_per_type, rl_per_type, rl_types, ...
    model: Mapping[str, int]  # build_tiny_checkpoint sizes
    sft: Mapping[str, Any]  # dotted config overrides of the SFT stage (configs/sft.py:tiny)
    rctp: Mapping[str, Any]  # ... of RCTP-FT (configs/rctp_ft.py:tiny)
    rl: Mapping[str, Any]  # ... of every RL run (configs/grpo.py:tiny and configs/rc_grpo.py:tiny)
    eval: Mapping[str, Any]  # the eval section (configs/eval.py:tiny)
    # Planned seconds per stage on a 2-core machine, only for the console ETA.
    plan_s: Mapping[str, float] = dataclasses.field(default_factory=dict)
    # The exploration stage (train.exploration.collect): the SFT policy plays the first `tasks` train tasks
    # `group_size` times; its rollouts that score 0 join the generated failures of the RCTP-FT data (the
    # paper's failures are a policy's own; the CPU run's base model is random, so the SFT policy explores).
    # Empty = no exploration (RCTP-FT on generated failures only).
    explore: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # Goal (a)'s probe: greedy success of the stage-1 models on the first N TRAIN tasks of each type.
    probe_per_type: int = 32
    # The tiny checkpoint's architecture (models.tiny: qwen2 | qwen3 | llama).
    arch: str = "qwen3"
    # What RCTP-FT starts from: "base" (the paper's order: both stage-1 models from the base checkpoint) or
    # "sft" (the SFT model, standing in for the paper's instruct base that can already call tools; the CPU
    # world's base is random).
    rctp_init: str = "base"
    # XLA CPU devices every stage runs on, as a data mesh (mesh.data; the pipeline's command sets the host's
    # device count before JAX starts). XLA's CPU runtime runs one program's ops mostly one after another, so
    # a second device's program is what puts a second core to work (docs/performance.md).
    devices: int = 1
    # The control pair (pipeline.ablation.CONTROL_ROWS: RCTP-FT+GRPO and RCTP-FT+RC-GRPO, seed 0): overrides on
    # top of `rl` that put the RL settings the budget tunes back at the paper presets' own (temperature, KL
    # beta, i.i.d. reward tokens, G; configs/grpo.py), so the report shows the zero-variance gap at both the
    # budget's settings and the presets'. Empty = no control pair.
    control: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if self.rctp_init not in ("base", "sft"):
            raise ValueError(f"budget {self.name}: rctp_init must be 'base' or 'sft', got {self.rctp_init!r}")
        if self.devices < 1:
            raise ValueError(f"budget {self.name}: devices must be >= 1, got {self.devices}")


# Length buckets: SFT batches fit 256 tokens; RCTP-FT's reward-goal suffixes push most just past it
# (288 rather than 320 saves ~15% of its step time).
_COMMON_TRAIN = {
    "train.grad_accum": 1,
    "optim.warmup_ratio": 0.05,
    "checkpoint.every_steps": 200,
    "log.tensorboard": False,
    "data.buckets": (256, 288, 320, 384, 512, 768),
}

QUICKSTART = Budget(
    name="quickstart",
    # The one-command CPU run. 256 train tasks per type; RL trains on its own pool of 8 fresh train-name tasks
    # per type over three types (fs_read_then_act left out). Probes: docs/experiments.md, "Stage-1 data size"
    # and "The RL pool".
    world={
        "seed": 0,
        "train_per_type": 256,
        "test_per_type": 32,
        "rl_per_type": 8,
        "rl_types": "fs_move,fs_count_math,math_chain",
        # The wide train vocabulary (vocab.WIDE: ~12k stems and 534 folders of 24 syllables, operands 64-99 too).
        # Probe: docs/experiments.md, "Train vocabulary".
        "train_vocab": "wide",
    },
    # d=128, 3 layers (about 0.6M parameters), Qwen3's architecture with head_dim 48, RoPE theta 1e4.
    # Probes: docs/experiments.md, "Model".
    model={
        "head_dim": 48,
        "hidden_size": 128,
        "num_layers": 3,
        "num_heads": 4,
        "num_kv_heads": 2,
        "intermediate_size": 256,
        "tokenizer_vocab_size": 512,
        "rope_theta": 10000.0,
    },
    # 800 SFT steps of 16 at lr 3e-3. Probe: docs/experiments.md, "SFT".
    sft={**_COMMON_TRAIN, "train.batch_size": 16, "train.max_steps": 800, "optim.lr": 3e-3, "optim.end_lr_ratio": 0.1},
    # RCTP-FT: 400 steps from the SFT model at lr 1e-3 on the 1:1 mix, failures leaving the expert path at their
    # first possible place, no wrong-parameter failures. Probes: docs/experiments.md, "RCTP-FT".
    rctp={
        **_COMMON_TRAIN,
        "train.batch_size": 16,
        "train.max_steps": 400,
        "optim.lr": 1e-3,
        "optim.end_lr_ratio": 0.1,
        "data.failure_site": "first",
        "data.failure_kinds": "wrong_tool,premature_termination,skipped_turn",
    },
    rctp_init="sft",
    # One XLA device; the run on two is in docs/experiments.md, "Devices".
    devices=1,
    # Every RL row: 8 tasks x group 8 per step, lr 1e-4, temperature 0.3, KL beta 0.5, stratified reward tokens,
    # finished episodes kept in the decode batch, 4 steps per turn. Probes: docs/experiments.md, "RL".
    rl={
        "rl.slot_mode": "keep",
        "optim.lr": 1e-4,
        "rl.temperature": 0.3,
        "rl.loss.ppo_clip.kl_beta": 0.5,
        "rl.reward_token_mode": "stratified",
        "train.max_steps": 12,
        "rl.group_size": 8,
        "train.batch_size": 64,
        "train.grad_accum": 2,
        "rl.num_minibatches": 2,
        "rl.max_context": 512,
        "rl.max_step_tokens": 64,
        "rl.max_steps_per_turn": 4,
        "data.buckets": (256, 320, 384, 512),
        "log.tensorboard": False,
        "checkpoint.every_steps": 4,
    },
    eval={"batch_size": 80, "max_step_tokens": 64, "max_context": 1024, "max_steps_per_turn": 4},
    plan_s={"setup": 30, "eval": 25, "sft": 350, "rctp_ft": 180, "rl": 170},
)

SMOKE = Budget(
    name="smoke",
    world={"seed": 0, "train_per_type": 4, "test_per_type": 2, "rl_per_type": 2},
    model={
        "hidden_size": 32,
        "num_layers": 1,
        "num_heads": 2,
        "num_kv_heads": 1,
        "intermediate_size": 64,
        "tokenizer_vocab_size": 512,
    },
    sft={**_COMMON_TRAIN, "train.batch_size": 4, "train.max_steps": 2, "optim.lr": 3e-3},
    rctp={**_COMMON_TRAIN, "train.batch_size": 4, "train.max_steps": 2, "optim.lr": 3e-3, "data.failure_site": "first"},
    rl={
        "train.max_steps": 1,
        "train.batch_size": 8,
        "train.grad_accum": 2,
        "rl.num_minibatches": 1,
        "log.tensorboard": False,
    },
    eval={"batch_size": 16, "max_step_tokens": 16, "max_context": 1536},
    plan_s={"setup": 10, "eval": 5, "sft": 10, "rctp_ft": 10, "rl": 10},
    explore={"tasks": 4, "group_size": 2, "max_step_tokens": 16, "max_context": 1024},
    probe_per_type=2,
    rctp_init="sft",
    # The control pair's plumbing at the smoke scale: the presets' RL settings, 2 tasks x G 5 per step.
    control={
        "rl.temperature": 1.0,
        "rl.loss.ppo_clip.kl_beta": 0.1,
        "rl.reward_token_mode": "iid",
        "rl.group_size": 5,
        "train.batch_size": 10,
        "train.grad_accum": 1,
    },
    devices=2,  # the pipeline test runs every stage on a data mesh (the path of a budget with devices > 1)
)

# The quickstart with its control pair (launch/reproduce.sh): RCTP-FT+GRPO and RCTP-FT+RC-GRPO at the paper
# presets' RL settings (configs/grpo.py: temperature 1.0, KL beta 0.1, i.i.d. reward tokens with p(high) 0.5,
# G 5) and the quickstart's steps, lr and pool; 8 tasks x 5 rollouts a step, so each pool task is seen as often
# as in the quickstart's rows (8 tasks x 8). Stage 1 and the RL rows are the quickstart's own (a reproduce run
# resumes a quickstart workdir); the pair adds two RL rows at seed 0.
REPRODUCE = dataclasses.replace(
    QUICKSTART,
    name="reproduce",
    control={
        "rl.temperature": 1.0,
        "rl.loss.ppo_clip.kl_beta": 0.1,
        "rl.reward_token_mode": "iid",
        "rl.group_size": 5,
        "train.batch_size": 40,
    },
)

BUDGETS = {b.name: b for b in (QUICKSTART, REPRODUCE, SMOKE)}


def get(name: str) -> Budget:
    if name not in BUDGETS:
        raise ValueError(f"unknown budget {name!r}; known: {', '.join(BUDGETS)}")
    return BUDGETS[name]
