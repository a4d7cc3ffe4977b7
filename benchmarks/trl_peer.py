"""The peer side of `benchmarks.grpo_step`: HF TRL's GRPOTrainer, one step per request, in the bench env.

    <bench-env python> -m benchmarks.trl_peer --checkpoint DIR --work WORK.json --beta B --steps N

Run as a subprocess (launch/bench_env.sh trl builds the env; TRL is never a dependency of the package, so
this module imports neither jax nor the rest of rcgrpo_jax). Protocol over stdin/stdout, one JSON object
per line: before each optimizer step the worker prints {"ready": step} and waits for a line on stdin;
after the step it prints {"step": step, "step_s": seconds from the go to the end of the optimizer step,
"step_cpu_s": the process's CPU seconds (all threads) over the same span}. So the parent interleaves TRL's steps with its own, and TRL's
time counts generation, reward, reference pass, loss, backward and AdamW, as its trainer runs them.

The work (WORK.json, written by the parent): "prompts", the token-id prompts (each survives decode ->
encode unchanged, so the text TRL tokenises is the same ids), "group", "new_tokens", "lr", "seed". The
reward is `reward_of` on the completion ids, the same function the parent gives its own step. Settings:
fp32 (bf16=False), no gradient checkpointing (TRL's defaults turn on both), temperature 1, no top-k/p,
exactly `new_tokens` per completion (min_new_tokens), one generation per optimizer step with every
completion in one micro-batch, loss "dapo" (token mean, as ours), k3 KL at `beta`, max_grad_norm 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def reward_of(completion_ids) -> float:
    """The benchmark's reward of one completion: the fraction of even token ids (cheap, deterministic, and
    varied enough that groups get non-zero advantages)."""
    ids = list(completion_ids)
    return sum(1 for t in ids if int(t) % 2 == 0) / max(len(ids), 1)


def _say(obj) -> None:
    print(json.dumps(obj), flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--beta", type=float, default=0.0)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--outdir", required=True)
    args = ap.parse_args(argv)

    import datasets
    import torch
    import transformers
    import trl

    work = json.load(open(args.work))
    tok = transformers.AutoTokenizer.from_pretrained(args.checkpoint)
    texts = [tok.decode(p) for p in work["prompts"]]
    for text, ids in zip(texts, work["prompts"]):
        got = tok(text, add_special_tokens=False)["input_ids"]
        if got != ids:
            sys.exit(f"trl_peer: a prompt does not survive decode -> encode ({len(got)} vs {len(ids)} ids)")
    n_prompts, group = len(texts), int(work["group"])
    # Enough rows that every step sees each prompt once (RepeatSampler draws unique prompts per step).
    data = datasets.Dataset.from_dict({"prompt": texts * (args.steps + 1)})

    def reward(prompts, completions, completion_ids, **kw):
        return [reward_of(c) for c in completion_ids]

    cfg = trl.GRPOConfig(
        output_dir=args.outdir,
        per_device_train_batch_size=n_prompts * group,
        gradient_accumulation_steps=1,
        num_generations=group,
        max_completion_length=int(work["new_tokens"]),
        generation_kwargs={"min_new_tokens": int(work["new_tokens"])},
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        beta=args.beta,
        loss_type="dapo",
        learning_rate=float(work["lr"]),
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        max_steps=args.steps,
        num_train_epochs=1,
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        use_cpu=True,
        logging_steps=10**6,
        save_strategy="no",
        report_to=[],
        seed=int(work["seed"]),
        dataloader_num_workers=0,
        disable_tqdm=True,
        shuffle_dataset=False,
    )
    model = transformers.AutoModelForCausalLM.from_pretrained(args.checkpoint, dtype=torch.float32)
    clock = {}

    class Step(transformers.TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            _say({"ready": state.global_step})
            if not sys.stdin.readline():
                sys.exit(0)  # the parent closed the pipe
            clock["t"], clock["cpu"] = time.perf_counter(), time.process_time()

        def on_step_end(self, a, state, control, **kw):
            wall, cpu = time.perf_counter() - clock["t"], time.process_time() - clock["cpu"]
            _say({"step": state.global_step, "step_s": wall, "step_cpu_s": cpu})

    trainer = trl.GRPOTrainer(
        model=model, reward_funcs=reward, args=cfg, train_dataset=data, processing_class=tok, callbacks=[Step()]
    )
    trainer.train()
    _say({"done": True, "torch_threads": torch.get_num_threads(), "trl_version": trl.__version__})


if __name__ == "__main__":
    main()
