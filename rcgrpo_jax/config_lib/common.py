"""Shared config sections for every stage (SFT, RCTP-FT, the GRPO family, eval).

A stage file (configs/<stage>.py) builds `base(stage, preset)` and then overrides its own fields, so every stage
has the same section names and the launcher, checks, checkpointing and logging read them the same way:

  model       where the weights come from and how the model computes (dtype, remat)
  mesh        device mesh sizes over ('data', 'fsdp', 'tensor'); -1 = all remaining devices
  sharding    names of the partition rule sets for the update and for decoding
  data        dataset location, length buckets
  train       batch size, accumulation, length of the run, non-finite guard
  optim       AdamW + warmup + cosine, clipping
  checkpoint  orbax cadence, retention, final HF export
  log         JSONL / TensorBoard / progress bar
  multihost   when to call jax.distributed.initialize()
  memory      per-device budget used by the start-up fit check

RL stages add an `rl` section (estimator, policy loss, group size, KL beta, ...) and a
`reference` section (`config_lib.rl_stage.base`); the eval stage an `eval` section (`config_lib.eval.base`);
config_checks validates those when present.
"""

from __future__ import annotations

import ml_collections
from ml_collections.config_dict import placeholder  # a None default that the command line may set to a str

from rcgrpo_jax import hardware
from rcgrpo_jax.data import sources

PRESETS = ("tiny", "qwen2_5_7b", "llama3_1_8b", "qwen3_1_7b", "qwen3_4b", "qwen3_8b")


def parse_preset(arg: str | None) -> str:
    """`configs/x.py:preset` passes `preset` here; empty means 'tiny'."""
    preset = (arg or "tiny").strip()
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose one of {PRESETS}")
    return preset


def model() -> ml_collections.ConfigDict:
    """Where the weights come from. `path=None` is allowed only for `tiny` (a checkpoint is built offline)."""
    c = ml_collections.ConfigDict()
    c.path = placeholder(str)  # local HF directory (config.json + safetensors + tokenizer); None by default
    c.build_tiny = False  # build a tiny random HF checkpoint under the workdir when path is None
    c.tiny_arch = "qwen2"  # architecture of the built tiny checkpoint: qwen2 | llama
    # How the built tiny checkpoint's chat template lists tools: json (as Qwen2.5) | signatures (one short
    # line: CPU-sized models spend most of their time on the prompt otherwise). qwen2 only.
    c.tiny_tools_format = "json"
    c.dtype = "bfloat16"  # compute dtype
    c.param_dtype = "float32"  # master weights (AdamW moments follow)
    c.decode_dtype = "bfloat16"  # rollout weights, cast once per RL step
    c.remat = True  # rematerialise each decoder layer in the backward pass
    # Layers the layer loop unrolls (-1: all). Unrolled is faster for the CPU-sized tiny models (`benchmarks.train
    # --unroll`); the rolled loop keeps 28-32-layer compiles short.
    c.scan_unroll = 1
    # Training attention (rcgrpo_jax.models.attention): auto (on a GPU in bf16/fp16 JAX's Pallas Triton flash
    # kernel, the one the lowering proof lowers, where JAX ships it (0.10/0.11), else cuDNN's; XLA elsewhere) |
    # xla | cudnn (fails where it cannot run; gpu_check prints it as the override where it is fastest) | pallas
    # (jax 0.10/0.11 only) | tokamax (tokamax's Mosaic GPU flash attention on Hopper/Blackwell).
    c.attention_impl = "auto"
    # RL rollouts' one-token decode attention (rcgrpo_jax.sampling.decode_step): auto (JAX's Pallas GPU decode
    # kernel, each row over its own length, on a GPU; on jax 0.12 tokamax's Triton attention with per-row
    # lengths; the dense XLA dots elsewhere) | xla | ragged | tokamax.
    c.decode_attention = "auto"
    return c


def mesh() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    # One 8-GPU host: params and AdamW moments split 8 ways (FSDP 4 x tensor 2); tensor-parallel heads halve the
    # per-device attention activations at 16k tokens (figures: docs/performance.md).
    c.data, c.fsdp, c.tensor = 1, -1, 2
    return c


def sharding() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.train_rules = "train"  # rule set in rcgrpo_jax.sharding for the update (FSDP + tensor)
    c.decode_rules = "decode"  # rule set name for the sampler (RL stages)
    return c


def data() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    # Task source (rcgrpo_jax.data.sources): 'bfcl' = the BFCL v4 split (the paper); 'world' = the generated
    # miniature world on the same BFCL classes, short episodes a tiny model learns on a CPU (tiny presets).
    c.source = "bfcl"
    # rl_per_type > 0: RL trains on that many fresh instances per type (no stage-1 example among them), else
    # on the train split. rl_vocab: the pool's names and operands, "train" (train ones) | "own" (a side of
    # their own, carved from the train side: no stage-1 task names them; rcgrpo_jax.worlds.vocab.RL) | "fresh"
    # (names and operands that neither stage 1 nor the test uses; stage 1 keeps every train name; vocab.FRESH).
    # rl_types: the trained types of the pool, comma-separated ("fs_move,math_chain"); "" = every one.
    # train_vocab: the train side's names and operands, "narrow" (12 syllables: 1068 stems, 114 folders, operands
    # 2-39) | "wide" (24 syllables: ~12k stems, 534 folders, operands 64-99 too; too many names to memorise, so
    # the model copies them; vocab.WIDE) | "coded" (a letter and digits: "f123" stems, "d45" folders, wide operands;
    # vocab.CODED). The test side is the syllable TEST under the first two, the coded test side under "coded".
    # iid_test_per_type / dev_per_type > 0: the 'iid' and 'dev' splits, fresh instances of the trained types drawn
    # as the train split's (same vocabulary, new compositions and arguments; worlds.generate_iid): the i.i.d. test
    # (the paper's held-out questions) and a small held-out set for RL curves. 'test' keeps names no stage sees.
    # pretrain_per_type > 0: the 'pretrain' split, drawn as they are, none of them a train, iid or dev task: the
    # corpus of a base model (experiments.pretrain).
    c.world = ml_collections.ConfigDict(
        {
            "seed": 0,
            "train_per_type": 64,
            "test_per_type": 16,
            "rl_per_type": 0,
            "rl_vocab": "train",
            "rl_types": "",
            "train_vocab": "narrow",
            "iid_test_per_type": 0,
            "dev_per_type": 0,
            "pretrain_per_type": 0,
        }
    )
    # 'steps' (AWPO's step-level data, SWiRL style): each step of an expert trajectory a task of its own.
    c.steps = steps_section()
    c.path = placeholder(str)  # JSONL of {"messages": [...], "tools": [...]}; None = build from data.source
    # Exploration records (python -m rcgrpo_jax.train.exploration): their failures join the generated ones
    # in the RCTP-FT data built from data.source (data/manifest.json records the mix). None = generated only.
    c.exploration_path = placeholder(str)
    # Where a generated failure leaves the expert path (data.trajectories.FAILURE_SITES): 'any' = a random
    # call or turn; 'first' = the earliest place, so under <|low_reward|> the first action already differs.
    c.failure_site = "any"
    # Which perturbations make the generated failures (data.trajectories.failure_kinds): 'all', or a
    # comma-separated subset of wrong_tool, wrong_parameter, premature_termination, skipped_turn.
    c.failure_kinds = "all"
    # BFCL conversations carry 18-39 tool docs: 4-7k tokens even with the tiny tokenizer; world episodes
    # carry 3-9 docs.
    c.buckets = (4096, 8192, 16384)
    c.truncate = True  # longer examples are cut to the largest bucket (else dropped); both are counted
    c.max_examples = -1  # > 0 keeps the first N train tasks (quick debugging); -1 = all
    return c


def steps_section() -> ml_collections.ConfigDict:
    """data.steps (rcgrpo_jax.data.sources, `steps`): defaults from the source itself."""
    return ml_collections.ConfigDict(dict(sources.STEPS_DEFAULTS))


def train() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.batch_size = 16  # examples per optimizer step (global)
    # Micro-batches per step; the batch is split and gradients summed exactly. -1: one row per batch shard
    # (mesh data x fsdp) per micro-batch, resolved at start-up for the devices present.
    c.grad_accum = 1
    c.epochs = 2
    c.max_steps = -1  # > 0 caps the run (tiny / debugging)
    c.logprob_chunk = 8192  # vocabulary chunk for the token log-probs
    c.max_nonfinite = 5  # abort after this many non-finite steps in a row (each is skipped)
    return c


def optim(lr: float) -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.lr = lr
    c.warmup_ratio = 0.03  # of the total steps, linear from 0
    c.end_lr_ratio = 0.0  # cosine decays to lr * end_lr_ratio
    c.weight_decay = 0.0
    c.b1, c.b2, c.eps = 0.9, 0.999, 1e-8
    c.clip_norm = 1.0  # global gradient norm; <= 0 disables
    return c


def checkpoint() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.every_steps = 100
    c.max_to_keep = 2
    c.export_hf = True  # write the final policy as an HF safetensors directory (workdir/hf)
    c.async_save = True
    return c


def log() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.every_steps = 1
    c.tensorboard = True
    c.progress = True
    return c


def multihost() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.initialize = "auto"  # auto (when SLURM/JAX coordinator env vars say so) | always | never
    return c


def runtime() -> ml_collections.ConfigDict:
    """The machine a run lands on (rcgrpo_jax.runtime)."""
    c = ml_collections.ConfigDict()
    c.allow_cpu = False  # let a GPU-sized preset run on a CPU backend (else refused at start-up)
    # Persistent XLA compilation cache; "" = $JAX_COMPILATION_CACHE_DIR when set, else <workdir>/xla_cache.
    c.compile_cache_dir = ""
    return c


def memory() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    # the paper's target's HBM: the budget per device when the device does not report one (CPU, dry runs)
    c.device_bytes = hardware.H200.hbm_bytes
    c.check_fit = True  # compile the update step first and refuse to start when it cannot fit
    return c


def supervised_budget(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """SFT and RCTP-FT share their step budgets: the tiny preset's capped CPU run, and micro-batching that
    keeps one 16k-token sequence per batch shard (data x fsdp = 4) per micro-batch for the 7B/8B presets."""
    if c.preset == "tiny":  # a random tiny model learns quickly at a large step size; the run is capped
        c.optim.lr = 3e-3
        c.optim.warmup_ratio = 0.1
        c.train.batch_size = 4
        c.train.grad_accum = 4
        c.train.epochs = 100
        c.train.max_steps = 6
        c.checkpoint.every_steps = 2
        c.train.logprob_chunk = 256
    else:
        c.train.grad_accum = -1  # auto: one 16k-token row per batch shard per micro-batch (4 x 4 on 8 GPUs)
    return c


TRAINERS = ("supervised", "rl", "eval")  # the trainer kinds; rcgrpo_jax.stages maps each to its entry points


def base(stage: str, preset: str, *, lr: float, trainer: str) -> ml_collections.ConfigDict:
    """Every section a stage needs, with the preset's defaults; the stage file overrides the rest.
    `stage` names the run (logs, checkpoints); `trainer` (one of TRAINERS) says which code runs it."""
    if trainer not in TRAINERS:
        raise ValueError(f"unknown trainer {trainer!r}; choose one of {TRAINERS}")
    c = ml_collections.ConfigDict()
    c.stage = stage
    c.trainer = trainer
    c.preset = preset
    c.seed = 0
    c.model = model()
    c.mesh = mesh()
    c.sharding = sharding()
    c.data = data()
    c.train = train()
    c.optim = optim(lr)
    c.checkpoint = checkpoint()
    c.log = log()
    c.multihost = multihost()
    c.runtime = runtime()
    c.memory = memory()
    if preset == "tiny":
        tiny_overrides(c)
    return c


def tiny_overrides(c: ml_collections.ConfigDict) -> None:
    """The `tiny` preset's changes to the common sections, in one block (as big_vision's `runlocal`): a CPU run
    on one device, on the generated world, with a tiny float32 model built offline. Each stage file keeps its
    own tiny block beside it."""
    c.model.build_tiny = True  # no weights to read: a tiny random HF checkpoint is built under the workdir
    # The built template lists tools as one short line each: CPU-sized models spend most of their time on the
    # prompt otherwise (json, as Qwen2.5 does, is the default).
    c.model.tiny_tools_format = "signatures"
    c.model.dtype = c.model.decode_dtype = "float32"
    c.model.remat = False
    c.model.scan_unroll = -1  # unrolled is faster for the CPU-sized tiny models (`benchmarks.train --unroll`)
    c.mesh.data, c.mesh.fsdp, c.mesh.tensor = 1, 1, 1  # one device; CPU attention is not chunked
    c.data.source = "world"  # the miniature world: short episodes a tiny model learns on a CPU
    c.data.buckets = (512, 1024, 2048, 4096)  # world episodes carry 3-9 tool docs
    c.checkpoint.every_steps = 10
    c.checkpoint.async_save = False


# The published architectures (HF config.json fields), so a dry run can size a preset without weights.
_HF_ARCHS = {
    "qwen2_5_7b": {  # Qwen2.5-7B-Instruct
        "model_type": "qwen2",
        "vocab_size": 152064,
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
        "max_position_embeddings": 32768,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "torch_dtype": "bfloat16",
        "hidden_act": "silu",
    },
    "llama3_1_8b": {  # Llama-3.1-8B-Instruct
        "model_type": "llama",
        "vocab_size": 128256,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "rope_theta": 500000.0,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False,
        "max_position_embeddings": 131072,
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": 128000,
        "eos_token_id": [128001, 128008, 128009],
        "torch_dtype": "bfloat16",
        "hidden_act": "silu",
    },
    "qwen3_1_7b": {  # Qwen3-1.7B
        "model_type": "qwen3",
        "vocab_size": 151936,
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
        "max_position_embeddings": 40960,
        "attention_bias": False,
        "use_sliding_window": False,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "torch_dtype": "bfloat16",
        "hidden_act": "silu",
    },
    "qwen3_4b": {  # Qwen3-4B-Instruct-2507 (Qwen3-4B-Thinking-2507 has the same architecture)
        "model_type": "qwen3",
        "vocab_size": 151936,
        "hidden_size": 2560,
        "intermediate_size": 9728,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "rope_theta": 5000000.0,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
        "max_position_embeddings": 262144,
        "attention_bias": False,
        "use_sliding_window": False,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "torch_dtype": "bfloat16",
        "hidden_act": "silu",
    },
    "qwen3_8b": {  # Qwen3-8B
        "model_type": "qwen3",
        "vocab_size": 151936,
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
        "max_position_embeddings": 40960,
        "attention_bias": False,
        "use_sliding_window": False,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "torch_dtype": "bfloat16",
        "hidden_act": "silu",
    },
}


def hf_architecture(preset: str) -> dict:
    """config.json contents of the preset's published model (dry runs only; training reads model.path)."""
    if preset not in _HF_ARCHS:
        raise ValueError(f"no published architecture for preset {preset!r}")
    return dict(_HF_ARCHS[preset])
