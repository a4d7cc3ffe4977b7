"""The `http` judge against a real OpenAI-compatible server that nobody here wrote: `transformers serve`
(transformers' `serving` extra) serving the project's tiny checkpoint on 127.0.0.1, started and stopped by
the test (HF_HUB_OFFLINE=1: nothing is downloaded). Shown: requests are accepted and their replies parsed
into scores; a `400` from the server's own tool-call parser is counted, not raised; a killed server is
counted as connection failures, fast; and the failure budget turns that step into a `StopRun`.

The random tiny model writes nothing a judge would, so the replies are steered with the server's
`logit_bias` (sent through the judge's `extra_body`): towards the token "1" (a score the judge parses) or
towards `<tool_call>` (which the server's parser refuses with a 400)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request

import numpy as np
import pytest

from rcgrpo_jax import judges
from rcgrpo_jax.train import loop as loop_lib
from rcgrpo_jax.train import rl_trainer

pytestmark = pytest.mark.slow

MISSING = [m for m in ("fastapi", "uvicorn", "openai") if importlib.util.find_spec(m) is None]
SERVE = shutil.which("transformers")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(tiny_ckpt, tmp_path_factory):
    """(base url, model name, process) of `transformers serve` on the tiny checkpoint."""
    if MISSING or SERVE is None:
        pytest.fail(  # launch/setup_env.sh installs the `serving` extra: its absence is a setup defect
            f"transformers' serving extra is not installed (missing: {MISSING or ['transformers CLI']}): "
            "pip install -e .[serving]"
        )
    port = _free_port()
    log = open(tmp_path_factory.mktemp("serve") / "serve.log", "w+")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    cmd = [SERVE, "serve", tiny_ckpt, "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"]
    proc = subprocess.Popen(cmd + ["--log-level", "warning"], env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    end = time.monotonic() + 150
    while True:
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > end:
            proc.kill()
            log.seek(0)
            pytest.fail(f"transformers serve did not come up (rc {proc.poll()}):\n{log.read()[-3000:]}")
        time.sleep(0.5)
    yield f"{base}/v1", tiny_ckpt, proc
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    log.close()


def _items(n: int) -> list[judges.JudgeInput]:
    return [
        judges.JudgeInput(questions=(f"Move file {i} into the archive.",), reasoning=(f"I call mv for file {i}.",))
        for i in range(n)
    ]


def _token(model_dir: str, text: str) -> int:
    from transformers import AutoTokenizer

    (tid,) = AutoTokenizer.from_pretrained(model_dir).encode(text, add_special_tokens=False)
    return tid


def _judge(url, model, bias: dict[int, float], **kw) -> judges.HttpJudge:
    options = dict(api_key_env="", concurrency=2, timeout_s=60.0, retries=0, cache=False, log_first=0)
    options.update(kw)
    return judges.HttpJudge(
        url, model, extra_body={"logit_bias": {str(k): v for k, v in bias.items()}, "max_tokens": 1}, **options
    )


def test_requests_are_answered_and_their_replies_parsed(served):
    url, model, _ = served
    judge = _judge(url, model, {_token(model, "1"): 100.0})
    scores = judge(_items(3))
    np.testing.assert_array_equal(scores, np.ones(3, np.float32))  # "1": a score the judge read, not its default 0
    stats = judge.stats()
    assert stats["requests"] == 3 and stats["failures"] == 0 and stats["calls"] == 3


def test_a_400_from_the_servers_tool_call_parser_is_counted_not_raised(served):
    url, model, _ = served
    judge = _judge(url, model, {_token(model, "<tool_call>"): 100.0}, retries=2)
    scores = judge(_items(2))
    np.testing.assert_array_equal(scores, np.zeros(2, np.float32))  # the default
    stats = judge.stats()
    assert stats["failures/http"] == 2 and stats["failures"] == 2
    assert stats["requests"] == 2 and stats["retries"] == 0  # a 400 is not retried


def test_a_killed_server_is_counted_and_the_budget_stops_the_run(served):
    url, model, proc = served
    judge = _judge(url, model, {_token(model, "1"): 100.0}, retries=2, backoff_s=0.05, timeout_s=5.0)
    assert judge(_items(1))[0] == 1.0  # alive
    proc.kill()
    proc.wait(timeout=20)
    t0 = time.monotonic()
    before = judge.stats()["failures"]
    scores = judge(_items(4))
    elapsed = time.monotonic() - t0
    failed = judge.stats()["failures"] - before
    np.testing.assert_array_equal(scores, np.zeros(4, np.float32))
    assert failed == 4 and judge.stats()["failures/connection"] == 4
    assert judge.stats()["retries"] == 8 and elapsed < 5.0  # refused at once, retried, then given up
    rl_trainer.check_judge_budget(0, 4, 0.2, judge.name)  # a step without failures passes
    with pytest.raises(loop_lib.StopRun) as e:
        rl_trainer.check_judge_budget(failed, 4, 0.2, judge.name)
    assert e.value.reason == "judge_failures"
    assert str(e.value).startswith(f"judge {judge.name}: 4 of 4 items failed this step")
