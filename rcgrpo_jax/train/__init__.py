"""Training: the train state and guarded update (state), AdamW + warmup/cosine (optim), orbax
checkpoints and the SIGTERM guard (checkpoint), metrics/progress/non-finite guard (logging), and the
SFT / RCTP-FT trainer (sft). state, optim, checkpoint and logging are shared with the RL trainer."""
