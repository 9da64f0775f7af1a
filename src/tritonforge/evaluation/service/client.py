"""Async HTTP client of the evaluation server, implementing the EvalBackend protocol.

Covers: `EvalClient.evaluate` (POST /v1/eval with timeouts), bounded retries on transient
failures only (connect/read/write errors, 502/503/504, 429 honouring Retry-After) capped in
attempts and total time, several servers behind one client with least-outstanding-requests
balancing, and skipping servers that failed recently (transport errors, 5xx, failed /health).
Never raises for transport problems and never returns None: a non-transient failure or exhausted
retries gives an `internal_error` verdict whose message says why.
Does not cover: the server (server.py) or judging (judge/evaluator.py).
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import ValidationError

from tritonforge.config.eval import EvalSettings
from tritonforge.logging_setup import get_logger
from tritonforge.types import Problem, Status, Verdict

log = get_logger("evaluation.client")

RETRY_STATUS = {429, 502, 503, 504}
SERVER_DOWN_STATUS = {502, 503, 504}
TRANSIENT_ERRORS = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
    httpx.ReadError,
    httpx.WriteError,
    httpx.RemoteProtocolError,
)
# Settings the server fixes itself (placement, hidden seeds, isolation): never sent.
SERVER_SIDE_SETTINGS = {"device", "device_index", "secret_seed", "sandbox"}


@dataclass
class _Server:
    url: str
    outstanding: int = 0
    down_until: float = 0.0
    failures: int = 0

    def up(self, now: float) -> bool:
        return self.down_until <= now


class EvalClient:
    """EvalBackend over one or more evaluation servers."""

    def __init__(
        self,
        urls: str | list[str],
        token: str | None = None,
        timeout_s: float = 1800.0,
        max_attempts: int = 5,
        max_retry_s: float = 300.0,
        connect_timeout_s: float = 10.0,
        down_s: float = 15.0,
        deadline_s: float | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ):
        url_list = [urls] if isinstance(urls, str) else list(urls)
        if not url_list:
            raise ValueError("EvalClient needs at least one server URL")
        self.servers = [_Server(u.rstrip("/")) for u in url_list]
        self.timeout_s, self.max_attempts, self.max_retry_s = timeout_s, max_attempts, max_retry_s
        self.down_s, self.deadline_s = down_s, deadline_s
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s, pool=timeout_s),
            limits=httpx.Limits(max_connections=1024, max_keepalive_connections=256),
            headers=headers,
            transport=transport,
        )
        self._rr = 0

    async def __aenter__(self) -> EvalClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    # -- EvalBackend -------------------------------------------------------------------------
    async def evaluate(
        self, problem: Problem, source: str, settings: EvalSettings | None = None
    ) -> Verdict:
        """Judge `source` against `problem` on some server. Always a Verdict."""
        payload: dict[str, Any] = {"problem": problem.model_dump(mode="json"), "source": source}
        return await self._eval(payload, problem.id, settings)

    async def evaluate_by_id(
        self,
        suite: str,
        problem_id: str | int,
        source: str,
        settings: EvalSettings | None = None,
        size: str | None = None,
    ) -> Verdict:
        """Judge against a problem the server resolves itself (`suite`, `problem_id`, `size`)."""
        payload: dict[str, Any] = {"suite": suite, "problem_id": problem_id, "source": source}
        if size is not None:
            payload["size"] = size
        return await self._eval(payload, f"{suite}/{problem_id}", settings)

    async def _eval(
        self, payload: dict[str, Any], problem_id: str, settings: EvalSettings | None
    ) -> Verdict:
        if settings is not None:
            payload["settings"] = settings.model_dump(mode="json", exclude=SERVER_SIDE_SETTINGS)
        if self.deadline_s is not None:
            payload["deadline_s"] = self.deadline_s
        body, error = await self.request("POST", "/v1/eval", payload)
        if error is not None:
            return _error_verdict(problem_id, error)
        try:
            return Verdict.model_validate(body)
        except ValidationError as exc:
            return _error_verdict(problem_id, f"the server's answer is not a verdict: {exc}")

    # -- transport ---------------------------------------------------------------------------
    async def request(self, method: str, path: str, payload: Any = None) -> tuple[Any, str | None]:
        """(JSON body, None) on success, (None, why) after a non-transient failure or retries."""
        start = time.monotonic()
        last = ""
        for attempt in range(1, self.max_attempts + 1):
            server = self.pick()
            delay, last, final = await self._attempt(server, method, path, payload, attempt)
            if final is not None:
                return final
            if attempt == self.max_attempts:
                break
            if any(s.up(time.monotonic()) for s in self.servers if s is not server):
                delay = min(delay, 0.05)  # another server may take it right away
            spent = time.monotonic() - start
            if spent + delay > self.max_retry_s:
                return (
                    None,
                    f"gave up after {attempt} attempt(s) in {spent:.1f} s (retry budget {self.max_retry_s:g} s): {last}",
                )
            await asyncio.sleep(delay)
        spent = time.monotonic() - start
        return None, f"gave up after {self.max_attempts} attempt(s) in {spent:.1f} s: {last}"

    async def _attempt(
        self, server: _Server, method: str, path: str, payload: Any, attempt_no: int
    ) -> tuple[float, str, tuple[Any, str | None] | None]:
        """One try: (retry delay, what went wrong, final result or None to retry)."""
        server.outstanding += 1
        try:
            resp = await self._http.request(method, server.url + path, json=payload)
        except TRANSIENT_ERRORS as exc:
            self._mark_down(server)
            return _backoff(attempt_no), f"{server.url}: {type(exc).__name__}: {exc}", None
        except httpx.TimeoutException as exc:
            why = f"{server.url} gave no answer within {self.timeout_s:g} s ({type(exc).__name__}); not retried: the evaluation may still be running"
            return 0.0, why, (None, why)
        except httpx.HTTPError as exc:
            why = f"{server.url}: {type(exc).__name__}: {exc}"
            return 0.0, why, (None, why)
        finally:
            server.outstanding -= 1
        detail = _detail(resp)
        if resp.status_code == 200:
            server.failures = 0
            try:
                return 0.0, "", (resp.json(), None)
            except ValueError as exc:
                why = f"{server.url} answered with malformed JSON: {exc}"
                return 0.0, why, (None, why)
        why = f"{server.url}: HTTP {resp.status_code}: {detail}"
        if resp.status_code not in RETRY_STATUS:
            return 0.0, why, (None, f"the server rejected the request ({why})")
        if resp.status_code in SERVER_DOWN_STATUS:
            self._mark_down(server)
        delay = _retry_after(resp)
        return (delay if delay is not None else _backoff(attempt_no)), why, None

    def pick(self) -> _Server:
        """Least outstanding requests among servers not marked down (all, if every one is)."""
        now = time.monotonic()
        up = [s for s in self.servers if s.up(now)] or self.servers
        least = min(s.outstanding for s in up)
        ties = [s for s in up if s.outstanding == least]
        self._rr += 1
        return ties[self._rr % len(ties)]

    def _mark_down(self, server: _Server) -> None:
        server.failures += 1
        server.down_until = time.monotonic() + self.down_s

    async def check_health(self, timeout_s: float = 2.0) -> dict[str, bool]:
        """GET /health on every server; mark the failing ones down. url -> healthy."""

        async def one(s: _Server) -> bool:
            try:
                r = await self._http.get(s.url + "/health", timeout=timeout_s)
                ok = r.status_code == 200
            except httpx.HTTPError:
                ok = False
            if ok:
                s.down_until, s.failures = 0.0, 0
            else:
                self._mark_down(s)
            return ok

        results = await asyncio.gather(*(one(s) for s in self.servers))
        return {s.url: ok for s, ok in zip(self.servers, results)}


def _backoff(attempt: int, base: float = 0.5, cap: float = 10.0) -> float:
    return min(cap, base * 2 ** (attempt - 1)) * (0.5 + random.random() / 2)


def _retry_after(resp: httpx.Response) -> float | None:
    raw = resp.headers.get("retry-after", "").strip()
    try:
        return max(0.0, float(raw)) if raw else None
    except ValueError:
        return None


def _detail(resp: httpx.Response) -> str:
    try:
        body = resp.json()
        if isinstance(body, dict) and "detail" in body:
            return str(body["detail"])[:2000]
    except ValueError:
        pass
    return resp.text[:500]


def _error_verdict(problem_id: str, why: str) -> Verdict:
    log.warning("evaluation of %s failed in transport: %s", problem_id, why)
    return Verdict(
        status=Status.INTERNAL_ERROR, problem_id=problem_id, message=f"eval client: {why}"
    )
