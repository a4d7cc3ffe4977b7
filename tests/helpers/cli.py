"""Command-line overrides shared by the tests that run a stage through `rcgrpo_jax.main`."""

# One RL step of 2 world tasks x 2 rollouts with short steps: the smallest run that exercises every phase.
SMALL = [
    "--config.rl.group_size=2",
    "--config.train.batch_size=4",
    "--config.train.grad_accum=2",
    "--config.rl.num_minibatches=1",
    "--config.train.max_steps=1",
    "--config.rl.max_step_tokens=8",
    "--config.log.progress=False",
    "--config.log.tensorboard=False",
    "--config.checkpoint.export_hf=False",
]
