"""Bounded retries of transient I/O, and the least-outstanding choice among endpoints.

Covers: `RetryPolicy` (attempts, a budget on total waiting, exponential backoff with an optional
cap and jitter, a cap on a server's Retry-After), `retry_after_seconds` (a Retry-After header
given in seconds), `Try` (what one attempt decided: done, or retry after a delay and why),
`with_retries` (the loop: attempts until one is final, the attempts or the budget run out) and
`LeastOutstanding` (pick the endpoint with the fewest requests in flight; ties rotate). One
policy and one balancer serve the evaluation client (evaluation.client) and the engine clients
(rollout.engines.http, rollout.engines.balancer). Does not cover: what counts as transient (each
client classifies its own errors) or any HTTP library: nothing here imports httpx.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from tritonforge.logging_setup import get_logger

__all__ = [
    "LeastOutstanding",
    "RetryPolicy",
    "Try",
    "retry_after_seconds",
    "with_retries",
]

log = get_logger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """At most `max_attempts` tries, waiting backoff_s * 2**k between them (capped at
    `max_backoff_s`; with `jitter`, a random 50-100% of it), never past `budget_s` of waiting in
    total. A server's Retry-After replaces the backoff, capped at `max_retry_after_s`."""

    max_attempts: int = 4
    budget_s: float = 60.0
    backoff_s: float = 0.5
    max_retry_after_s: float = 30.0
    max_backoff_s: float = float("inf")
    jitter: bool = False

    def backoff(self, attempt: int) -> float:
        """Delay after failed attempt number `attempt` (1-based)."""
        delay = min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1))
        return delay * (0.5 + random.random() / 2) if self.jitter else delay

    def delay(self, attempt: int, server_delay: float | None) -> float:
        if server_delay is not None:
            return min(server_delay, self.max_retry_after_s)
        return self.backoff(attempt)


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """Seconds from a Retry-After header given as a number (HTTP dates are ignored)."""
    raw = (headers.get("retry-after") or "").strip()
    try:
        return max(0.0, float(raw)) if raw else None
    except ValueError:
        return None


@dataclass
class Try(Generic[T]):
    """One attempt's decision: `done` (final, success or not) or a retry, with the reason and
    an optional server-requested delay (`wait_s`, e.g. Retry-After) or a cap on the delay."""

    done: T | None = None
    reason: str = ""
    wait_s: float | None = None
    max_wait_s: float | None = None

    @property
    def final(self) -> bool:
        return self.done is not None


async def with_retries(
    attempt: Callable[[int], Awaitable[Try[T]]],
    policy: RetryPolicy,
    give_up: Callable[[str], T],
    what: str = "request",
) -> T:
    """Call `attempt(n)` for n = 1, 2, ... until it is final; after the last attempt, or when the
    next wait would exceed the budget, return `give_up(why)` (why: attempts, time, last reason)."""
    start = time.monotonic()
    for n in range(1, policy.max_attempts + 1):
        outcome = await attempt(n)
        if outcome.final:
            return outcome.done  # type: ignore[return-value]
        spent = time.monotonic() - start
        if n == policy.max_attempts:
            return give_up(f"gave up after {n} attempt(s) in {spent:.1f} s: {outcome.reason}")
        delay = policy.delay(n, outcome.wait_s)
        if outcome.max_wait_s is not None:
            delay = min(delay, outcome.max_wait_s)
        if spent + delay > policy.budget_s:
            return give_up(
                f"gave up after {n} attempt(s) in {spent:.1f} s "
                f"(retry budget {policy.budget_s:g} s): {outcome.reason}"
            )
        log.debug("retrying %s in %.2f s: %s", what, delay, outcome.reason)
        await asyncio.sleep(delay)
    raise AssertionError("unreachable: max_attempts >= 1")  # pragma: no cover


class Counted(Protocol):
    """An endpoint with a count of requests in flight."""

    outstanding: int


E = TypeVar("E", bound=Counted)


class LeastOutstanding(Generic[E]):
    """Picks, among candidate endpoints, one with the fewest requests in flight; ties rotate so
    that idle endpoints share the load. `track` counts a request while it runs."""

    def __init__(self) -> None:
        self._turn = 0

    def pick(self, candidates: Sequence[E]) -> E | None:
        if not candidates:
            return None
        least = min(c.outstanding for c in candidates)
        ties = [c for c in candidates if c.outstanding == least]
        chosen = ties[self._turn % len(ties)]
        self._turn += 1
        return chosen

    @staticmethod
    @contextmanager
    def track(endpoint: E) -> Iterator[E]:
        endpoint.outstanding += 1
        try:
            yield endpoint
        finally:
            endpoint.outstanding -= 1
