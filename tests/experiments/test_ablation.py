"""The ablation pipeline: every stage end to end on the smoke budget (a few steps each), the report's
contents, resume by DONE markers, and the pieces (config overrides, verdict wording) by hand."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from experiments import ablation, budgets, cache, episodes, summary


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("ablation"))
    payload = ablation.run(workdir, budget_name="smoke", seeds=1, quiet=True)
    return workdir, payload


@pytest.mark.slow  # the fast lane skips it (pytest.ini)
def test_end_to_end_smoke(smoke_run):
    workdir, payload = smoke_run
    assert list(payload["runs"]) == [*ablation.ROWS, "SFT", "RCTP-FT"]  # the paper's five rows, then stage 1
    n_iid = 4 * budgets.SMOKE.world["iid_test_per_type"]  # the headline split: i.i.d. with training
    for row, runs in payload["runs"].items():
        assert len(runs) == 1
        s = runs[0]
        assert s["n"] == n_iid and set(s["categories"]) == {
            "fs_move",
            "fs_read_then_act",
            "math_chain",
            "fs_count_math",
        }
        assert s["heldout"] is None and 0.0 <= s["overall"] <= 1.0  # no held-out composition in the i.i.d. split
    # The world's base: pretrained once under workdir/base (no seed builds a random one of its own), and its probe
    # (greedy and pass@k on dev and the i.i.d. test) is cached beside it.
    assert os.path.exists(os.path.join(workdir, "base", "pretrain", "hf", "config.json"))
    assert not os.path.exists(os.path.join(workdir, "s0", "base_model"))
    assert set(payload["base_probe"]) == {"dev_greedy", "dev_passk", "iid_greedy", "iid_passk", "dev_profile"}
    assert "## The base model (pretrained once" in open(os.path.join(workdir, "report.md")).read()
    for name in ("dev", "dev_passk", "iid", "iid_passk"):
        assert os.path.exists(os.path.join(workdir, "base", "eval", f"{name}.json")), name
    explored = [json.loads(line) for line in open(os.path.join(workdir, "s0", "explore.jsonl"))]
    assert all("Reward Goal" not in str(r["messages"][0:2]) for r in explored)  # the base explores, knowing no token
    s0 = os.path.join(workdir, "s0")
    runs = ("sft", "rctp_ft") + tuple(f"rl/{i}_{a}_main" for i in ("sft", "rctp_ft") for a in ("grpo", "rc_grpo"))
    for d in runs + ("rl/rctp_ft_rc_grpo_shuffled", "rl/rctp_ft_rc_grpo_lr0"):
        assert os.path.exists(os.path.join(s0, d, "hf", "config.json")), d
        assert os.path.exists(os.path.join(s0, d, ablation.DONE)), d
    md = open(os.path.join(workdir, "report.md")).read()
    for row in ablation.ROWS:
        assert f"| {row} |" in md
    assert "## Verdict" in md and "at this scale" in md
    assert "## Out of distribution" in md and "## Stage 1: what sampling finds" in md and "## Controls (seed 0)" in md
    pre = payload["prerequisites"]  # measured before RL: each init's 'dev' greedy and pass@k, cached per seed
    assert set(pre["rows"]) == {"SFT", "RCTP-FT"} and "## Prerequisites before RL" in md
    for name in ("sft", "rctp_ft"):
        for f in (f"{name}_dev.json", f"{name}_dev_passk.json"):
            assert os.path.exists(os.path.join(s0, "eval", f)), f
    assert all(v["spread"] is None and len(v["dev_gap_per_seed"]) == 1 for v in pre["rows"].values())  # one seed
    assert "## What the test episodes did" in md and f"| base | {n_iid} |" in md  # every row's profile
    assert payload["plots"], "the RL runs logged none of the diagnostics"
    assert payload["plots"]["entropy_reward_correlation"].endswith("entropy_reward_correlation.png")
    assert payload["plots"]["heldout/accuracy"].endswith("heldout_accuracy.png")  # the held-out curve
    assert "| RCTP-FT+RC-GRPO s0 |" in md.split("## Entropy-reward correlation", 1)[1]
    assert "## RL settings that differ from the paper presets" in md and "lr 1e-06 -> " in md
    assert "- **SFT+RC-GRPO** starts from an SFT policy that was never taught" in md
    for path in payload["plots"].values():
        with open(path, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    with open(os.path.join(workdir, "report.json")) as f:
        written = json.load(f)
    _check_report_json(written, payload)
    # The held-out curve: 'dev' accuracy logged at every step (heldout.every=1) and after the last one.
    with open(os.path.join(s0, "rl", "rctp_ft_rc_grpo_main", "metrics.jsonl")) as f:
        logged = [json.loads(line) for line in f]
    assert all(0.0 <= r["heldout/accuracy"] <= 1.0 for r in logged) and "heldout/final_accuracy" in logged[-1]
    # SFT data: every expert carries the reward-goal slot, its token drawn at random; RCTP-FT data: experts and
    # failures 1:1; the exploration stage's failed rollouts (the SFT policy's own) joined the generated failures.
    with open(os.path.join(s0, "data", "sft.jsonl")) as f:
        sft = [json.loads(line) for line in f]
    assert all("[Reward Goal: " in r["messages"][1]["content"] or "[Reward Goal: " in r["messages"][0]["content"]
               for r in sft)  # fmt: skip
    with open(os.path.join(s0, "data_explored", "rctp_ft.jsonl")) as f:
        goals = [json.loads(line)["reward_goal"] for line in f]
    assert goals.count("<|high_reward|>") == goals.count("<|low_reward|>") > 0
    with open(os.path.join(s0, "explore.jsonl")) as f:
        explored = [json.loads(line) for line in f]
    with open(os.path.join(s0, "data_explored", "manifest.json")) as f:
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
        assert 0.0 <= written["ood"][name]["overall"] <= 1.0, name  # the out-of-distribution column
    s1 = written["stage1"]
    for v in (s1["sft"]["train_success"], s1["rctp_ft"]["train_success_high"], s1["rctp_ft"]["train_success_low"]):
        assert 0.0 <= v <= 1.0
    assert s1["probe_tasks"] == 4 * budgets.SMOKE.probe_per_type
    for row in ("SFT", "RCTP-FT"):
        k = written["passk"][row]
        assert k["k"] == budgets.SMOKE.passk["k"] and k["tasks"] == 4 * budgets.SMOKE.passk["per_type"]
        assert 0.0 <= k["pass_at_1"] <= k["pass_at_k"] <= 1.0
    for name, c in written["comparisons"].items():
        assert len(c["per_seed_diff"]) == 1 and c["bootstrap_ci95"][0] <= c["mean_diff"] <= c["bootstrap_ci95"][1]
    assert set(written["comparisons"]) == {
        "SFT+RC-GRPO vs SFT+GRPO",
        "RCTP-FT+RC-GRPO vs RCTP-FT+GRPO",
        *(f"{r} vs {r.split('+')[0]}" for r in summary.RL_ROWS),
    }
    settings = written["rl_settings"]
    labels = [ablation.CONTROL_ROWS[c][0] for c in budgets.SMOKE.controls]
    assert set(settings) == {"SFT+GRPO, RCTP-FT+GRPO", "SFT+RC-GRPO, RCTP-FT+RC-GRPO", *labels}
    for label, c in settings.items():
        differs = {d["setting"]: (d["paper"], d["run"]) for d in c["differences"]}
        assert differs["lr"][0] == 1e-6 and differs["pool"][0] == "BFCL v4 multi-turn train split"
    assert written["rows"]["SFT+RC-GRPO"]["note"] == summary.ROW_NOTES["SFT+RC-GRPO"]
    control = written["control"]["rows"]
    assert set(control) == set(labels)
    lr0 = control["RCTP-FT+RC-GRPO, lr 0"]
    assert lr0["identical_to_init"] and lr0["test_overall"] == lr0["init_overall"]  # lr 0 hands back its init
    assert lr0["vs_init"]["mean_diff"] == 0.0
    g = written["goals"]
    assert g["a_sft_train_success"]["value"] == s1["sft"]["train_success"]
    rows = written["rows"]
    want = rows["RCTP-FT+GRPO"]["zero_var_mean"] - rows["RCTP-FT+RC-GRPO"]["zero_var_mean"]
    assert g["c_zero_var_drop"]["value"] == pytest.approx(want)


@pytest.mark.slow  # the fast lane skips it (pytest.ini)
def test_rerun_resumes_without_training(smoke_run):
    workdir, payload = smoke_run
    dirs = ("s0/sft", "s0/rctp_ft", "s0/rl/sft_grpo_main")
    stamps = {d: os.path.getmtime(os.path.join(workdir, d, ablation.DONE)) for d in dirs}
    again = ablation.run(workdir, budget_name="smoke", seeds=1, quiet=True)
    assert again["table"] == payload["table"]
    assert stamps == {d: os.path.getmtime(os.path.join(workdir, d, ablation.DONE)) for d in stamps}
    # the resumed report counts the first run's stage times, not only its own few seconds
    assert again["timings"]["sft_s0"] == payload["timings"]["sft_s0"] > 0
    assert again["process_minutes"] < again["minutes"] and again["minutes"] >= sum(payload["timings"].values()) / 60


@pytest.mark.slow  # the fast lane skips it (pytest.ini)
def test_a_rerun_with_other_settings_stops_and_keeps_what_is_there(smoke_run, monkeypatch):
    """Cached outputs are reused only for the settings that made them; another budget in the same workdir stops
    with the fields that differ and rewrites nothing."""
    workdir, _ = smoke_run
    dirs = ("base/base_model", "base/corpus", "base/pretrain", "s0/data_explored", "s0/sft", "s0/rctp_ft")
    dirs += ("s0/rl/sft_grpo_main",)
    files = [os.path.join(workdir, d, n) for d in dirs for n in (ablation.DONE, cache.REQUEST_FILE, "config.json")]
    stamps = {f: os.path.getmtime(f) for f in files if os.path.exists(f)}
    assert len(stamps) >= 8
    smoke = budgets.SMOKE
    other_world = dataclasses.replace(smoke, world={**smoke.world, "train_vocab": "wide"})
    monkeypatch.setitem(budgets.BUDGETS, "smoke", other_world)
    with pytest.raises(cache.StaleCacheError, match=r"base checkpoint .*world\.train_vocab: 'coded' -> 'wide'"):
        ablation.run(workdir, budget_name="smoke", seeds=1, quiet=True)
    # The same world, another pretraining corpus: the world's base stops before anything trains.
    other_corpus = dataclasses.replace(smoke, pretrain_corpus={"failure_share": 0.25})
    monkeypatch.setitem(budgets.BUDGETS, "smoke", other_corpus)
    with pytest.raises(cache.StaleCacheError, match=r"pretraining corpus .*corpus\.failure_share: 0\.5 -> 0\.25"):
        ablation.run(workdir, budget_name="smoke", seeds=1, quiet=True)
    # The same stage 1, another RL learning rate: everything up to the first RL row is reused, that row stops.
    other_rl = dataclasses.replace(smoke, rl={**smoke.rl, "optim.lr": 0.123})
    monkeypatch.setitem(budgets.BUDGETS, "smoke", other_rl)
    with pytest.raises(cache.StaleCacheError, match=r"stage in .*rl/sft_grpo_main.*optim\.lr: .* -> 0\.123"):
        ablation.run(workdir, budget_name="smoke", seeds=1, quiet=True)
    assert stamps == {f: os.path.getmtime(f) for f in stamps}


@pytest.mark.slow  # the fast lane skips it (pytest.ini)
def test_formulas_add_the_dr_grpo_and_rloo_rows_with_their_paired_intervals(smoke_run):
    """`--formulas` on a finished smoke run: only the two formula rows train (RCTP-FT+GRPO's run is reused), each
    keyed by its estimator, and they reach report.json (rows, runs, comparisons, settings) and report.md's section."""
    workdir, _ = smoke_run
    s0 = os.path.join(workdir, "s0")
    main_done = os.path.join(s0, "rl", "rctp_ft_grpo_main", ablation.DONE)
    stamp = os.path.getmtime(main_done)
    out = ablation.run(workdir, budget_name="smoke", seeds=1, quiet=True, formulas=True)
    assert os.path.getmtime(main_done) == stamp
    labels = [label for label, *_ in ablation.FORMULA_ROWS.values()]
    assert labels == ["RCTP-FT+GRPO, dr_grpo advantages", "RCTP-FT+GRPO, rloo advantages"]
    assert list(out["runs"]) == [*ablation.ROWS, "SFT", "RCTP-FT", *labels]
    with open(main_done) as f:
        main_request = json.load(f)["request"]
    with open(os.path.join(workdir, "report.json")) as f:
        written = json.load(f)
    md = open(os.path.join(workdir, "report.md")).read()
    section = md.split("## Advantage formulas side by side (`--formulas`)", 1)[1].split("\n## ", 1)[0]
    for name, label in zip(ablation.FORMULA_ROWS, labels):
        with open(os.path.join(s0, "rl", f"rctp_ft_grpo_{name}", ablation.DONE)) as f:
            request = json.load(f)["request"]
        assert cache.differences(main_request, request) == [f"rl.advantage.name: 'grpo' -> '{name}'"]
        row = written["rows"][label]
        assert 0.0 <= row["test_overall"] <= 1.0 and 0.0 <= row["zero_var_mean"] <= 1.0
        assert row["test_overall"] == written["runs"][label][0]["overall"]
        for other in ("RCTP-FT", ablation.FORMULA_OF):
            c = written["comparisons"][f"{label} vs {other}"]
            assert c["bootstrap_ci95"][0] <= c["mean_diff"] <= c["bootstrap_ci95"][1] and len(c["per_seed_diff"]) == 1
            assert f"**{label} vs {other}**" in md
        differs = {d["setting"]: d["run"] for d in written["rl_settings"][label]["differences"]}
        assert differs["estimator"] == name
        assert f"| {label} | {row['test_overall'] * 100:.1f}% | " in section and f"| {ablation.FORMULA_OF}: " in section
    assert f"| {ablation.FORMULA_OF} | " in section and "| RCTP-FT |" in section  # beside the row it varies


def test_every_rl_row_runs_at_the_paper_presets_rl_settings():
    """The quickstart's RL rows keep temperature, KL beta, reward-token mode, p(high), clip and G at the paper
    preset's values (read from configs/*.py, not restated here), with a warmup, a floor under the learning rate,
    >= 60 optimizer updates and a pool seen about once; the controls differ from the rows by their own switch."""
    b = budgets.QUICKSTART
    assert b.rctp_init == "base" and b.sft_reward_slot == "random" and b.explore  # stage 1 as the paper runs it
    for rl_file in ("grpo", "rc_grpo"):
        paper = ablation.paper_config(rl_file)
        cfg = ablation.stage_config(rl_file, b, b.rl)

        def keys(c):
            r = c.rl
            return (r.temperature, r.loss.ppo_clip.kl_beta, r.reward_token_mode, r.p_high, r.group_size,
                    r.loss.ppo_clip.eps_low, r.loss.ppo_clip.eps_high)  # fmt: skip

        assert keys(cfg) == keys(paper), rl_file
        assert cfg.optim.warmup_ratio > 0 and cfg.optim.end_lr_ratio > 0
        assert cfg.train.max_steps * cfg.rl.num_minibatches * cfg.rl.ppo_epochs >= 60
        tasks = cfg.train.batch_size // cfg.rl.group_size
        pool = len(ablation.sources.tasks(cfg.data, "rl"))
        assert cfg.train.max_steps * tasks == pool  # every pool task seen once
    report = ablation.rl_settings_report(budgets.REPRODUCE)
    rc = {d["setting"] for d in report["SFT+RC-GRPO, RCTP-FT+RC-GRPO"]["differences"]}
    assert not rc & {"temperature", "KL beta", "reward-token mode", "p(high)", "group size G", "clip (low, high)"}
    assert budgets.REPRODUCE.rl == budgets.QUICKSTART.rl and budgets.REPRODUCE.world == budgets.QUICKSTART.world
    shuffled = ablation.stage_config("rc_grpo", b, {**b.rl, **ablation.CONTROL_ROWS["shuffled"][3]})
    assert shuffled.rl.shuffle_advantages and not ablation.stage_config("rc_grpo", b, b.rl).rl.shuffle_advantages
    assert ablation.stage_config("rc_grpo", b, {**b.rl, **ablation.CONTROL_ROWS["lr0"][3]}).optim.lr == 0.0


def test_formula_rows_are_rctp_ft_grpo_with_another_estimator_and_nothing_else(tmp_path):
    """The formula rows differ from RCTP-FT+GRPO only in rl.advantage.name (the budget's RL settings as every row),
    run only with `formulas`, and go with the command's flag."""
    for b in (budgets.REPRODUCE, budgets.SMOKE):
        assert list(ablation.rl_runs(b)) == list(ablation.RL_RUNS)
        runs = ablation.rl_runs(b, formulas=True)
        init, rl_file, overrides, tag = runs[ablation.FORMULA_OF]
        reference = cache.config_request(ablation.stage_config(rl_file, b, overrides))
        for name, (label, *_) in ablation.FORMULA_ROWS.items():
            f_init, f_file, f_overrides, f_tag = runs[label]
            assert (f_init, f_file, tag, f_tag) == (init, rl_file, "main", name) and label.split("+")[0] == "RCTP-FT"
            config = ablation.stage_config(f_file, b, f_overrides)
            assert cache.differences(reference, cache.config_request(config)) == [
                f"rl.advantage.name: 'grpo' -> '{name}'"
            ]
            assert ablation.rl_config.choices(config).estimator == name
        plan = [stage for stage, _ in ablation.plan_of(b, 3, formulas=True)]
        assert all(f"{label} seed {s}" in plan for label, *_ in ablation.FORMULA_ROWS.values() for s in range(3))
    plain = [stage for stage, _ in ablation.plan_of(budgets.SMOKE, 1)]
    assert not any(stage.startswith(label) for label, *_ in ablation.FORMULA_ROWS.values() for stage in plain)
    with pytest.raises(SystemExit):
        ablation.main(["--formulas", "--base_only", "--workdir", str(tmp_path)])


def test_formula_section_by_hand(tmp_path):
    def eval_file(name, passes):
        path = tmp_path / f"{name}.json"
        eps = [{"id": f"t{i}", "category": "ab"[i % 2], "official_pass": p} for i, p in enumerate(passes)]
        path.write_text(json.dumps({"episodes": eps}))
        return str(path)

    label = "RCTP-FT+GRPO, rloo advantages"
    paths = {
        "RCTP-FT": [eval_file("init", [True, False, True, False])],  # 0.5
        "RCTP-FT+GRPO": [eval_file("grpo", [True, False, True, False])],  # 0.5
        label: [eval_file("rloo", [True, True, True, False])],  # a 2/2, b 1/2: 0.75
    }
    evals = {"RCTP-FT": [_s(0.5)], "RCTP-FT+GRPO": [_s(0.5)], label: [_s(0.75)]}
    formulas = {label: "RCTP-FT+GRPO"}
    results = summary.results_payload(evals, paths, {}, {}, formulas=formulas)
    assert set(results["comparisons"]) == {"RCTP-FT+GRPO vs RCTP-FT", f"{label} vs RCTP-FT", f"{label} vs RCTP-FT+GRPO"}
    c = results["comparisons"][f"{label} vs RCTP-FT+GRPO"]
    assert c["mean_diff"] == pytest.approx(0.25) and c["per_seed_diff"] == (pytest.approx(0.25),)
    assert results["rows"][label]["zero_var_per_seed"] == []  # an RL row: its zero-variance share is reported
    text = "\n".join(summary._formulas_md(results, evals, formulas))
    lo, hi = (x * 100 for x in c["bootstrap_ci95"])
    assert f"| {label} | 75.0% | +25.0 [" in text and f"| RCTP-FT+GRPO: +25.0 [{lo:+.1f}, {hi:+.1f}] | - |" in text
    assert "| RCTP-FT+GRPO | 50.0% | +0.0 [+0.0, +0.0] | - | - |" in text
    assert summary._formulas_md(results, evals, {}) == []


def test_prerequisites_by_hand():
    """Stage 1's sample std over seeds, 'dev' pass@k - greedy (mean over seeds) against their bars, and RCTP-FT
    under the high token against SFT on the train probe."""
    stage1 = {"SFT": [_s(0.40), _s(0.44)], "RCTP-FT": [_s(0.50), _s(0.60)]}  # std 2.83 and 7.07 points
    gaps = {
        "SFT": [{"greedy": 0.40, "pass_at_k": 0.50, "k": 8}, {"greedy": 0.30, "pass_at_k": 0.50, "k": 8}],  # +15
        "RCTP-FT": [{"greedy": 0.50, "pass_at_k": 0.55, "k": 8}, {"greedy": 0.60, "pass_at_k": 0.65, "k": 8}],  # +5
    }
    probe = {"sft": {"overall": 0.4}, "rctp_ft_high": {"overall": 0.7}}
    pre = summary.prerequisites(stage1, gaps, probe)
    assert pre["rows"]["SFT"]["spread"] == pytest.approx(0.04 / 2**0.5)
    assert pre["rows"]["RCTP-FT"]["spread"] == pytest.approx(0.1 / 2**0.5)
    assert pre["rows"]["SFT"]["dev_gap"] == pytest.approx(0.15) and pre["rows"]["RCTP-FT"]["dev_gap"] == pytest.approx(
        0.05
    )
    assert pre["rctp_high_minus_sft"] == pytest.approx(0.3)
    assert pre["met"] == {"spread": False, "dev_gap": True, "token_heard": True}  # RCTP-FT spreads 7.1 > 3 points
    md = "\n".join(summary._prerequisites_md(pre))
    assert "| RCTP-FT | 7.1 | 55.0% | 60.0% | +5.0 | +5.0, +5.0 |" in md and "bar <= 3 points: NOT met" in md
    assert "+30.0 points against SFT (met" in md
    one = summary.prerequisites({"SFT": [_s(0.4)]}, {}, {})  # one seed, no dev probe: nothing to judge
    assert one["met"] == {"spread": None, "dev_gap": None, "token_heard": None}
    assert summary._prerequisites_md(summary.prerequisites({}, {}, {})) == []


def test_compare_settings_and_controls_by_hand(tmp_path):
    paper = {"temperature": 1.0, "KL beta": 0.1, "clip (low, high)": [0.2, 0.2], "reward-token mode": None}
    run = {"temperature": 0.3, "KL beta": 0.1 + 1e-12, "clip (low, high)": [0.2, 0.28], "reward-token mode": None}
    c = summary.compare_settings("configs/x.py", paper, run)
    assert c["differences"] == [
        {"setting": "temperature", "paper": 1.0, "run": 0.3},
        {"setting": "clip (low, high)", "paper": [0.2, 0.2], "run": [0.2, 0.28]},
    ]
    md = "\n".join(summary._settings_md({"rows": c}))
    assert "- **rows** (`configs/x.py`): temperature 1 -> 0.3; clip (low, high) (0.2, 0.2) -> (0.2, 0.28)." in md

    def eval_file(name, passes):
        path = tmp_path / f"{name}.json"
        eps = [{"id": f"t{i}", "category": "ab"[i % 2], "official_pass": p} for i, p in enumerate(passes)]
        path.write_text(json.dumps({"episodes": eps}))
        return str(path)

    init = eval_file("init", [True, False, True, False])
    same = eval_file("same", [True, False, True, False])
    moved = eval_file("moved", [True, True, True, False])  # a: 2/2, b: 1/2 -> overall 0.75 against 0.5
    metrics = tmp_path / "m.jsonl"
    metrics.write_text(
        "".join(json.dumps({"step": i, "frac_zero_var_groups": v}) + "\n" for i, v in enumerate([1.0, 0.5]))
    )
    out = summary.control_payload(
        {"lr 0": [_s(0.5)], "shuffled": [_s(0.75)]},
        {"lr 0": [same], "shuffled": [moved]},
        {"shuffled": [str(metrics)]},
        {"RCTP-FT": [init]},
    )
    assert out["rows"]["lr 0"]["identical_to_init"] and out["rows"]["lr 0"]["vs_init"]["mean_diff"] == 0.0
    shuffled = out["rows"]["shuffled"]
    assert not shuffled["identical_to_init"] and shuffled["init_overall"] == 0.5
    assert shuffled["vs_init"]["mean_diff"] == pytest.approx(0.25) and shuffled["zero_var_mean"] == 0.75
    text = "\n".join(summary._control_md(out))
    assert (
        "| shuffled | 75.0% | 50.0% | +25.0 [" in text and "| lr 0 | 50.0% | 50.0% | +0.0 [+0.0, +0.0] | yes |" in text
    )


def test_the_sft_rc_grpo_row_says_what_its_init_is():
    md = "\n".join(
        summary._row_notes_md({"SFT+GRPO": [_s(0.25), _s(0.5)], "SFT+RC-GRPO": [_s(0.0)], "base": [_s(0.1)]})
    )
    assert md.startswith("- **SFT+RC-GRPO** starts from an SFT policy that was never taught what the reward tokens")
    assert md.endswith("Here 0.00% against SFT+GRPO's 37.50%.\n")
    assert summary._row_notes_md({"SFT+GRPO": [_s(0.5)]}) == []  # only rows that have a note


def test_goal_b_needs_the_gain_and_its_interval_above_zero():
    rows = {"SFT": {"test_overall": 0.3}, "SFT+GRPO": {"test_overall": 0.45}, "RCTP-FT": {"test_overall": 0.2}}
    stage1 = {"sft": {"train_success": 0.6}, "rctp_ft": {"train_success_high": 0.7, "train_success_low": 0.0}}
    above = {"SFT+GRPO vs SFT": {"bootstrap_ci95": (0.02, 0.3)}}
    across = {"SFT+GRPO vs SFT": {"bootstrap_ci95": (-0.01, 0.3)}}
    assert summary.goals(rows, stage1, above)["b_best_rl_gain"] == {"value": pytest.approx(0.15), "met": True}
    assert summary.goals(rows, stage1, across)["b_best_rl_gain"]["met"] is False
    small = {**rows, "SFT+GRPO": {"test_overall": 0.35}}
    assert summary.goals(small, stage1, above)["b_best_rl_gain"]["met"] is False  # +5 points < +10


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


def test_a_budget_that_explores_with_the_base_needs_one_pretrained(monkeypatch):
    with pytest.raises(ValueError, match="explore_with='base' needs a pretrained base"):
        dataclasses.replace(budgets.SMOKE, pretrain={})
    with pytest.raises(ValueError, match="explore_with must be 'sft' or 'base'"):
        dataclasses.replace(budgets.SMOKE, explore_with="rctp_ft")
    with pytest.raises(ValueError, match=r"unknown pretrain_corpus keys \['share'\]"):
        dataclasses.replace(budgets.SMOKE, pretrain_corpus={"share": 0.5})
    without = dataclasses.replace(budgets.SMOKE, pretrain={}, explore_with="sft")
    monkeypatch.setitem(budgets.BUDGETS, "smoke", without)
    with pytest.raises(ValueError, match="has no pretraining stage"):
        ablation.base_only("unused", "smoke")


def test_a_stage_is_keyed_by_its_inputs_as_well_as_its_config(tmp_path):
    """`inputs` (what the config names only by location, such as the base model's settings) is recorded beside the
    config; a rerun from another base stops; a stage recorded without inputs does not match one asked with them."""
    calls = []

    def fake_run(config, workdir):
        calls.append(workdir)
        os.makedirs(workdir)  # a trainer makes its workdir
        return {"step": 1, "metrics": {"loss": 0.5}}

    config = ablation.stage_config("sft", budgets.SMOKE, {})
    done = ablation.train_stage(fake_run, config, str(tmp_path / "a"), inputs={"base": {"seed": 0}})
    assert done["request"]["inputs"] == {"base": {"seed": 0}} and len(calls) == 1
    assert ablation.train_stage(fake_run, config, str(tmp_path / "a"), inputs={"base": {"seed": 0}}) == done
    with pytest.raises(cache.StaleCacheError, match=r"inputs\.base\.seed: 0 -> 1"):
        ablation.train_stage(fake_run, config, str(tmp_path / "a"), inputs={"base": {"seed": 1}})
    assert "inputs" not in ablation.train_stage(fake_run, config, str(tmp_path / "b"))["request"]
    with pytest.raises(cache.StaleCacheError, match=r"inputs\.base\.seed: '<unset>' -> 0"):
        ablation.train_stage(fake_run, config, str(tmp_path / "b"), inputs={"base": {"seed": 0}})
    assert len(calls) == 2


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
    """AWPO's Table 4 in miniature on a tiny Qwen3 SFT policy of its own, from the world's base the RC-GRPO ablation
    starts from (not rebuilt), beside that ablation's stage 1 in the same workdir (whose SFT is not trained again)."""
    from experiments import awpo_ablation

    workdir, _ = smoke_run
    base = os.path.join(workdir, "base", "pretrain")
    stamps = {p: os.path.getmtime(p) for p in (os.path.join(workdir, "s0", "sft", ablation.DONE), base)}
    payload = awpo_ablation.run(workdir, budget_name="smoke", quiet=True)
    assert stamps == {p: os.path.getmtime(p) for p in stamps}
    with open(os.path.join(workdir, awpo_ablation.SFT_DIR, ablation.DONE)) as f:
        assert json.load(f)["request"]["inputs"] == cache.plain({"base": ablation.base_request(budgets.SMOKE)})
    for d in (os.path.join(base, "hf"), os.path.join(awpo_ablation.SFT_DIR, "hf"), "rl/awpo_row2_s0/hf"):
        with open(os.path.join(workdir, d, "config.json")) as f:
            hf = json.load(f)
        assert hf["model_type"] == "qwen3" and hf["architectures"] == ["Qwen3ForCausalLM"], d
        assert hf["head_dim"] != hf["hidden_size"] // hf["num_attention_heads"], d
    with open(os.path.join(workdir, "s0", "sft", "hf", "config.json")) as f:
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


def test_the_shipped_base_is_the_quickstart_budgets_with_the_command_that_rebuilds_it():
    """experiments/base_models/quickstart: the base every quickstart and reproduce seed starts from (built by its
    record's command), its record naming exactly the budget's settings; another budget's base is built, not shipped."""
    shipped = ablation.shipped_base(budgets.QUICKSTART)
    assert shipped == os.path.join(ablation.SHIPPED_BASES, "quickstart") == ablation.shipped_base(budgets.REPRODUCE)
    with open(os.path.join(shipped, ablation.SHIPPED_RECORD)) as f:
        record = json.load(f)
    assert record["request"] == ablation.base_request(budgets.QUICKSTART)
    assert "--budget quickstart" in record["command"] and "--rebuild_base" in record["command"] and record["rebuild"]
    with open(os.path.join(shipped, "config.json")) as f:
        config = json.load(f)
    model = budgets.QUICKSTART.model
    assert (config["hidden_size"], config["num_hidden_layers"], config["head_dim"]) == (
        model["hidden_size"],
        model["num_layers"],
        model["head_dim"],
    )
    total = sum(os.path.getsize(os.path.join(shipped, n)) for n in os.listdir(shipped))
    assert total <= 10 * 2**20  # the cap on a shipped copy
    assert ablation.shipped_base(budgets.SMOKE) is None
    other = dataclasses.replace(budgets.QUICKSTART, pretrain_corpus={"failure_share": 0.5})
    assert ablation.shipped_base(other) is None and ablation.base_request(other) != record["request"]
    assert ablation.pretrained_base("unused", budgets.QUICKSTART) == shipped  # nothing built


def test_another_world_seed_is_the_same_budget_on_another_world_with_a_base_of_its_own():
    """--world_seed: the budget on world.seed N (its own tasks and corpus), so its base is built, not shipped;
    the budget's own seed gives the budget itself."""
    q = budgets.QUICKSTART
    assert budgets.get("quickstart", world_seed=q.world["seed"]) is q
    w1 = budgets.get("reproduce", world_seed=1)
    assert w1.name == "reproduce@world1" and w1.world == {**q.world, "seed": 1}
    assert dataclasses.replace(w1, name=q.name, world=q.world) == dataclasses.replace(budgets.REPRODUCE, name=q.name)
    assert ablation.shipped_base(w1) is None and ablation.base_request(w1) != ablation.base_request(q)
    dev0, dev1 = (ablation.sources.tasks(ablation.stage_config("sft", b, {}).data, "dev") for b in (q, w1))
    assert [t.id for t in dev0] == [t.id for t in dev1]  # the same slots of the split ...
    assert sum(a.ground_truth != b.ground_truth for a, b in zip(dev0, dev1)) > len(dev0) // 2  # ... drawn anew
