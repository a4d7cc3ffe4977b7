"""A user's own group filter, reward shaping, KL estimator and reward (`tests/helpers/my_entries.py`), each
selected on the command line as `module:name`: the start-up check imports the module and accepts the entry, the
run's code calls it, and a module that does not import or an entry it does not register fails at start-up
naming the field. (`tests/test_main.py` runs all four through one RL step.)"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rcgrpo_jax import main
from rcgrpo_jax.config_fields import ConfigError
from rcgrpo_jax.data import sources
from rcgrpo_jax.rl import losses
from rcgrpo_jax.rollout.episode import Episode
from rcgrpo_jax.train import rl_config
from rcgrpo_jax.train import rl_trainer as rl_trainer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRPO = os.path.join(REPO, "configs", "grpo.py")
MOD = "tests.helpers.my_entries"


def _config(*overrides: str):
    """configs/grpo.py:tiny with command-line overrides, passed through the start-up check."""
    config = main.parse_config(["main", f"--config={GRPO}:tiny", *(f"--config.{o}" for o in overrides)])
    rl_config.check(config, 1)
    return config


def _episode(sampled: int) -> Episode:
    e = Episode(task_id="t", group=0, rollout_index=0, reward_token=None, render_mode="append")
    e.add_context([7] * 5)
    if sampled:
        e.add_sampled([8] * sampled, [-0.5] * sampled)
    return e


def test_a_users_group_filter_and_shaping_run_in_the_trainers_phase():
    config = _config(f"rl.group_filter.name={MOD}:unsolved_groups", f"rl.shaping.name={MOD}:sampled_token_cost")
    chosen = rl_config.choices(config)
    assert (chosen.group_filter, chosen.shaping) == ("unsolved_groups", "sampled_token_cost")
    # N = 2 groups of G = 2. Sampled tokens 0, 0 | 10, 0 cost 0.01 each: rewards 1, 1 | 1, 0 -> 1, 1 | 0.9, 0;
    # group means 1 and 0.45, so the filter drops the first group (every rollout succeeded).
    rewards = np.array([[1.0, 1.0], [1.0, 0.0]], np.float32)
    episodes = [_episode(n) for n in (0, 0, 10, 0)]
    shaped, keep, metrics = rl_trainer.shape_and_filter(rewards, episodes, chosen, config.rl)
    np.testing.assert_allclose(shaped, [[1.0, 1.0], [0.9, 0.0]], rtol=1e-6)
    np.testing.assert_array_equal(keep, [False, True])
    assert metrics == pytest.approx({"token_cost_mean": 0.025, "solved_groups": 1.0})


def test_a_users_kl_estimator_runs_in_the_loss():
    config = _config(f"rl.loss.ppo_clip.kl_estimator={MOD}:abs_log_ratio")
    chosen = rl_config.choices(config)
    assert chosen.loss_options.kl_estimator == f"{MOD}:abs_log_ratio" and chosen.loss_options.kl_beta == 0.1
    logp, ref = jnp.array([[-1.0, -2.0]]), jnp.array([[-1.5, -1.0]])

    def loss(lp):
        return losses.get(chosen.loss)(lp, lp, ref, jnp.zeros((1,)), jnp.ones((1, 2)), config=chosen.loss_options)

    for fn in (loss, jax.jit(loss)):
        loss_sum, denominator, metrics = fn(logp)
        # kl = |logp - ref| = 0.5, 1 (mean 0.75); advantages 0, so the loss is 0.1 x the token-mean KL
        np.testing.assert_allclose(metrics["kl"], 0.75, rtol=1e-6)
        np.testing.assert_allclose(loss_sum / denominator, 0.075, rtol=1e-6)


def test_a_users_loss_aggregation_runs_in_the_loss():
    config = _config(f"rl.loss.ppo_clip.agg_mode={MOD}:per_row_cap", "rl.loss.ppo_clip.kl_beta=0.0")
    chosen = rl_config.choices(config)
    logp = jnp.array([[-1.0, -2.0, -0.5, 0.0]])
    adv, mask = jnp.array([2.0]), jnp.array([[1.0, 1.0, 0.0, 0.0]])
    loss_sum, denominator, _ = losses.get(chosen.loss)(logp, logp, None, adv, mask, config=chosen.loss_options)
    # ratio 1, clipped surrogate -A per masked token: -2 - 2 = -4, over a fixed 1 x 4 denominator
    np.testing.assert_allclose([loss_sum, denominator], [-4.0, 4.0], rtol=1e-6)


def test_a_users_reward_scores_the_runs_episodes():
    config = _config(f"rl.reward={MOD}:any_call")
    task = sources.tasks(config.data, "rl")[0]
    env = sources.make_env(config.data, task, sources.rl_env_config(config.data, config.rl))
    env.reset()
    assert env.reward() == 0.0  # no call yet
    first_call = sources.expert(config.data, task)[0][0][0]
    env.step([first_call])
    assert env.reward() == 1.0


@pytest.mark.parametrize(
    "override, field",
    [
        ("rl.group_filter.name={}", "rl.group_filter.name"),
        ("rl.shaping.name={}", "rl.shaping.name"),
        ("rl.loss.ppo_clip.kl_estimator={}", "rl.loss.ppo_clip.kl_estimator"),
        ("rl.reward={}", "rl.reward"),
    ],
)
@pytest.mark.parametrize("name", ["no_such_module_here:entry", f"{MOD}:no_such_entry"])
def test_a_bad_module_or_entry_fails_at_start_up_naming_the_field(override, field, name):
    with pytest.raises(ConfigError) as e:
        _config(override.format(name))
    assert e.value.field == field and name.split(":")[0 if "no_such_module" in name else 1] in str(e.value)


_SUBPROCESS = """
import json, sys
import numpy as np
from rcgrpo_jax import main
from rcgrpo_jax.registry import selected
from rcgrpo_jax.rl import advantages
from rcgrpo_jax.train import rl_config
config = main.parse_config(sys.argv)
rl_config.check(config, 1)  # the start-up check validates the entry's options
name, options = selected(advantages.REGISTRY, config.rl.advantage)
adv, _ = advantages.get(name)(np.array([[0.0, 1.0]], np.float32), config=options)
print(json.dumps({"name": name, "scale": options.scale, "adv": np.asarray(adv).tolist()}))
"""


def _run_launcher_parse(*overrides: str):
    import subprocess
    import sys

    argv = ["main", f"--config={GRPO}:tiny", *(f"--config.{o}" for o in overrides)]
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=REPO)
    return subprocess.run(
        [sys.executable, "-c", _SUBPROCESS, *argv[1:]], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
def test_a_user_entry_takes_command_line_options():
    """In a fresh process (the module imported by nobody else): the launcher imports the module named in a
    `module:entry` override before it builds the config, so the entry's option subsection exists and the
    command line sets it; the selected estimator runs with it (GRPO's [-1, 1] scaled by 2.5). A bad value
    fails its check, and so does an option the entry does not have."""
    mod = "tests.helpers.user_estimator"
    run = _run_launcher_parse(f"rl.advantage.name={mod}:scaled_grpo", "rl.advantage.scaled_grpo.scale=2.5")
    assert run.returncode == 0, run.stderr[-3000:]
    got = __import__("json").loads(run.stdout.strip().splitlines()[-1])
    assert got["name"] == "scaled_grpo" and got["scale"] == 2.5
    np.testing.assert_allclose(got["adv"], [[-2.5, 2.5]], rtol=1e-5)
    bad = _run_launcher_parse(f"rl.advantage.name={mod}:scaled_grpo", "rl.advantage.scaled_grpo.scale=-1")
    assert bad.returncode != 0 and "scale: must be > 0" in bad.stderr
    typo = _run_launcher_parse(f"rl.advantage.name={mod}:scaled_grpo", "rl.advantage.scaled_grpo.scael=2")
    assert typo.returncode != 0 and "scael" in typo.stderr


def test_a_user_module_that_does_not_import_names_its_field():
    with pytest.raises(ConfigError, match="rl.advantage.name.*no_such_module_xyz"):
        main.import_user_modules(["main", "--config.rl.advantage.name=no_such_module_xyz:est"])
    assert main.import_user_modules(["main", "--config=configs/grpo.py:tiny", "--config.rl.group_size=4"]) == []
