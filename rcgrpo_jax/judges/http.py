"""`http`: a judge behind an OpenAI-compatible chat-completions endpoint (vLLM and SGLang serve one for
AWPO's Qwen3-235B-A22B judge: `vllm serve Qwen/Qwen3-235B-A22B ... --api-key $KEY`). Standard library
only (urllib, a thread pool).

One request per item (`POST <url>/chat/completions`, body {model, messages, temperature, max_tokens,
**extra_body}); the score is `parse_score(choices[0].message.content)`.

Concurrency, timeouts, retries, the deadline per item, the cache, the API key and failures: `HttpJudge`.
"""

from __future__ import annotations

import collections
import concurrent.futures
import hashlib
import http.client
import json
import logging
import os
import socket
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Sequence

import ml_collections
import numpy as np
from ml_collections.config_dict import placeholder

from rcgrpo_jax.judges.base import COMMON, JUDGES, Counters, JudgeInput, require_positive, require_unit_interval
from rcgrpo_jax.judges.prompt import judge_messages, parse_score
from rcgrpo_jax.registry import OptionError

log = logging.getLogger(__name__)

RETRY_STATUS = frozenset({408, 409, 425, 429})


class JudgeFailure(Exception):
    """One failed attempt: `kind` (a `base.FAILURE_KINDS` name), whether to retry, a log detail."""

    def __init__(self, kind: str, detail: str, *, retry: bool, wait_s: float = 0.0):
        super().__init__(detail)
        self.kind, self.detail, self.retry, self.wait_s = kind, detail, retry, wait_s


def chat_completions_url(url: str) -> str:
    """`url` as given when it ends in /chat/completions, else `url` + '/chat/completions' (so both
    'http://host:8000/v1' and the full endpoint work)."""
    url = url.rstrip("/")
    return url if url.endswith("/chat/completions") else url + "/chat/completions"


def _is_timeout(e: BaseException) -> bool:
    return isinstance(e, (TimeoutError, socket.timeout)) or (
        isinstance(e, urllib.error.URLError) and isinstance(e.reason, (TimeoutError, socket.timeout))
    )


class HttpJudge:
    """`request_body(item)` is what is sent; `stats()` the counters.

    - Concurrency: `concurrency` requests in flight (a thread pool per call).
    - Timeout: `timeout_s` per socket operation (connect, each read), so one attempt lasts at most
      2 x timeout_s.
    - Retries: up to `retries` more attempts after an HTTP 408/409/425/429/5xx, a timeout, a connection
      error or a malformed body, sleeping min(backoff_max_s, backoff_s * 2^k) before retry k (a 429's
      Retry-After, when longer, up to backoff_max_s). Other HTTP errors (400, 401, 404, ...) and a reply
      without a score are not retried.
    - Deadline: a retry starts only when it can end within `max_item_s` of the item's first attempt
      (elapsed + sleep + 2 x timeout_s <= max_item_s), so one item never holds a step longer than
      max(max_item_s, 2 x timeout_s). The defaults (25 s, 2 retries, max_item_s 55 s) bound it under a minute:
      a refused connection or a 5xx is retried at once, a hung judge is given up after one 25 s wait.
    - Cache: a successful score is kept, keyed by the SHA-256 of the request body (model, messages and
      sampling options), so a repeated request (the same reasoning and reference) is not sent again;
      identical items of one call share one request. Failures are not cached. `cache_size` entries, least
      recently used dropped first.
    - The API key is read from the environment variable named `api_key_env` (sent as
      `Authorization: Bearer ...`; no header when the variable is unset or empty). It is never logged:
      every logged string has it replaced by '***'.
    - Failures: an item whose attempts all failed scores `default` and is counted by kind (`http`,
      `timeout`, `connection`, `malformed`, `no_score`, `error` for anything unexpected); the call never
      raises. The first `log_first` failures of each kind are logged as warnings, then every 100th, and
      each call with failures logs one summary line.
    """

    stand_in = False

    def __init__(
        self,
        url: str,
        model: str,
        *,
        api_key_env: str = "JUDGE_API_KEY",
        concurrency: int = 16,
        timeout_s: float = 25.0,
        retries: int = 2,
        backoff_s: float = 1.0,
        backoff_max_s: float = 8.0,
        max_item_s: float = 55.0,
        cache: bool = True,
        cache_size: int = 100_000,
        default: float = 0.0,
        max_chars: int = 2000,
        max_tokens: int = 1024,
        temperature: float = 0.0,
        extra_body: dict[str, Any] | None = None,
        log_first: int = 10,
    ):
        self.endpoint = chat_completions_url(url)
        self.model = model
        self.name = f"http:{model}"
        self.api_key_env = api_key_env
        self.__key = (os.environ.get(api_key_env) or None) if api_key_env else None
        self.concurrency, self.timeout_s, self.retries = int(concurrency), float(timeout_s), int(retries)
        self.backoff_s, self.backoff_max_s = float(backoff_s), float(backoff_max_s)
        self.max_item_s = float(max_item_s)
        self.cache_enabled, self.cache_size = bool(cache), int(cache_size)
        self.default, self.max_chars = float(default), int(max_chars)
        self.max_tokens, self.temperature = int(max_tokens), float(temperature)
        self.extra_body = dict(extra_body or {})
        self.log_first = int(log_first)
        self._cache: collections.OrderedDict[str, float] = collections.OrderedDict()
        self._cache_lock = threading.Lock()
        self._counters = Counters("requests", "retries", "cache_hits")
        log.info(
            "judge %s at %s: api key from $%s %s; concurrency %d, timeout %.3gs, %d retries, cache %s",
            self.name,
            self.endpoint,
            api_key_env or "(none)",
            "set" if self.__key else "unset (no Authorization header)",
            self.concurrency,
            self.timeout_s,
            self.retries,
            "on" if self.cache_enabled else "off",
        )

    def __repr__(self) -> str:
        return f"HttpJudge({self.endpoint!r}, model={self.model!r}, api_key_env={self.api_key_env!r})"

    # -- requests ---------------------------------------------------------------------------------------

    def request_body(self, item: JudgeInput) -> dict[str, Any]:
        return {
            "model": self.model,
            "messages": judge_messages(item, self.max_chars),
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            **self.extra_body,
        }

    def _redact(self, text: str) -> str:
        return text.replace(self.__key, "***") if self.__key else text

    def _post(self, data: bytes) -> str:
        """One attempt: the reply's content, or a JudgeFailure."""
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.__key:
            headers["Authorization"] = f"Bearer {self.__key}"
        req = urllib.request.Request(self.endpoint, data=data, headers=headers, method="POST")
        self._counters.add("requests")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as e:
            try:
                snippet = e.read(200).decode("utf-8", "replace")
            except Exception:  # noqa: BLE001 - the error body is only for the log
                snippet = ""
            wait = 0.0
            if e.code == 429:
                try:
                    wait = float(e.headers.get("Retry-After") or 0.0)
                except (TypeError, ValueError):
                    wait = 0.0
            retry = e.code in RETRY_STATUS or e.code >= 500
            raise JudgeFailure("http", f"HTTP {e.code}: {snippet!r}", retry=retry, wait_s=wait) from None
        except Exception as e:  # noqa: BLE001 - classified below; a judge never raises
            if _is_timeout(e):
                raise JudgeFailure("timeout", f"no reply within {self.timeout_s:.3g}s", retry=True) from None
            if isinstance(e, (urllib.error.URLError, http.client.HTTPException, OSError)):
                raise JudgeFailure("connection", f"{type(e).__name__}: {e}", retry=True) from None
            raise
        try:
            reply = json.loads(raw)
            message = reply["choices"][0]["message"]
            content = message.get("content")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            raise JudgeFailure("malformed", f"not a chat completion: {raw[:200]!r}", retry=True) from None
        if content is not None and not isinstance(content, str):
            raise JudgeFailure("malformed", f"content is a {type(content).__name__}", retry=True)
        return content or ""

    def _score_safe(self, item: JudgeInput) -> tuple[float, str | None]:
        """`_score`, and anything unexpected (an item that cannot be rendered or encoded, a bug) scores
        the default as kind `error`: a run never stops on a judge failure."""
        try:
            return self._score(item)
        except Exception as e:  # noqa: BLE001
            n = self._counters.fail("error")
            if n <= self.log_first or n % 100 == 0:
                log.warning(
                    "judge %s: failure #%d of kind error: %s", self.name, n, self._redact(f"{type(e).__name__}: {e}")
                )
            return self.default, "error"

    def _score(self, item: JudgeInput) -> tuple[float, str | None]:
        """(score, failure kind or None) for one item, with retries."""
        data = json.dumps(self.request_body(item), ensure_ascii=False).encode("utf-8")
        key = hashlib.sha256(data).hexdigest() if self.cache_enabled else None
        if key is not None:
            with self._cache_lock:
                if key in self._cache:
                    self._cache.move_to_end(key)
                    self._counters.add("cache_hits")
                    return self._cache[key], None
        failure: JudgeFailure | None = None
        start = time.monotonic()
        for attempt in range(self.retries + 1):
            if attempt:
                wait = min(self.backoff_max_s, max(self.backoff_s * 2 ** (attempt - 1), failure.wait_s))
                if time.monotonic() - start + wait + 2 * self.timeout_s > self.max_item_s:
                    attempt -= 1  # the attempts made
                    break  # no retry could end within the item's deadline
                self._counters.add("retries")
                time.sleep(wait)
            try:
                content = self._post(data)
            except JudgeFailure as e:
                failure = e
                log.debug("judge %s attempt %d failed (%s): %s", self.name, attempt, e.kind, self._redact(e.detail))
                if e.retry:
                    continue
                break
            except Exception as e:  # noqa: BLE001 - a run never stops on a judge failure
                failure = JudgeFailure("error", f"{type(e).__name__}: {e}", retry=False)
                break
            score = parse_score(content)
            if score is None:
                failure = JudgeFailure("no_score", f"no score in the reply {content[:200]!r}", retry=False)
                break
            if key is not None:
                with self._cache_lock:
                    self._cache[key] = score
                    while len(self._cache) > self.cache_size:
                        self._cache.popitem(last=False)
            return score, None
        n = self._counters.fail(failure.kind)
        if n <= self.log_first or n % 100 == 0:
            log.warning(
                "judge %s: failure #%d of kind %s after %d attempt(s), scored the default %.3g: %s",
                self.name,
                n,
                failure.kind,
                attempt + 1,
                self.default,
                self._redact(failure.detail),
            )
        return self.default, failure.kind

    # -- the judge --------------------------------------------------------------------------------------

    def __call__(self, items: Sequence[JudgeInput]) -> np.ndarray:
        items = list(items)
        self._counters.add("calls", len(items))
        if not items:
            return np.zeros((0,), np.float32)
        # identical items share one request (they would share a cache entry anyway)
        first: dict[JudgeInput, int] = {}
        order = (
            [first.setdefault(it, i) for i, it in enumerate(items)] if self.cache_enabled else list(range(len(items)))
        )
        unique = sorted(set(order))
        results: dict[int, tuple[float, str | None]] = {}
        workers = max(1, min(self.concurrency, len(unique)))
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="judge") as pool:
            for i, res in zip(unique, pool.map(lambda i: self._score_safe(items[i]), unique)):
                results[i] = res
        dup = len(items) - len(unique)
        if dup:
            self._counters.add("cache_hits", dup)
        scores = np.asarray([results[o][0] for o in order], np.float32)
        kinds = collections.Counter(results[o][1] for o in order if results[o][1] is not None)
        if kinds:
            log.warning(
                "judge %s: %d of %d items scored the default %.3g this call (%s)",
                self.name,
                sum(kinds.values()),
                len(items),
                self.default,
                ", ".join(f"{k}: {v}" for k, v in sorted(kinds.items())),
            )
        return scores

    def stats(self) -> dict[str, int]:
        """Calls, requests (HTTP attempts), retries, cache_hits, failures, failures/<kind>."""
        return self._counters.snapshot()


# ----------------------------------------------------------------------------------------------------
# Registration.


def http_config() -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(
        {
            **COMMON,
            "url": placeholder(str),  # http://host:8000/v1 (or the full .../chat/completions)
            "model": placeholder(str),  # the served model name, e.g. Qwen/Qwen3-235B-A22B
            "api_key_env": "JUDGE_API_KEY",  # the variable holding the key; "" = send none
            "concurrency": 16,
            "timeout_s": 25.0,  # per socket operation; with the next three, one item ends within a minute
            "retries": 2,
            "backoff_s": 1.0,
            "backoff_max_s": 8.0,
            "max_item_s": 55.0,  # no retry starts that could end later than this after the first attempt
            "cache": True,
            "cache_size": 100_000,
            "max_tokens": 1024,
            "temperature": 0.0,
            "extra_body": "",  # a JSON object merged into the request, e.g. '{"top_p": 1.0}'
        }
    )


def parse_extra_body(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        out = json.loads(text)
    except ValueError as e:
        raise OptionError("extra_body", f"not JSON: {e}") from None
    if not isinstance(out, dict):
        raise OptionError("extra_body", f"must be a JSON object, got {type(out).__name__}")
    return out


def validate_http(cfg: ml_collections.ConfigDict) -> None:
    if not cfg.url or not str(cfg.url).startswith(("http://", "https://")):
        raise OptionError("url", f"the http judge needs an http(s):// endpoint, got {cfg.url!r}")
    if not cfg.model:
        raise OptionError("model", "the http judge needs the served model name")
    if not isinstance(cfg.api_key_env, str):
        raise OptionError("api_key_env", "must be the name of an environment variable (or '')")
    for f in ("concurrency", "timeout_s", "cache_size", "max_tokens", "max_chars", "max_item_s"):
        require_positive(cfg, f)
    for f in ("retries", "backoff_s", "backoff_max_s", "temperature"):
        require_positive(cfg, f, allow_zero=True)
    if not isinstance(cfg.cache, bool):
        raise OptionError("cache", f"must be True or False, got {cfg.cache!r}")
    require_unit_interval(cfg, "default")
    parse_extra_body(cfg.extra_body)


@JUDGES.register("http", default_config=http_config, validate=validate_http)
def make_http(cfg: ml_collections.ConfigDict, **_) -> HttpJudge:
    return HttpJudge(
        cfg.url,
        cfg.model,
        api_key_env=cfg.api_key_env,
        concurrency=int(cfg.concurrency),
        timeout_s=float(cfg.timeout_s),
        retries=int(cfg.retries),
        backoff_s=float(cfg.backoff_s),
        backoff_max_s=float(cfg.backoff_max_s),
        max_item_s=float(cfg.max_item_s),
        cache=bool(cfg.cache),
        cache_size=int(cfg.cache_size),
        default=float(cfg.default),
        max_chars=int(cfg.max_chars),
        max_tokens=int(cfg.max_tokens),
        temperature=float(cfg.temperature),
        extra_body=parse_extra_body(cfg.extra_body),
    )
