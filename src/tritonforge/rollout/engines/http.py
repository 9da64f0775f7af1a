"""HTTP plumbing shared by the server-backed engines: one JSON call with bounded retries.

Covers: `HttpResult` and `call_json`, which retries only transient failures
(connect errors and timeouts, pool exhaustion, HTTP 502/503/504, and 429 honouring Retry-After;
for idempotent control calls also a dropped connection, e.g. a keep-alive connection the server
closed after an error), capped in attempts and in total waiting time, and turns everything else into a status: a read
timeout is `GenStatus.TIMEOUT` (the request may still be running, so it is not resent), any other
4xx/5xx or transport error is `GenStatus.ERROR`. The retry loop and `RetryPolicy` are
tritonforge.retry's, shared with the evaluation client. Does not cover: request or response
shapes (see vllm.py, sglang.py). Nothing here raises for a failed call.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from tritonforge.logging_setup import get_logger
from tritonforge.retry import RetryPolicy, Try, retry_after_seconds, with_retries
from tritonforge.types import Generation, GenStatus

__all__ = ["EndpointClient", "HttpResult", "RetryPolicy", "call_json", "post_generation", "probe"]

log = get_logger(__name__)

TRANSIENT_STATUS = {502, 503, 504}
_TRANSIENT_EXC = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
_DROPPED_EXC = (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)


@dataclass
class HttpResult:
    """Outcome of one logical call (after retries)."""

    status: GenStatus
    data: Any = None
    code: int | None = None
    error: str = ""
    attempts: int = 0

    @property
    def ok(self) -> bool:
        return self.status is GenStatus.OK


def _body_text(response: httpx.Response, limit: int = 500) -> str:
    try:
        return response.text[:limit]
    except Exception:  # undecodable body
        return "<unreadable body>"


async def _attempt(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    payload: Any,
    timeout: httpx.Timeout,
    idempotent: bool,
) -> Try[HttpResult]:
    """One try: a final HttpResult, or a retry with its reason (and a server-requested delay)."""
    try:
        resp = await client.request(method, url, json=payload, timeout=timeout)
    except _TRANSIENT_EXC as exc:
        return Try(reason=f"{type(exc).__name__}: {exc}")
    except _DROPPED_EXC as exc:
        if idempotent:
            return Try(reason=f"{type(exc).__name__}: {exc}")
        return Try(HttpResult(GenStatus.ERROR, error=f"{type(exc).__name__}: {exc}"))
    except httpx.TimeoutException as exc:  # read/write timeout: the server may still be working
        return Try(HttpResult(GenStatus.TIMEOUT, error=f"{type(exc).__name__}: {exc}"))
    except httpx.HTTPError as exc:
        return Try(HttpResult(GenStatus.ERROR, error=f"{type(exc).__name__}: {exc}"))
    code = resp.status_code
    if code in TRANSIENT_STATUS or code == 429:
        delay = retry_after_seconds(resp.headers) if code == 429 else None
        return Try(reason=f"HTTP {code}: {_body_text(resp, 200)}", wait_s=delay)
    if code >= 400:
        return Try(HttpResult(GenStatus.ERROR, code=code, error=f"HTTP {code}: {_body_text(resp)}"))
    if not resp.content:
        return Try(HttpResult(GenStatus.OK, data=None, code=code))
    try:
        data = resp.json()
    except ValueError:
        data = resp.text
    return Try(HttpResult(GenStatus.OK, data=data, code=code))


async def call_json(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    payload: Any = None,
    *,
    timeout: httpx.Timeout,
    policy: RetryPolicy,
    idempotent: bool = False,
) -> HttpResult:
    """Send one JSON request with bounded retries on transient failures (see module docstring)."""
    attempts = 0

    async def once(n: int) -> Try[HttpResult]:
        nonlocal attempts
        attempts = n
        outcome = await _attempt(client, method, url, payload, timeout, idempotent)
        if outcome.done is not None:
            outcome.done.attempts = n
        return outcome

    def give_up(why: str) -> HttpResult:
        return HttpResult(GenStatus.ERROR, error=why, attempts=attempts)

    return await with_retries(once, policy, give_up, f"{method} {url}")


class EndpointClient:
    """An httpx.AsyncClient and a concurrency semaphore for one endpoint, per event loop.

    httpx clients and asyncio semaphores belong to the loop that first used them; an engine built
    in sync code may be driven by several `asyncio.run` calls, so both are remade for a new loop.
    """

    def __init__(self, connect_timeout_s: float, max_concurrency: int) -> None:
        self._connect_timeout_s = connect_timeout_s
        self._max = max_concurrency
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: httpx.AsyncClient | None = None
        self._sem: asyncio.Semaphore | None = None

    def _bind(self) -> None:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            limits = httpx.Limits(max_connections=self._max, max_keepalive_connections=self._max)
            timeout = httpx.Timeout(60.0, connect=self._connect_timeout_s)
            self._client = httpx.AsyncClient(timeout=timeout, limits=limits, trust_env=False)
            self._sem = asyncio.Semaphore(self._max)
            self._loop = loop

    @property
    def client(self) -> httpx.AsyncClient:
        self._bind()
        assert self._client is not None
        return self._client

    @property
    def semaphore(self) -> asyncio.Semaphore:
        self._bind()
        assert self._sem is not None
        return self._sem

    async def aclose(self) -> None:
        if self._client is not None and self._loop is asyncio.get_running_loop():
            await self._client.aclose()
        self._client, self._sem, self._loop = None, None, None


async def post_generation(
    http: EndpointClient,
    url: str,
    body: Any,
    timeout: httpx.Timeout,
    policy: RetryPolicy,
    parse: Callable[[Any], tuple[list[int], list[float], str | None]],
    server: str,
) -> Generation:
    """POST one generation request; `parse` turns the JSON into (ids, logprobs, finish reason).
    Transport failures, malformed answers and abort/error finishes come back as statuses."""
    from tritonforge.rollout.engines.base import failed, status_from_finish_reason

    t0 = time.monotonic()
    async with http.semaphore:
        res = await call_json(http.client, "POST", url, body, timeout=timeout, policy=policy)
    latency = time.monotonic() - t0
    if not res.ok:
        return failed(res.status, res.error, latency)
    try:
        ids, logprobs, reason = parse(res.data)
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        return failed(GenStatus.ERROR, f"malformed {server} response: {exc}", latency)
    status = status_from_finish_reason(reason)
    if status not in (GenStatus.OK, GenStatus.LENGTH):
        return failed(status, f"finish_reason={reason}", latency)
    return Generation(
        status=status, token_ids=ids, logprobs=logprobs, finish_reason=reason, latency_s=latency
    )


async def probe(http: EndpointClient, url: str, timeout: httpx.Timeout | float) -> bool:
    """GET `url` once: True on HTTP 200, False on any other answer or transport error."""
    try:
        resp = await http.client.get(url, timeout=timeout)
    except httpx.HTTPError:
        return False
    return resp.status_code == 200
