"""Async HTTP client of the evaluation server, implementing the EvalBackend protocol.

Covers: `EvalClient.evaluate` (POST /v1/eval with timeouts), bounded retries on transient
failures only (connect/read/write errors, 502/503/504, 429 honouring Retry-After) capped in
attempts and total time, several servers behind one client with least-outstanding-requests
balancing, and skipping servers that failed recently (transport errors, 5xx, failed /health).
Never raises for transport problems and never returns None: a non-transient failure or exhausted
retries gives an `internal_error` verdict whose message says why. The retry loop, its policy and
the least-outstanding choice are tritonforge.retry's, shared with the engine clients.
Does not cover: the server (server.py) or judging (judge/evaluator.py).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import ValidationError

from tritonforge.config.eval import EvalSettings
from tritonforge.logging_setup import get_logger
from tritonforge.retry import LeastOutstanding, RetryPolicy, Try, retry_after_seconds, with_retries
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
        self.policy = RetryPolicy(
            max_attempts, max_retry_s, backoff_s=0.5, max_backoff_s=10.0, jitter=True
        )
        self.down_s, self.deadline_s = down_s, deadline_s
        self._balance: LeastOutstanding[_Server] = LeastOutstanding()
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s, pool=timeout_s),
            limits=httpx.Limits(max_connections=1024, max_keepalive_connections=256),
            headers=headers,
            transport=transport,
        )

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

    async def evaluate_group(
        self, problem: Problem, sources: list[str], settings: EvalSettings | None = None
    ) -> list[Verdict]:
        """Several candidates of one problem as one `/v1/eval/batch`: the server times them
        together (its group timing). Always one verdict per source."""
        extra: dict[str, Any] = {}
        if settings is not None:
            extra["settings"] = settings.model_dump(mode="json", exclude=SERVER_SIDE_SETTINGS)
        if self.deadline_s is not None:
            extra["deadline_s"] = self.deadline_s
        problem_json = problem.model_dump(mode="json")
        payload = [{"problem": problem_json, "source": src, **extra} for src in sources]
        body, error = await self.request("POST", "/v1/eval/batch", payload)
        if error is None and isinstance(body, list) and len(body) == len(sources):
            try:
                return [Verdict.model_validate(b) for b in body]
            except ValidationError as exc:
                error = f"the server's answer is not a list of verdicts: {exc}"
        return [_error_verdict(problem.id, error or "no verdicts") for _ in sources]

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

        async def once(n: int) -> Try[tuple[Any, str | None]]:
            server = self.pick()
            outcome = await self._attempt(server, method, path, payload)
            now = time.monotonic()
            if not outcome.final and any(s.up(now) for s in self.servers if s is not server):
                outcome.max_wait_s = 0.05  # another server may take it right away
            return outcome

        return await with_retries(once, self.policy, lambda why: (None, why), f"{method} {path}")

    async def _attempt(
        self, server: _Server, method: str, path: str, payload: Any
    ) -> Try[tuple[Any, str | None]]:
        """One try at `server`: final (body, None) or (None, why), or a retry with its reason."""
        with self._balance.track(server):
            try:
                resp = await self._http.request(method, server.url + path, json=payload)
            except TRANSIENT_ERRORS as exc:
                self._mark_down(server)
                return Try(reason=f"{server.url}: {type(exc).__name__}: {exc}")
            except httpx.TimeoutException as exc:
                why = f"{server.url} gave no answer within {self.timeout_s:g} s ({type(exc).__name__}); not retried: the evaluation may still be running"
                return Try((None, why))
            except httpx.HTTPError as exc:
                return Try((None, f"{server.url}: {type(exc).__name__}: {exc}"))
        if resp.status_code == 200:
            server.failures = 0
            try:
                return Try((resp.json(), None))
            except ValueError as exc:
                return Try((None, f"{server.url} answered with malformed JSON: {exc}"))
        why = f"{server.url}: HTTP {resp.status_code}: {_detail(resp)}"
        if resp.status_code not in RETRY_STATUS:
            return Try((None, f"the server rejected the request ({why})"))
        if resp.status_code in SERVER_DOWN_STATUS:
            self._mark_down(server)
        return Try(reason=why, wait_s=retry_after_seconds(resp.headers))

    def pick(self) -> _Server:
        """Least outstanding requests among servers not marked down (all, if every one is)."""
        now = time.monotonic()
        up = [s for s in self.servers if s.up(now)] or self.servers
        chosen = self._balance.pick(up)
        assert chosen is not None  # servers is never empty
        return chosen

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
