"""Helpers shared by several test modules (import them as `tests.helpers.<module>`; pytest.ini puts the
repository root on sys.path). Fixtures stay in the conftest.py files; what lives here is plain code:

- `numerics`: tree comparisons with tolerances scaled to the magnitudes compared;
- `official_templates`: the chat templates shipped inside bfcl-eval, read from the installed package;
- `fake_env`: `AdderEnv`, a tiny deterministic tool environment for the rollout engine;
- `hf_models`: tiny random HF checkpoints (torch, CPU) and their logits, the parity oracle;
- `hf_sampling`: HF's greedy generation and full-forward log-probs, the sampler's oracle;
- `cli`: the smallest RL run's command-line overrides;
- `train`: configs and data of the SFT and RL trainer tests;
- `toy_source`: a task source registered from outside the package (`tests/test_toy_environment.py`);
- `pick_source`: a one-step task source and a policy that solves it about a third of the time (the RL-learns test);
- `multihost_launch`, `multihost_worker`: the two-process `jax.distributed` runs on localhost.
"""
