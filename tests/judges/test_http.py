"""The `http` judge against a small stdlib chat-completions server on 127.0.0.1 (port 0), started by the
test: good answers, 500s (always / once), a 400, timeouts, slow replies, malformed bodies, answers
without a score, and an error body that echoes the Authorization header. Checked: the request body
(reasoning and reference present), retries and their backoff, the cache, the failure counters, and
that the API key never reaches the logs. Only loopback traffic; timeouts are tiny."""

from __future__ import annotations

import collections
import http.server
import json
import logging
import threading
import time

import numpy as np
import pytest

from rcgrpo_jax import judges

KEY = "sk-test-9f8e7d6c5b4a"
ENV = "RCGRPO_TEST_JUDGE_KEY"


class Server:
    """Replies by the scenario word found in the request's user message ('mode:<word>')."""

    def __init__(self, sleep_timeout: float = 1.5, sleep_slow: float = 0.2):
        self.requests: list[dict] = []  # {"body", "auth", "time", "mode"}
        self.lock = threading.Lock()
        self.seen = collections.Counter()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep the test output clean
                pass

            def _send(self, code: int, payload: bytes, ctype: str = "application/json"):
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                body = json.loads(raw)
                user = body["messages"][-1]["content"]
                mode = user.split("mode:", 1)[1].split()[0] if "mode:" in user else "good"
                with outer.lock:
                    outer.requests.append(
                        {
                            "body": body,
                            "auth": self.headers.get("Authorization"),
                            "time": time.monotonic(),
                            "mode": mode,
                        }
                    )
                    outer.seen[mode] += 1
                    n = outer.seen[mode]
                reply = lambda text: json.dumps(  # noqa: E731
                    {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}
                ).encode()
                if self.path != "/v1/chat/completions":
                    return self._send(404, b'{"error": "no such route"}')
                if mode == "good":
                    return self._send(200, reply("Score: 0.8\nDeviation: none"))
                if mode == "low":
                    return self._send(200, reply("Score: 0.2\nDeviation: step 1 ignores the reference."))
                if mode == "always500":
                    return self._send(500, b'{"error": "overloaded"}')
                if mode == "once500":
                    return self._send(500, b"busy") if n == 1 else self._send(200, reply("Score: 0.6"))
                if mode == "echo":  # a server that leaks the header into its error body
                    return self._send(503, f"bad gateway; you sent {self.headers.get('Authorization')}".encode())
                if mode == "bad400":
                    return self._send(400, b'{"error": "bad request"}')
                if mode == "timeout":
                    time.sleep(sleep_timeout)
                    return self._send(200, reply("Score: 1.0"))
                if mode == "slow":
                    time.sleep(sleep_slow)
                    return self._send(200, reply("Score: 0.4"))
                if mode == "malformed":
                    return self._send(200, b"<html>not json", "text/html")
                if mode == "nochoices":
                    return self._send(200, b'{"object": "chat.completion", "choices": []}')
                if mode == "noscore":
                    return self._send(200, reply("I cannot grade this."))
                return self._send(200, reply("Score: 0.8"))

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def by_mode(self, mode: str) -> list[dict]:
        with self.lock:
            return [r for r in self.requests if r["mode"] == mode]

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = Server()
    yield s
    s.close()


@pytest.fixture
def key_env(monkeypatch):
    monkeypatch.setenv(ENV, KEY)


def item(mode: str, ref: str | None = "Check the folder, then move the file.", tag: str = "") -> judges.JudgeInput:
    return judges.JudgeInput(
        questions=(f"Move a.txt to b/ mode:{mode} {tag}",),
        reasoning=(f"I look at the folder first ({mode}).", "Then I move a.txt."),
        calls=("ls", "mv"),
        reference_rationale=ref,
        step_calls=(("ls({})",), ('mv({"source": "a.txt", "destination": "b"})',)),
    )


def make(server, **kw) -> judges.HttpJudge:
    options = dict(
        {
            "url": server.url,
            "model": "Qwen/Qwen3-235B-A22B",
            "api_key_env": ENV,
            "concurrency": 8,
            "timeout_s": 2.0,
            "retries": 2,
            "backoff_s": 0.05,
            "backoff_max_s": 0.2,
            "default": 0.1,
        }
    )
    options.update(kw)
    cfg = judges.default_config("http")
    cfg.http.update(options)
    j = judges.make_judge(cfg)
    assert isinstance(j, judges.HttpJudge) and j.stand_in is False
    return j


def test_good_answers_request_body_and_cache(server, key_env, caplog):
    caplog.set_level(logging.DEBUG)
    j = make(server, extra_body='{"chat_template_kwargs": {"enable_thinking": false}}')
    items = [item("good"), item("low"), item("good", ref=None), item("good")]  # the last repeats the first
    scores = j(items)
    np.testing.assert_allclose(scores, [0.8, 0.2, 0.8, 0.8], rtol=1e-6)
    assert scores.dtype == np.float32
    reqs = server.requests
    assert len(reqs) == 3  # the duplicate shared a request
    for r in reqs:
        b = r["body"]
        assert r["auth"] == f"Bearer {KEY}"
        assert b["model"] == "Qwen/Qwen3-235B-A22B" and b["temperature"] == 0.0 and b["max_tokens"] == 1024
        assert b["chat_template_kwargs"] == {"enable_thinking": False}
        assert b["messages"][0] == {"role": "system", "content": judges.RUBRIC}
        user = b["messages"][1]["content"]
        assert "I look at the folder first" in user and "Then I move a.txt." in user
        assert 'mv({"source": "a.txt", "destination": "b"})' in user and "Move a.txt to b/" in user
    with_ref = [r for r in reqs if "Check the folder, then move the file." in r["body"]["messages"][1]["content"]]
    assert len(with_ref) == 2  # the item without a reference says so instead
    assert sum("(none given)" in r["body"]["messages"][1]["content"] for r in reqs) == 1
    # the cache: the same requests again send nothing; a different reference is a different request
    np.testing.assert_allclose(j(items[:2]), [0.8, 0.2], rtol=1e-6)
    assert len(server.requests) == 3
    j([item("good", ref="Another rationale.")])
    assert len(server.requests) == 4
    s = j.stats()
    assert s["calls"] == 7 and s["requests"] == 4 and s["cache_hits"] == 3 and s["failures"] == 0
    assert s["retries"] == 0
    assert KEY not in caplog.text


def test_failures_are_counted_logged_and_scored_default(server, key_env, caplog):
    caplog.set_level(logging.DEBUG)
    j = make(server)
    modes = ["always500", "once500", "bad400", "malformed", "nochoices", "noscore", "echo", "good"]
    t0 = time.monotonic()
    scores = j([item(m) for m in modes])
    elapsed = time.monotonic() - t0
    np.testing.assert_allclose(scores, [0.1, 0.6, 0.1, 0.1, 0.1, 0.1, 0.1, 0.8], rtol=1e-6)
    n = {m: len(server.by_mode(m)) for m in modes}
    # retried: 5xx, malformed bodies; not retried: 400, an answer without a score; a once-500 recovers
    assert n == {
        "always500": 3,
        "once500": 2,
        "bad400": 1,
        "malformed": 3,
        "nochoices": 3,
        "noscore": 1,
        "echo": 3,
        "good": 1,
    }
    # backoff: the retries of one request are spaced by at least backoff_s, then 2 * backoff_s
    t = [r["time"] for r in server.by_mode("always500")]
    assert t[1] - t[0] >= 0.05 * 0.9 and t[2] - t[1] >= 0.1 * 0.9
    assert elapsed < 10.0
    s = j.stats()
    assert s["calls"] == 8 and s["failures"] == 6
    assert s["failures/http"] == 3 and s["failures/malformed"] == 2 and s["failures/no_score"] == 1
    assert s["failures/timeout"] == s["failures/connection"] == s["failures/error"] == 0
    assert s["retries"] == 2 + 1 + 2 + 2 + 2 and s["requests"] == sum(n.values())
    # an item that cannot even be encoded (a lone surrogate) is an `error`, not an exception
    n_req = j.stats()["requests"]
    np.testing.assert_allclose(j([judges.JudgeInput(("q",), ("\ud800",))]), [0.1])
    assert j.stats()["failures/error"] == 1 and j.stats()["requests"] == n_req
    # failures are not cached: asking again sends again
    j([item("noscore")])
    assert len(server.by_mode("noscore")) == 2 and j.stats()["failures/no_score"] == 2
    # logged: each failed item and one summary per call; the key never, even when the server echoes it
    assert "failure #1 of kind http" in caplog.text and "6 of 8 items scored the default" in caplog.text
    assert all(r["auth"] == f"Bearer {KEY}" for r in server.by_mode("echo"))  # so the error body held the key
    assert "you sent Bearer ***" in caplog.text  # ... and it was redacted
    assert KEY not in caplog.text


def test_timeouts_slow_replies_and_connection_errors(key_env, caplog, monkeypatch):
    caplog.set_level(logging.DEBUG)
    server = Server(sleep_timeout=3.0, sleep_slow=0.2)
    try:
        j = make(server, timeout_s=1.0, retries=1, backoff_s=0.01)  # slow = 0.2 s, timeout = 3 s
        scores = j([item("timeout"), item("slow"), item("good")])
        np.testing.assert_allclose(scores, [0.1, 0.4, 0.8], rtol=1e-6)
        assert len(server.by_mode("timeout")) == 2  # one retry
        s = j.stats()
        assert s["failures"] == 1 and s["failures/timeout"] == 1 and s["retries"] == 1
    finally:
        server.close()
    # nothing listens any more: connection errors, counted, default score, no exception
    monkeypatch.delenv(ENV)
    j2 = make(server, retries=1, backoff_s=0.0, concurrency=1)
    np.testing.assert_allclose(j2([item("good")]), [0.1])
    s2 = j2.stats()
    assert s2["failures/connection"] == 1 and s2["requests"] == 2
    assert KEY not in caplog.text and "unset (no Authorization header)" in caplog.text


def test_no_key_sends_no_header_and_url_forms(server, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    j = make(server, url=server.url + "/chat/completions", cache=False)
    assert j.endpoint == server.url + "/chat/completions"
    np.testing.assert_allclose(j([item("good"), item("good")]), [0.8, 0.8])
    assert len(server.requests) == 2  # no cache: every item is a request
    assert all(r["auth"] is None for r in server.requests)
    assert KEY not in repr(j)
