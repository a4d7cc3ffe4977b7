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
    # The controls that run at seed 0 (experiments.ablation.CONTROL_ROWS): "shuffled" (RCTP-FT+RC-GRPO with its
    # advantages permuted across the batch: the same updates without the reward's signal) and "lr0" (the same
    # row at lr 0 for two steps: it must reproduce its init exactly).
    controls: tuple[str, ...] = ()
    # The stage-1 pass@k probe on the i.i.d. test: the first `per_type` tasks of each type, `k` samples each at
    # `temperature` (train.exploration.collect). Empty = none.
    passk: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # The SFT examples' reward-goal slot (data.datasets.sft_records): "none" or "random" (a token drawn at
    # random on every expert: the slot is there, its token means nothing).
    sft_reward_slot: str = "none"
    # The base model of the world (experiments.ablation.pretrained_base), built once and shared by every seed and
    # row: the random checkpoint trained on the world's 'pretrain' split (world.pretrain_per_type tasks per type), one
    # conversation a task, its expert or one of its generated failures, no reward goal. `pretrain_corpus`:
    # failure_share, failure_kinds, failure_site, seed (of the random init and the draw); `pretrain`: dotted overrides
    # of the SFT stage config that trains it. Empty `pretrain` = no pretraining: each seed's base is its random
    # checkpoint.
    pretrain_corpus: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    pretrain: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # Whose rollouts the exploration stage collects: "sft" (the SFT policy's) or "base" (the base model's, the
    # paper's order: its own failures join RCTP-FT's data; needs a pretrained base).
    explore_with: str = "sft"

    def __post_init__(self):
        if self.rctp_init not in ("base", "sft"):
            raise ValueError(f"budget {self.name}: rctp_init must be 'base' or 'sft', got {self.rctp_init!r}")
        unknown = [c for c in self.controls if c not in ("shuffled", "lr0")]
        if unknown:
            raise ValueError(f"budget {self.name}: unknown controls {unknown}; known: shuffled, lr0")
        if self.explore_with not in ("sft", "base"):
            raise ValueError(f"budget {self.name}: explore_with must be 'sft' or 'base', got {self.explore_with!r}")
        if self.explore_with == "base" and not self.pretrain:
            raise ValueError(f"budget {self.name}: explore_with='base' needs a pretrained base (budget.pretrain)")
        unknown = set(self.pretrain_corpus) - {"failure_share", "failure_kinds", "failure_site", "seed"}
        if unknown:
            raise ValueError(f"budget {self.name}: unknown pretrain_corpus keys {sorted(unknown)}")
        if self.devices < 1:
            raise ValueError(f"budget {self.name}: devices must be >= 1, got {self.devices}")


# Length buckets: SFT batches fit 256 tokens; RCTP-FT's reward-goal suffixes push most just past it
# (288 rather than 320 saves ~15% of its step time).
COMMON_TRAIN = {
    "train.grad_accum": 1,
    "optim.warmup_ratio": 0.05,
    "checkpoint.every_steps": 200,
    "log.tensorboard": False,
    "data.buckets": (256, 288, 320, 384, 512, 768),
}

QUICKSTART = Budget(
    name="quickstart",
    # The one-command CPU run. 256 train tasks per type, named by codes (a letter and digits, "f123": one token a
    # digit, so copying a name is a few pieces' work; vocab.CODED). Headline test 'iid': 40 fresh tasks per type
    # drawn exactly as the train split's (the paper's held-out questions of the same classes); 'test' keeps codes no
    # stage sees as the out-of-distribution column; 'dev': 8 per type for the RL curves and the probes; 'pretrain':
    # 512 per type, the base model's corpus. RL's pool: 40 fresh i.i.d. tasks per type over all four types, each seen
    # about once. docs/experiments.md has the probes.
    world={
        "seed": 0,
        "train_per_type": 256,
        "test_per_type": 16,
        "rl_per_type": 40,
        "train_vocab": "coded",
        "iid_test_per_type": 40,
        "dev_per_type": 8,
        "pretrain_per_type": 512,
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
    # SFT from the pretrained base: the paper's 2 epochs of the experts (128 steps), lr 1e-3 by the 'dev' probe
    # (docs/experiments.md: the largest pass@8 - greedy with greedy >= 20%, against 3e-3; rerun on the 2400-step
    # base, which turned the 800-step base's choice of 3e-3 around); every example carries a
    # reward-goal slot with a random token, so the SFT policy has seen the slot and learned nothing from its token
    # (`sft_reward_slot`).
    sft={
        **COMMON_TRAIN,
        "train.batch_size": 16,
        "train.epochs": 2,
        "train.max_steps": -1,
        "optim.lr": 1e-3,
        "optim.end_lr_ratio": 0.1,
        "add_reward_tokens": True,
    },
    # RCTP-FT from the base (the paper's order) on experts and failures 1:1 for the paper's 5 epochs (640 steps:
    # 2.5 times SFT's passes over the experts), the failures the base's own failed rollouts (exploration) and
    # generated ones leaving the expert path at their first place; SFT's learning rate.
    rctp={
        **COMMON_TRAIN,
        "train.batch_size": 16,
        "train.epochs": 5,
        "train.max_steps": -1,
        "optim.lr": 1e-3,
        "optim.end_lr_ratio": 0.1,
        "data.failure_site": "first",
        "data.failure_kinds": "wrong_tool,premature_termination,skipped_turn",
    },
    rctp_init="base",
    sft_reward_slot="random",
    # The world's base model, pretrained once and shared by every seed and row (the paper's instruct base): the
    # 'pretrain' split, one conversation a task, 30% of them one of the task's generated failures (a sibling tool,
    # a wrong argument, a premature stop, a skipped turn), no reward goal; 2400 steps of 16 at lr 3e-3. At 800 steps
    # whether a base learned to copy a name's extension was a draw (docs/experiments.md: pretraining probes); at
    # 2400, every probed seed did. The repository ships it (experiments/base_models/quickstart,
    # `ablation.shipped_base`), so the quickstart does not rebuild it.
    pretrain_corpus={"failure_share": 0.3},
    pretrain={
        **COMMON_TRAIN,
        "train.batch_size": 16,
        "train.epochs": 100,
        "train.max_steps": 2400,
        "optim.lr": 3e-3,
        "optim.end_lr_ratio": 0.1,
        "checkpoint.every_steps": 400,
    },
    explore_with="base",
    explore={"tasks": 128, "group_size": 2, "max_step_tokens": 64, "max_context": 1024, "temperature": 1.0},
    probe_per_type=8,
    passk={"per_type": 4, "k": 8, "temperature": 1.0},
    devices=1,
    # Every RL row at the presets' RL settings (configs/grpo.py, configs/rc_grpo.py): temperature 1.0, KL beta
    # 0.1, i.i.d. reward tokens with p(high) 0.5, clip 0.2, G 5. 8 tasks x 5 rollouts a step, 20 steps x 4
    # mini-batches = 80 updates; lr 1e-4 (the tiny model's, not the 7B's 1e-6) with a 10% warmup and a floor at
    # 10%. Held-out 'dev' accuracy every 4 steps.
    rl={
        "rl.slot_mode": "keep",
        "optim.lr": 1e-4,
        "optim.warmup_ratio": 0.1,
        "optim.end_lr_ratio": 0.1,
        "rl.temperature": 1.0,
        "rl.loss.ppo_clip.kl_beta": 0.1,
        "rl.reward_token_mode": "iid",
        "train.max_steps": 20,
        "rl.group_size": 5,
        "train.batch_size": 40,
        "train.grad_accum": 4,
        "rl.num_minibatches": 4,
        "rl.max_context": 512,
        "rl.max_step_tokens": 64,
        "rl.max_steps_per_turn": 4,
        "rl.heldout.every": 4,
        "data.buckets": (256, 320, 384, 512),
        "log.tensorboard": False,
        "checkpoint.every_steps": 5,
    },
    eval={"batch_size": 80, "max_step_tokens": 64, "max_context": 1024, "max_steps_per_turn": 4},
    plan_s={"pretrain": 950, "setup": 10, "eval": 40, "sft": 60, "explore": 30, "rctp_ft": 300, "passk": 40, "rl": 110},
    controls=("shuffled", "lr0"),
)

SMOKE = Budget(
    name="smoke",
    world={
        "seed": 0,
        "train_per_type": 4,
        "test_per_type": 2,
        "rl_per_type": 2,
        "iid_test_per_type": 2,
        "dev_per_type": 1,
        "pretrain_per_type": 2,
        "train_vocab": "coded",
    },
    model={
        "hidden_size": 32,
        "num_layers": 1,
        "num_heads": 2,
        "num_kv_heads": 1,
        "intermediate_size": 64,
        "tokenizer_vocab_size": 512,
    },
    sft={**COMMON_TRAIN, "train.batch_size": 4, "train.max_steps": 2, "optim.lr": 3e-3, "add_reward_tokens": True},
    pretrain_corpus={"failure_share": 0.5},
    pretrain={**COMMON_TRAIN, "train.batch_size": 4, "train.max_steps": 2, "optim.lr": 3e-3},
    explore_with="base",
    rctp={**COMMON_TRAIN, "train.batch_size": 4, "train.max_steps": 2, "optim.lr": 3e-3, "data.failure_site": "first"},
    rl={
        "train.max_steps": 1,
        "train.batch_size": 8,
        "train.grad_accum": 2,
        "rl.num_minibatches": 1,
        "rl.heldout.every": 1,
        "log.tensorboard": False,
    },
    eval={"batch_size": 16, "max_step_tokens": 16, "max_context": 1536},
    plan_s={"setup": 10, "eval": 5, "sft": 10, "rctp_ft": 10, "rl": 10},
    explore={"tasks": 4, "group_size": 2, "max_step_tokens": 16, "max_context": 1024},
    probe_per_type=2,
    controls=("shuffled", "lr0"),
    sft_reward_slot="random",
    passk={"per_type": 1, "k": 2, "temperature": 1.0},
    devices=2,  # the pipeline test runs every stage on a data mesh (the path of a budget with devices > 1)
)

# The quickstart, run for 3 seeds of the whole pipeline by launch/reproduce.sh (stage 1 included); the controls
# run at seed 0 only.
REPRODUCE = dataclasses.replace(QUICKSTART, name="reproduce")

# The quickstart with the RL settings the `dev` probe's rule chose (`experiments.rl_probe`, docs/experiments.md: "RL
# for 200 steps"): 200 steps on 400 fresh tasks a type (1600, each seen once) at lr 3e-4, every other setting the
# quickstart's; the held-out curve every 20 steps. Every RL row and control runs ten times the quickstart's steps
# (about 8 min a row on 2 cores), so it is not the quickstart: `python -m experiments.ablation --budget long_rl`.
LONG_RL = dataclasses.replace(
    QUICKSTART,
    name="long_rl",
    world={**QUICKSTART.world, "rl_per_type": 400},
    rl={**QUICKSTART.rl, "optim.lr": 3e-4, "train.max_steps": 200, "rl.heldout.every": 20},
    plan_s={**QUICKSTART.plan_s, "rl": 500},
)

BUDGETS = {b.name: b for b in (QUICKSTART, REPRODUCE, SMOKE, LONG_RL)}


def get(name: str, *, world_seed: int | None = None) -> Budget:
    """The named budget; with `world_seed`, the same budget on another draw of its world (world.seed: other
    tasks, names and pretraining corpus, so its own base model), named "<name>@world<seed>"."""
    if name not in BUDGETS:
        raise ValueError(f"unknown budget {name!r}; known: {', '.join(BUDGETS)}")
    budget = BUDGETS[name]
    if world_seed is None or world_seed == budget.world.get("seed", 0):
        return budget
    return dataclasses.replace(budget, name=f"{name}@world{world_seed}", world={**budget.world, "seed": world_seed})
