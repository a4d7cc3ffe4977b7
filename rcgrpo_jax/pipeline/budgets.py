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
    # a second device's program is what puts a second core to work (README, performance section).
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
    # 1 test episode = 0.8 points. Train-split probe (2026-12-01, 800 SFT steps, first 32 train tasks per
    # type): 256 per type gave 6.2% greedy success (loss 0.069); 1024 per type (3 passes, not 12) 0% (loss
    # still on its 0.21 plateau): at this budget the model leaves the plateau only on repeated data.
    # RL trains on its own pool: 8 fresh train-name instances per pool type (24 tasks, none in stage 1), each seen
    # 4 times in 12 steps (the paper's RL makes many passes over its tasks: 400 epochs). Train-split probe
    # (2026-12-01, from the RCTP-FT below, lr 5e-4, temperature 0.7; greedy success on the 32 RL tasks, before
    # -> after): RC-GRPO 40.6% -> 53.1%, zero-variance groups 0.66; GRPO 40.6% -> 40.6%, 0.78 (lr: see rl). With
    # names, roots and operands of the pool's own (data.world.rl_vocab="own"; stage 1 then does without a fifth
    # of the train names and a third of the operands), stage 1 fell short of goal (a): SFT 46.1% (fs_move 34%),
    # RCTP-FT 42.2% high / 0.0% low, so the pool keeps train names. RL from that RCTP-FT on 24 own-name pool
    # tasks (2026-12-02, the rl section below with slot_mode shrink; greedy success on the pool and on 24 more
    # own-name tasks that RL did not train on, from 12.5% and 8.3%): GRPO pool 33.3%, held-out 12.5%
    # (zero-variance 0.61, sampled reward 0.17 -> 0.41); RC-GRPO 16.7% / 12.5% (0.66). Twelve steps learn the
    # pool's own names, not names in general: one held-out task in 24 more. With names and operands that neither
    # stage 1 nor the test uses, stage 1 keeping every train name (rl_vocab="fresh", rl_per_type=32: 96 pool
    # tasks, each seen once in 12 steps; 2026-12-02, from this budget's stage 1, the rl section below; greedy
    # success on the pool and on 48 more fresh tasks, from SFT 16.7% / 20.8% and RCTP-FT 13.5% / 16.7%): GRPO
    # from RCTP-FT 13.5% / 18.8% (zero-variance 0.97), RC-GRPO 13.5% / 16.7% (0.85), GRPO from SFT 16.7% / 20.8%
    # (0.99); at temperature 1.0, beta 0.1, lr 3e-4: GRPO from SFT 15.6% / 20.8%, from RCTP-FT 16.7% / 18.8%
    # (0.85 both). With partial credit (rl.reward=coverage_fraction, the share of expert calls matched): GRPO from
    # SFT 16.7% / 20.8% (0.94), from RCTP-FT 13.5% / 18.8% (0.88), RC-GRPO 13.5% / 18.8% (0.46); and at
    # temperature 1.0, beta 0.1, lr 3e-4: GRPO from SFT 16.7% / 16.7% (0.60), from RCTP-FT 15.6% / 18.8% (0.43).
    # On names it cannot copy, stage 1 rarely succeeds and its groups are mostly all-equal; where partial
    # credit and a hotter sampler give most groups a spread, twelve steps still raise at most one held-out task
    # of 48. Over the whole
    # train split instead (16 new tasks a step, each seen once): GRPO 0.67, RC-GRPO 0.60, and both lost ground
    # on the train probe (63% -> 41% / 48%); on 16 fixed tasks GRPO's sampled reward rose 0.64 -> 0.77.
    # On the wide train side (train_vocab below; 2026-12-02, from its stage 1, rl_per_type=32: 96 pool tasks,
    # each seen once in 12 steps; greedy success on the pool and on 48 more instances RL did not train on, from
    # SFT 71.9% / 77.1% and RCTP-FT 52.1% / 58.3%): the rl section below, GRPO from RCTP-FT 52.1% / 50.0%
    # (zero-variance 0.75), RC-GRPO 54.2% / 56.2% (0.43), GRPO from SFT 75.0% / 70.8% (0.89); at lr 3e-4 and
    # beta 0.1, GRPO 20.8% / 20.8%, RC-GRPO 43.8% / 35.4%; at 36 steps (each pool task seen 3 times), RC-GRPO
    # 60.4% / 62.5% (0.42), GRPO 60.4% / 54.2% (0.81). The 24-task pool seen 4 times rose from 58.3% to
    # 75.0% (GRPO) and 70.8% (RC-GRPO) from RCTP-FT while the test split rose 0.7-1.6 points: RL fits the tasks
    # it repeats, and twelve steps do not improve tasks it has not seen. Nor do 96 steps that never repeat a
    # task (2026-12-02, rl_per_type=256: 768 pool tasks; greedy success on 96 held-out instances and on 96 tasks
    # of fresh names and operands, from RCTP-FT 52.1% / 20.8%): RC-GRPO 52.1% / 20.8% (four held-out tasks
    # gained, four lost; zero-variance 0.51), GRPO 46.9% / 22.9% (0.79); 6.1 and 5.3 minutes of RL. Reinforcing
    # successes only (group-normalised advantages with the negatives dropped, lr 3e-4, 24 steps on 192 tasks;
    # another 96 held-out instances, from RCTP-FT 45.8% / 20.8% and SFT 70.8% / 27.1%): RC-GRPO 42.7% / 17.7%,
    # GRPO from RCTP-FT 33.3% / 14.6%, GRPO from SFT 64.6% / 34.4%. The two held-out sets of 96 gave one model
    # 52.1% and 45.8%: near 50%, one figure over 96 tasks has a binomial standard error of 5 points.
    # The pool leaves out fs_read_then_act (rl_types): stage 1 solves 6-9% of its train tasks greedily and none of
    # its 8 pool tasks, so its groups are all-zero under every estimator and token, a quarter of every step spent
    # on no signal. Train-split probe (2026-12-02, from the RCTP-FT below, the rl section below but G=4 x 16
    # tasks; zero-variance groups, GRPO against RC-GRPO): all four types 0.91 / 0.63 (28 points); without
    # fs_read_then_act 0.88 / 0.56 (32 points), pool after RL 66.7% / 58.3% (from 54.2%), train 60.2% both.
    world={
        "seed": 0,
        "train_per_type": 256,
        "test_per_type": 32,
        "rl_per_type": 8,
        "rl_types": "fs_move,fs_count_math,math_chain",
        # The wide train vocabulary (vocab.WIDE: ~12k stems and 534 folders of 24 syllables, operands 64-99 too).
        # Train-split probe (2026-12-02, this budget's SFT; greedy success on the first 32 train tasks per type,
        # and on 96 tasks of names and operands that no stage uses, rl_vocab=fresh with rl_per_type=32): narrow
        # 64.1% / 13.5% (fs_move 41%, math_chain 0%, fs_count_math 0%); wide 75.0% / 27.1% (50%, 9%, 22%). On the
        # narrow side 125 of the 181 made-up string arguments of the SFT model's test episodes were train names
        # (the model recalls a name from its list instead of copying); on the wide side most names occur once.
        # Stage 1 on the wide side: SFT 75.0%, RCTP-FT 68.8% asked for a high reward, 3.1% for a low one (67.2% /
        # 0.0% without wrong_parameter failures, rctp below).
        "train_vocab": "wide",
    },
    # d=128, 3 layers (about 0.6M parameters with the world's ~520 tokens). RoPE theta 1e4 rather than
    # Qwen's 1e6: more rotary frequencies turn within a ~250-token episode. Train-split probes, 800 SFT
    # steps of 16: theta 1e4 with lr 3e-3 reached 18% greedy success, theta 1e6 with lr 1e-2 14%.
    # Qwen3's architecture (per-head q/k RMSNorm, no biases), head_dim 48. Train-split probe (2026-12-01, 800
    # SFT steps, first 32 train tasks per type): Qwen2 (head_dim 32) 6.2% greedy success, loss 0.069 at the
    # end, leaving its ~0.25 plateau after ~300 steps; Qwen3 73.4% (fs_move 97%, fs_count_math 94%,
    # math_chain 88%, fs_read_then_act 16%), loss 0.014, off the plateau by ~250 steps.
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
    # Episodes are ~200-250 tokens. A random model first plateaus (every name a guess, loss ~0.25) and
    # starts copying names after 400-600 steps of 16; batch 8 got 0% after 800 steps.
    sft={**_COMMON_TRAIN, "train.batch_size": 16, "train.max_steps": 800, "optim.lr": 3e-3, "optim.end_lr_ratio": 0.1},
    # RCTP-FT: 400 steps from the SFT model at lr 1e-3 on the 1:1 mix, failures leaving the expert path at their
    # first possible place. Train-split probes (2026-12-01, first 32 train tasks per type, greedy, high / low
    # goal): from the base, 800 steps at 3e-3, failures anywhere: 39.1% / 28.1% (the token steered only fs_move);
    # same with first-place failures: 40.6% / 5.5%; from SFT (64.1%), 400 steps at 1e-3, first-place: 63.3% /
    # 8.6% (fs_move 100% / 0%, math_chain 84% / 6%). 300 steps instead (2026-12-02, the same SFT model, to save a
    # minute of goal (e)): 55.5% / 27.3% (math_chain 75% / 56%, fs_count_math 56% / 44%): short of goal (a) on both.
    # On the wide train side (2026-12-02, from its SFT, 75.0%; high / low goal, then the 96 fresh-vocabulary tasks
    # asked for a high reward, where SFT scores 27.1%): lr 1e-3 68.8% / 3.1%, fresh 20.8%; lr 3e-4 28.9% / 3.9%,
    # fresh 2.1% (400 steps at the lower rate do not teach the goal suffix).
    # No wrong-parameter failures (data.failure_kinds). Most of their low-token examples write another of the
    # task's own strings where the expert copies the right one; a likely reading (not probed further) is that the
    # high token keeps that habit out less well on names the model never saw. Train-split probe (2026-12-02, the wide SFT above, lr 1e-3; high / low goal on the first 32
    # train tasks per type, then 288 tasks of fresh names and operands under the high token, where SFT scores
    # 34.0%): all four kinds 68.8% / 3.1%, fresh 19.8% (fs_move 34%, math_chain 2%, fs_count_math 23%); without
    # wrong_parameter 67.2% / 0.0%, fresh 30.2% (35%, 9%, 46%). Control: the same 400 steps on the experts alone
    # (high goal, no failures) reached 76.6% on the train tasks but 19.8% on 96 of the fresh tasks (SFT 27.1%,
    # all four kinds 20.8%): more passes over the same experts cost unseen names too.
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
    # One XLA device. On a data mesh of two (devices=2; 2026-12-03, a fresh clone, `/usr/bin/time -v bash
    # launch/quickstart.sh`) the benches' gains (tiny sampler 1.33x at 8 rows and 1.77x at 64, GRPO step
    # 1.3-1.4x, SFT step 1.16x) did not reach this model's run: SFT 4.0 min (4.2 on one device, the README's
    # run), RCTP-FT 2.4 (2.5), the four RL rows 5.6 (5.2), 14.8 minutes in all (14.2). Stage 1 came out
    # differently (test SFT 36.7%, RCTP-FT 28.1%; probe 74.2% / 63.3% / 0.0%): the reduction order alone moves
    # these small models. One RL row from that run's RCTP-FT on both meshes (RCTP-FT+GRPO, 12 steps, one after
    # the other): median step 3.39 s against 3.97 (rollout 0.78 against 1.34, reference 0.38 / 0.51, update
    # 1.54 / 1.74), but the row's wall 71.6 s against 76.6, since 24 s of compilation (the same on both) and a
    # 17 s first step dominate a 12-step row.
    devices=1,
    # Every RL row: 8 tasks x group 8 per step. A turn needs at most 2 steps, so 4 steps per turn bound the
    # garbage loops of sampled rollouts (with BFCL's cap of 20 and 768-token contexts a step took 25-35 s; ~7 s
    # for 8 tasks with these caps).
    # lr 1e-4, chosen at temperature 0.7 (now 0.3: see below). Train-split probes (2026-12-01, from the RCTP-FT
    # below, 12 steps on the 32-task pool; greedy success on the first 32 train tasks per type, from 63.3%, and
    # on the pool, from 40.6%):
    #   lr 5e-4: RC-GRPO train 43.0%, pool 53.1%, zero-variance 0.66; GRPO train 34.4%, pool 40.6%, 0.78 (0.84 at
    #     temperature 0.5, train 33.6%). The update at lr 5e-4 costs the policy what stage 1 taught it: at lr 0
    #     both probes stay put (63.3% / 40.6%), so it is the update, not the RL pipeline.
    #   lr 1e-4: RC-GRPO train 60.9%, pool 50.0%, zero-variance 0.64; GRPO train 58.6%, pool 46.9%, 0.78. On 32
    #     more fresh train-name tasks that RL did not train on, RC-GRPO's model scored 50.0%, as its init did.
    #   At 2e-4 and temperature 1.0 on the whole train split (an earlier quickstart) twelve steps moved nothing; at
    #   1e-3 and 1.0 on a 64-per-type pool GRPO's sampled reward fell from 0.19 at step 1 to 0.00-0.13 over steps
    #   4-12, and the train probe 63% -> 27%.
    # Under rc_grpo the low-token rollouts' success rose toward the high ones' (0.09 -> 0.24-0.38 at lr 1e-4,
    # to parity by step 4 at 5e-4): the update teaches the policy to succeed when asked for a low reward, and
    # with it the groups' token-made spread fades. The estimator rc_grpo_anchor (the low-token rollouts set the
    # group's mean and std, no advantage of their own) kept it at 0.00-0.12 over 12 steps at lr 5e-4, and at
    # 0.03-0.18 at lr 1e-4 (high-token 0.30-0.60; zero-variance 0.60; train 59.4%, pool 50.0%).
    # Temperature 0.3, KL beta 0.5 and stratified reward tokens (2026-12-01, same probes, lr 1e-4; zero-variance
    # groups, GRPO against RC-GRPO from the same RCTP-FT; train / pool probes after):
    #   temperature 0.7, beta 0.1 (paper), iid tokens: GRPO 0.78, RC-GRPO 0.64 (14 points; step 1 alone: 0.75 vs
    #     0.44). Stratified tokens alone: 0.63. The gap that step 1 shows fades as the conditioning erodes.
    #   beta 0.5 at 0.7, stratified: RC-GRPO 0.60, low-token success held at 0.03-0.21 (the reference's KL keeps
    #     what RCTP-FT taught the low token, as rc_grpo_anchor does: 0.58); train 60.9%, pool 46.9%.
    #   beta 0.5 at 0.5: GRPO 0.85, RC-GRPO 0.59 stratified / 0.66 iid (26 / 19 points).
    #   beta 0.5 at 0.3: GRPO 0.91, RC-GRPO 0.63 stratified (28 points); train 61.7% / 60.2%, pool 43.8% both.
    # The floor under RC-GRPO is the pool tasks that no rollout solves under either token (~0.5 of the groups).
    # A peaked sampler is the paper's GRPO failure mode: most of GRPO's groups are all-equal, the reward token
    # mixes the solvable ones. Stratified tokens (every group holds both) only matter to RC-GRPO.
    # Group 8 over 8 tasks a step rather than 4 over 16 (the same 64 rollouts; 2026-12-02, same probes, pool
    # without fs_read_then_act): GRPO 0.91, RC-GRPO 0.49 (42 points, from 32 at G=4): with 1-7 high tokens a
    # group of a task stage 1 solves some of the time holds a success more often, while GRPO's peaked groups
    # stay all-equal. Train probe 59.4% / 61.7%, pool 54.2% / 58.3% (GRPO / RC-GRPO, from 63.3% / 54.2%).
    # Finished episodes stay in the decode batch (rl.slot_mode=keep): one decode shape per KV span instead of one
    # per (rows, span), so a step compiles far less (2026-12-02, GRPO from the RCTP-FT below, 6 steps, idle
    # machine; `time/*` of metrics.jsonl): shrink 145 compilations, 36.1 s of compile, rollouts 41.7 s, steps
    # 2-6 47.2 s; keep 99, 19.3 s, 22.0 s, 28.3 s (steps 2-6 at 5.2-6.2 s). A decode step over 64 rows costs
    # this 0.6M model about what one over 8 does, so the kept rows are nearly free. (Greedy evaluation gains
    # nothing from it: 28-33 s either way.)
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
