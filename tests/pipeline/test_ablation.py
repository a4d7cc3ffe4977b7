"""The ablation pipeline: every stage end to end on the smoke budget (a few steps each), the report's
contents, resume by DONE markers, and the pieces (config overrides, verdict wording) by hand."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from rcgrpo_jax.pipeline import ablation, budgets, cache, episodes, summary


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("ablation"))
    payload = ablation.run(workdir, budget_name="smoke", seeds=1, quiet=True)
    return workdir, payload


@pytest.mark.slow  # the fast lane skips it (pytest.ini)
def test_end_to_end_smoke(smoke_run):
    workdir, payload = smoke_run
    assert list(payload["runs"]) == [*ablation.ROWS, "SFT", "RCTP-FT"]  # the paper's five rows, then stage 1
    n_test = 4 * 2  # four trained task types x test_per_type=2
    for row, runs in payload["runs"].items():
        assert len(runs) == 1
        s = runs[0]
        assert s["n"] == n_test and set(s["categories"]) == {
            "fs_move",
            "fs_read_then_act",
            "math_chain",
            "fs_count_math",
        }
        assert s["heldout"]["n"] == 2 and 0.0 <= s["overall"] <= 1.0
    for d in ("sft", "rctp_ft") + tuple(f"rl/{i}_{a}_s0" for i in ("sft", "rctp_ft") for a in ("grpo", "rc_grpo")):
        assert os.path.exists(os.path.join(workdir, d, "hf", "config.json")), d
        assert os.path.exists(os.path.join(workdir, d, ablation.DONE)), d
    md = open(os.path.join(workdir, "report.md")).read()
    for row in ablation.ROWS:
        assert f"| {row} |" in md
    assert "## Verdict" in md and "at this scale" in md
    assert (
        "## On the RL tasks themselves" in md and "## What the test episodes did" in md and "| base | 10 |" in md
    )  # every row's profile
    assert payload["plots"], "the RL runs logged none of the diagnostics"
    assert payload["plots"]["entropy_reward_correlation"].endswith("entropy_reward_correlation.png")
    assert "| RCTP-FT+RC-GRPO s0 |" in md.split("## Entropy-reward correlation", 1)[1]
    assert "## RL settings that differ from the paper presets" in md and "lr 1e-06 -> " in md
    assert "## Control pair: RCTP-FT at the paper presets' RL settings" in md and "Zero-variance gap" in md
    assert "- **SFT+RC-GRPO** does not stand for the paper's row" in md
    for row, (init, rl_file) in ablation.CONTROL_ROWS.items():
        assert os.path.exists(os.path.join(workdir, "rl", f"{init}_{rl_file}_control_s0", ablation.DONE)), row
        with open(os.path.join(workdir, "rl", f"{init}_{rl_file}_control_s0", "metrics.jsonl")) as f:
            logged = [json.loads(line) for line in f]
        assert all(-1.0 <= r["entropy_reward_pearson_across_steps"] <= 1.0 for r in logged), row
    for path in payload["plots"].values():
        with open(path, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    with open(os.path.join(workdir, "report.json")) as f:
        written = json.load(f)
    _check_report_json(written, payload)
    # RCTP-FT data: experts and failures 1:1, each with its reward goal; the exploration stage's failed
    # rollouts (the SFT policy's own) joined the generated failures, and the manifest records the mix.
    with open(os.path.join(workdir, "data_explored", "rctp_ft.jsonl")) as f:
        goals = [json.loads(line)["reward_goal"] for line in f]
    assert goals.count("<|high_reward|>") == goals.count("<|low_reward|>") > 0
    with open(os.path.join(workdir, "explore.jsonl")) as f:
        explored = [json.loads(line) for line in f]
    with open(os.path.join(workdir, "data_explored", "manifest.json")) as f:
        manifest = json.load(f)
    assert manifest["failures"].get("exploration", 0) == sum(r["kind"] == "failure" for r in explored) > 0


def _check_report_json(written: dict, payload: dict) -> None:
    """report.json's fields (the issue's list): fractions in [0, 1], means over seeds, per-seed lists."""
    assert written["rows"].keys() == payload["rows"].keys() == {*ablation.ROWS, "SFT", "RCTP-FT"}
    assert written["seeds"] == 1 and written["rl_steps"] == budgets.SMOKE.rl["train.max_steps"]
    assert 0 < written["minutes"] < 60 and written["process_minutes"] <= written["minutes"]
    for name, row in written["rows"].items():
        assert 0.0 <= row["test_overall"] <= 1.0 and row["test_overall_per_seed"] == [row["test_overall"]]
        assert row["test_overall"] == written["runs"][name][0]["overall"]
        assert 0.0 <= row["made_up_argument"] <= 1.0 and 0.0 <= row["failed_with_made_up"] <= 1.0, name
        if name in summary.RL_ROWS:
            assert 0.0 <= row["zero_var_mean"] <= 1.0, name
    s1 = written["stage1"]
    for v in (s1["sft"]["train_success"], s1["rctp_ft"]["train_success_high"], s1["rctp_ft"]["train_success_low"]):
        assert 0.0 <= v <= 1.0
    assert s1["probe_tasks"] == 4 * budgets.SMOKE.probe_per_type
    for name, c in written["comparisons"].items():
        assert len(c["per_seed_diff"]) == 1 and c["bootstrap_ci95"][0] <= c["mean_diff"] <= c["bootstrap_ci95"][1]
    assert set(written["comparisons"]) == {"SFT+RC-GRPO vs SFT+GRPO", "RCTP-FT+RC-GRPO vs RCTP-FT+GRPO"}
    for row in summary.RL_ROWS:  # the smoke world's RL pool: 2 fresh tasks per trained type
        v = written["rl_tasks"][row]
        assert v["tasks"] == 4 * 2 and 0.0 <= v["after"] <= 1.0 and v["after_per_seed"] == [v["after"]]
        assert 0.0 <= v["before"] <= 1.0
    # The RL settings against the paper presets, for the budget's rows and the control pair.
    settings = written["rl_settings"]
    assert set(settings) == {"SFT+GRPO, RCTP-FT+GRPO", "SFT+RC-GRPO, RCTP-FT+RC-GRPO", *ablation.CONTROL_ROWS}
    for label, c in settings.items():
        differs = {d["setting"]: (d["paper"], d["run"]) for d in c["differences"]}
        assert differs["lr"][0] == 1e-6 and differs["pool"][0] == "BFCL v4 multi-turn train split"
        assert differs["steps"][1] == budgets.SMOKE.rl["train.max_steps"] and differs["pool tasks"] == (720, 4 * 2)
        # the smoke rows keep the tiny preset's temperature and KL beta and move G; the control pair moves neither
        assert ("group size G" in differs) == (label not in ablation.CONTROL_ROWS)
        assert label not in ablation.CONTROL_ROWS or not {"temperature", "KL beta", "reward-token mode"} & set(differs)
    assert written["rows"]["SFT+RC-GRPO"]["note"] == summary.ROW_NOTES["SFT+RC-GRPO"]
    control = written["control"]
    assert set(control["rows"]) == set(ablation.CONTROL_ROWS)
    zv = [control["rows"][r]["zero_var_mean"] for r in ablation.CONTROL_ROWS]
    assert all(0.0 <= v <= 1.0 for v in zv) and control["zero_var_gap"] == pytest.approx(zv[0] - zv[1])
    g = written["goals"]
    assert g["a_sft_train_success"]["value"] == s1["sft"]["train_success"]
    rows = written["rows"]
    want = rows["RCTP-FT+GRPO"]["zero_var_mean"] - rows["RCTP-FT+RC-GRPO"]["zero_var_mean"]
    assert g["c_zero_var_drop"]["value"] == pytest.approx(want)


@pytest.mark.slow  # the fast lane skips it (pytest.ini)
def test_rerun_resumes_without_training(smoke_run):
    workdir, payload = smoke_run
    stamps = {
        d: os.path.getmtime(os.path.join(workdir, d, ablation.DONE)) for d in ("sft", "rctp_ft", "rl/sft_grpo_s0")
    }
    again = ablation.run(workdir, budget_name="smoke", seeds=1, quiet=True)
    assert again["table"] == payload["table"]
    assert stamps == {d: os.path.getmtime(os.path.join(workdir, d, ablation.DONE)) for d in stamps}
    # the resumed report counts the first run's stage times, not only its own few seconds
    assert again["timings"]["sft"] == payload["timings"]["sft"] > 0
    assert again["process_minutes"] < again["minutes"] and again["minutes"] >= sum(payload["timings"].values()) / 60


@pytest.mark.slow  # the fast lane skips it (pytest.ini)
def test_a_rerun_with_other_settings_stops_and_keeps_what_is_there(smoke_run, monkeypatch):
    """Cached outputs are reused only for the settings that made them; another budget in the same workdir stops
    with the fields that differ and rewrites nothing."""
    workdir, _ = smoke_run
    dirs = ("base_model", "data_explored", "sft", "rctp_ft", "rl/sft_grpo_s0")
    files = [os.path.join(workdir, d, n) for d in dirs for n in (ablation.DONE, cache.REQUEST_FILE, "config.json")]
    stamps = {f: os.path.getmtime(f) for f in files if os.path.exists(f)}
    assert len(stamps) >= 6
    smoke = budgets.SMOKE
    other_world = dataclasses.replace(smoke, world={**smoke.world, "train_vocab": "wide"})
    monkeypatch.setitem(budgets.BUDGETS, "smoke", other_world)
    with pytest.raises(cache.StaleCacheError, match=r"base checkpoint .*world\.train_vocab: '<unset>' -> 'wide'"):
        ablation.run(workdir, budget_name="smoke", seeds=1, quiet=True)
    # The same stage 1, another RL learning rate: everything up to the first RL row is reused, that row stops.
    other_rl = dataclasses.replace(smoke, rl={**smoke.rl, "optim.lr": 0.123})
    monkeypatch.setitem(budgets.BUDGETS, "smoke", other_rl)
    with pytest.raises(cache.StaleCacheError, match=r"stage in .*rl/sft_grpo_s0.*optim\.lr: .* -> 0\.123"):
        ablation.run(workdir, budget_name="smoke", seeds=1, quiet=True)
    assert stamps == {f: os.path.getmtime(f) for f in stamps}


def test_the_control_pair_runs_at_the_paper_presets_rl_settings():
    """Every budget's control pair puts temperature, KL beta, reward-token mode, p(high) and G back at the
    paper preset's values (read from configs/*.py, not restated here); the budget's own rows move them."""
    with_control = [b for b in budgets.BUDGETS.values() if b.control]
    assert {b.name for b in with_control} == {"reproduce", "smoke"} and not budgets.QUICKSTART.control
    assert budgets.REPRODUCE.rl == budgets.QUICKSTART.rl and budgets.REPRODUCE.world == budgets.QUICKSTART.world
    for b in with_control:
        for rl_file in ("grpo", "rc_grpo"):
            paper = ablation.paper_config(rl_file).rl
            control = ablation.stage_config(rl_file, b, {**b.rl, **b.control}).rl
            keys = lambda r: (r.temperature, r.loss.ppo_clip.kl_beta, r.reward_token_mode, r.p_high, r.group_size)  # noqa: E731
            assert keys(control) == keys(paper), (b.name, rl_file)
    quick = ablation.stage_config("rc_grpo", budgets.QUICKSTART, budgets.QUICKSTART.rl).rl
    assert (quick.temperature, quick.reward_token_mode, quick.group_size) == (0.3, "stratified", 8)
    report = ablation.rl_settings_report(budgets.REPRODUCE)
    rc = {d["setting"]: (d["paper"], d["run"]) for d in report["SFT+RC-GRPO, RCTP-FT+RC-GRPO"]["differences"]}
    assert rc["temperature"] == (1.0, 0.3) and rc["KL beta"] == (0.1, 0.5) and rc["group size G"] == (5, 8)
    assert rc["reward-token mode"] == ("iid", "stratified") and rc["tasks per step"] == (256, 8)
    assert rc["steps"] == (1125, 12) and rc["pool tasks"] == (720, 24) and rc["passes over the pool"] == (400, 4)
    ctl = {d["setting"] for d in report["RCTP-FT+RC-GRPO (paper RL settings)"]["differences"]}
    assert not ctl & {"temperature", "KL beta", "reward-token mode", "p(high)", "group size G"}
    assert {"lr", "steps", "pool"} <= ctl  # the pair keeps the budget's lr, steps and pool


def test_compare_settings_and_control_by_hand(tmp_path):
    paper = {"temperature": 1.0, "KL beta": 0.1, "clip (low, high)": [0.2, 0.2], "reward-token mode": None}
    run = {"temperature": 0.3, "KL beta": 0.1 + 1e-12, "clip (low, high)": [0.2, 0.28], "reward-token mode": None}
    c = summary.compare_settings("configs/x.py", paper, run)
    assert c["differences"] == [
        {"setting": "temperature", "paper": 1.0, "run": 0.3},
        {"setting": "clip (low, high)", "paper": [0.2, 0.2], "run": [0.2, 0.28]},
    ]
    md = "\n".join(summary._settings_md({"rows": c}))
    assert "- **rows** (`configs/x.py`): temperature 1 -> 0.3; clip (low, high) (0.2, 0.2) -> (0.2, 0.28)." in md
    paths = {}
    for name, zv in (("A+GRPO (paper RL settings)", [1.0, 0.5]), ("A+RC-GRPO (paper RL settings)", [0.25, 0.25])):
        paths[name] = str(tmp_path / f"{len(paths)}.jsonl")
        with open(paths[name], "w") as f:
            f.writelines(json.dumps({"step": i + 1, "frac_zero_var_groups": v}) + "\n" for i, v in enumerate(zv))
    evals = {name: [_s(0.5)] for name in paths}
    rows = {"RCTP-FT+GRPO": {"zero_var_mean": 0.9}, "RCTP-FT+RC-GRPO": {"zero_var_mean": 0.5}}
    out = summary.control_payload(evals, {k: [v] for k, v in paths.items()}, rows)
    assert out["rows"]["A+GRPO (paper RL settings)"]["zero_var_mean"] == 0.75
    assert out["zero_var_gap"] == 0.5 and out["budget_zero_var_gap"] == pytest.approx(0.4)
    text = "\n".join(summary._control_md(out))
    assert "| A+GRPO (paper RL settings) | 50.0% | 75.0% |" in text
    assert "+50.0 points at the presets' settings, +40.0 points at the budget's" in text


def test_the_sft_rc_grpo_row_says_it_is_not_the_papers():
    md = "\n".join(
        summary._row_notes_md({"SFT+GRPO": [_s(0.25), _s(0.5)], "SFT+RC-GRPO": [_s(0.0)], "base": [_s(0.1)]})
    )
    assert md.startswith("- **SFT+RC-GRPO** does not stand for the paper's row.")
    assert "never read the `[Reward Goal: ...]` suffix" in md and md.endswith("Here 0.00% against SFT+GRPO's 37.50%.\n")
    assert summary._row_notes_md({"SFT+GRPO": [_s(0.5)]}) == []  # only rows that have a note


def test_stage_seconds_keep_the_run_that_did_the_stage(tmp_path):
    assert ablation.stage_seconds(str(tmp_path), {"sft": 10.0, "rl/a": 5.0}) == {"sft": 10.0, "rl/a": 5.0}
    # a resume: sft skipped (0.1 s), rl/a rerun slower, a new seed; the old "rl/a" time is replaced
    again = ablation.stage_seconds(str(tmp_path), {"sft": 0.1, "rl/a": 6.0, "rl/b": 7.0})
    assert again == {"sft": 10.0, "rl/a": 6.0, "rl/b": 7.0}
    assert ablation.stage_seconds(str(tmp_path), {"sft": 0.2}) == {"sft": 10.0}  # only this run's stages count


def test_budget_devices_reach_every_stage_and_the_command(monkeypatch, tmp_path):
    """The smoke budget runs on a 2-device data mesh: every stage config carries it, the command asks XLA
    for that many host devices, and a run with too few devices stops before training."""
    assert budgets.SMOKE.devices == 2 and budgets.QUICKSTART.devices == 1
    for stage in ("sft", "rctp_ft", "grpo", "rc_grpo", "eval"):
        assert ablation.stage_config(stage, budgets.SMOKE, {}).mesh.data == 2
    assert dict(ablation.stage_mesh(budgets.SMOKE).shape) == {"data": 2, "fsdp": 1, "tensor": 1}
    assert ablation.stage_mesh(dataclasses.replace(budgets.SMOKE, devices=1)) is None
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=8 --xla_other=1")
    ablation.host_devices(2)
    assert os.environ["XLA_FLAGS"] == "--xla_other=1 --xla_force_host_platform_device_count=2"
    ablation.host_devices(1)
    assert os.environ["XLA_FLAGS"] == "--xla_other=1"
    monkeypatch.setitem(budgets.BUDGETS, "smoke", dataclasses.replace(budgets.SMOKE, devices=64))
    with pytest.raises(RuntimeError, match="on 64 XLA devices, but 8 exist"):
        ablation.run(str(tmp_path / "w"), budget_name="smoke", quiet=True)
    assert not os.path.exists(tmp_path / "w")  # nothing written
    with pytest.raises(ValueError, match="devices must be >= 1"):
        dataclasses.replace(budgets.SMOKE, devices=0)


def test_set_dotted_names_missing_fields():
    cfg = ablation.stage_config("sft", budgets.SMOKE, {"train.max_steps": 3})
    assert cfg.train.max_steps == 3 and cfg.data.source == "world" and cfg.data.world.train_per_type == 4
    with pytest.raises(KeyError, match="train.max_stpes"):
        ablation.set_dotted(cfg, {"train.max_stpes": 3})
    with pytest.raises(KeyError, match="trian.max_steps"):
        ablation.set_dotted(cfg, {"trian.max_steps": 3})


def _s(overall: float, n: int = 16) -> dict:
    return {
        "overall": overall,
        "reward_mean": overall,
        "error_kinds": {},
        "heldout": None,
        "n": 4 * n,
        "categories": {c: {"n": n, "accuracy": overall, "reward_mean": overall} for c in "abcd"},
    }


def _episode(first_calls, *results, reward=0.0):
    msgs = [{"role": "user", "content": "q"}]
    msgs.append({"role": "assistant", "content": "" if first_calls else "text", "tool_calls": first_calls})
    msgs += [{"role": "tool", "content": r} for r in results]
    return {"messages": msgs, "reward": reward}


def test_episode_profile_by_hand(tmp_path):
    call = {"function": {"name": "cd", "arguments": {}}, "type": "function"}
    eps = [
        _episode([call, call], "Error: unknown function 'add'; ...", '{"error": "cd: no such folder"}', reward=0.0),
        _episode([], reward=0.0),
        _episode([call], "None", reward=1.0),
        _episode([call], "Error: invalid arguments for cd: missing 'folder'", reward=0.0),
    ]
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"episodes": eps[:2]}))
    b.write_text(json.dumps({"episodes": eps[2:]}))
    p = episodes.episode_profile([str(a), str(b)])  # seeds pooled
    assert p.episodes == 4 and p.first_action_call == 0.75 and p.calls_per_episode == 1.0
    assert p.unknown_function == p.invalid_arguments == p.tool_error == 0.25  # of 4 calls each
    assert p.reward_mean == 0.25
    assert episodes.episode_profile([str(tmp_path / "missing.json")]) is None
    md = "\n".join(
        summary._profiles_md(
            episodes.episode_profiles(
                {"SFT": [str(b)], "SFT+RC-GRPO": [str(a)], "RCTP-FT": [str(tmp_path / "no.json")]}
            ),
            {"SFT+RC-GRPO": {"zero_var_mean": 1.0}},
        )
    )
    assert "| SFT+RC-GRPO | 2 | 50.0% |" in md and "100% of its groups had all-equal rewards" in md
    assert "| RCTP-FT |" not in md  # a row without eval JSONs has no profile
    quiet = "\n".join(
        summary._profiles_md(episodes.episode_profiles({"SFT+GRPO": [str(a)]}), {"SFT+GRPO": {"zero_var_mean": 0.5}})
    )
    assert "all-equal" not in quiet


def _call(name, **arguments):
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def test_made_up_arguments_by_hand(tmp_path):
    ctx = 'Go to "dumu" and add 12 to 3.5.'
    assert not episodes.made_up_argument(_call("cd", folder="dumu"), ctx)
    assert episodes.made_up_argument(_call("cd", folder="dulo"), ctx)  # a miscopied name
    assert not episodes.made_up_argument(_call("add", a=12.0, b=3.5), ctx)  # 12.0 is written "12"
    assert episodes.made_up_argument(_call("add", a=13, b=3.5), ctx)
    assert not episodes.made_up_argument(_call("ls", a=True), ctx)  # flags are not names
    assert not episodes.made_up_argument({"function": {"name": "cd", "arguments": '{"folder": "dumu"}'}}, ctx)
    # An episode: the second call copies a name the first call's tool result wrote; the third makes one up.
    msgs = [
        {"role": "user", "content": ctx},
        {"role": "assistant", "content": "", "tool_calls": [_call("cd", folder="dumu"), _call("cd", folder="ko")]},
        {"role": "tool", "content": '{"files": ["riba.txt"]}'},
        {"role": "assistant", "content": "", "tool_calls": [_call("cat", file_name="riba.txt")]},
        {"role": "tool", "content": "x"},
    ]
    passed = {"messages": msgs[:2] + msgs[2:3], "official_pass": True, "reward": 1.0}  # 1 made-up call of 2
    failed = {"messages": msgs, "official_pass": False, "reward": 0.0}  # 1 of 3
    clean = {"messages": [msgs[0], msgs[3]], "official_pass": False, "reward": 0.0}  # riba.txt not yet written: 1 of 1
    path = tmp_path / "e.json"
    path.write_text(json.dumps({"episodes": [passed, failed, clean]}))
    p = episodes.episode_profile([str(path)])
    assert p.made_up_argument == 3 / 6
    assert p.failed_with_made_up == 1.0  # both failed episodes have one
    md = "\n".join(summary._profiles_md(episodes.episode_profiles({"SFT": [str(path)]}), {}))
    assert "| made-up argument |" in md and "| 50.0% | 0.333 | 100.0% |" in md


def test_verdict_wording_by_hand():
    # One task of 16 in one of 4 categories = 1/64 = 1.5625 points: the smallest difference that counts.
    beat = summary.verdict({"SFT+GRPO": [_s(0.50)], "SFT+RC-GRPO": [_s(0.55)]})
    assert "+5.00 points" in beat and "**RC-GRPO beat GRPO**" in beat and "threshold 1.56" in beat
    tie = summary.verdict({"RCTP-FT+GRPO": [_s(0.50)], "RCTP-FT+RC-GRPO": [_s(0.51)]})
    assert "**no clear difference" in tie
    lose = summary.verdict({"RCTP-FT+GRPO": [_s(0.60)], "RCTP-FT+RC-GRPO": [_s(0.50)]})
    assert "did NOT beat" in lose
    # With seeds, the spread raises the bar: means 0.55 vs 0.50, sample stds 0.0707 each -> 14.14 points.
    noisy = summary.verdict({"SFT+GRPO": [_s(0.45), _s(0.55)], "SFT+RC-GRPO": [_s(0.50), _s(0.60)]})
    assert "2 seeds" in noisy and "threshold 14.14" in noisy and "no clear difference" in noisy


def test_console_eta_rescales_by_measured_speed(capsys):
    c = ablation.Console([("a", 10.0), ("b", 30.0)])
    t = c.start("a")
    c.t0 -= 20.0  # pretend stage a took 20 s instead of the planned 10: the run is 2x slower than planned
    c.end("a", t)
    c.start("b")
    out = capsys.readouterr().out
    assert "[1/2] a" in out and "ETA ~0m40s" in out  # first ETA: the plan as is
    assert "[2/2] b" in out and "ETA ~1m00s" in out  # 30 s planned x 2


@pytest.mark.slow  # the fast lane skips it (pytest.ini)
def test_awpo_ablation_smoke_run_trains_its_own_qwen3_stage_1_and_writes_its_report(smoke_run):
    """AWPO's Table 4 in miniature on a tiny Qwen3 of its own, beside the RC-GRPO ablation's stage 1 in the
    same workdir (whose SFT is not trained again; the data files are shared)."""
    from rcgrpo_jax.pipeline import awpo_ablation

    workdir, _ = smoke_run
    sft_done = os.path.getmtime(os.path.join(workdir, "sft", ablation.DONE))
    payload = awpo_ablation.run(workdir, budget_name="smoke", quiet=True)
    assert os.path.getmtime(os.path.join(workdir, "sft", ablation.DONE)) == sft_done
    for d in (awpo_ablation.BASE_DIR, os.path.join(awpo_ablation.SFT_DIR, "hf"), "rl/awpo_row2_s0/hf"):
        with open(os.path.join(workdir, d, "config.json")) as f:
            hf = json.load(f)
        assert hf["model_type"] == "qwen3" and hf["architectures"] == ["Qwen3ForCausalLM"], d
        assert hf["head_dim"] != hf["hidden_size"] // hf["num_attention_heads"], d
    with open(os.path.join(workdir, "sft", "hf", "config.json")) as f:
        assert json.load(f)["model_type"] == budgets.SMOKE.arch  # the RC-GRPO ablation's own stage 1, untouched
    assert list(payload["rows"]) == ["SFT", *awpo_ablation.ROWS]
    for r in payload["rows"].values():
        assert 0.0 <= r["test_overall"] <= 1.0 and len(r["per_seed"]) == 1
    awpo = payload["diagnostics"]["AWPO"]
    assert 0.0 <= awpo["estimator/gate_open_frac"] <= 1.0 and awpo["judge_score_mean"] is not None
    assert awpo["judge/failures"] == 0  # the rule judge never fails
    assert payload["diagnostics"]["GRPO"]["estimator/gate_open_frac"] is None  # GRPO has no gate, no judge
    md = open(os.path.join(workdir, "awpo_report.md")).read()
    assert all(f"| {row} |" in md for row in awpo_ablation.ROWS) and "stand-in" in md and "tiny qwen3" in md
    with open(os.path.join(workdir, "awpo_report.json")) as f:
        assert json.load(f)["rows"].keys() == payload["rows"].keys()
    assert payload["plots"] and all(open(p, "rb").read(8) == b"\x89PNG\r\n\x1a\n" for p in payload["plots"].values())


def test_no_expert_step_of_the_world_makes_up_an_argument(tmp_path):
    # The report's claim under its episode table: the world's expert calls copy every name and number from
    # a user or tool message before them, so a made-up argument is the policy's own.
    from rcgrpo_jax.data import sources, trajectories

    train, test = sources._world(0, 4, 2)
    records = [trajectories.expert_trajectory(t) for t in train + test]
    path = tmp_path / "expert.json"
    path.write_text(json.dumps({"episodes": [{**r, "official_pass": True} for r in records]}))
    p = episodes.episode_profile([str(path)])
    assert p.episodes == len(records) > 0 and p.calls_per_episode > 1
    assert p.made_up_argument == 0.0
