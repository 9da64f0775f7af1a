"""The shared retry policy and least-outstanding choice (tritonforge.retry).

Covers: the backoff schedule (doubling, cap, jitter range, Retry-After with its cap), the loop's
two ways to give up (attempts, waiting budget) with the reason kept, a final answer ending the
loop at once, an attempt's own cap on the wait, and LeastOutstanding's choice and rotation.
The HTTP clients built on it are tested in test_server.py (evaluation client) and
test_engines.py (engine clients, balancer).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from tritonforge.retry import LeastOutstanding, RetryPolicy, Try, retry_after_seconds, with_retries


def test_backoff_schedule() -> None:
    p = RetryPolicy(backoff_s=0.5, max_backoff_s=3.0)
    assert [p.backoff(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    jittered = RetryPolicy(backoff_s=1.0, jitter=True)
    assert all(0.5 <= jittered.backoff(1) <= 1.0 for _ in range(50))
    assert RetryPolicy(max_retry_after_s=5.0).delay(1, 60.0) == 5.0
    assert RetryPolicy().delay(1, 0.25) == 0.25
    assert retry_after_seconds({"retry-after": "2.5"}) == 2.5
    assert retry_after_seconds({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) is None
    assert retry_after_seconds({}) is None


def _run(attempt, policy: RetryPolicy) -> str:
    return asyncio.run(with_retries(attempt, policy, lambda why: f"gave up: {why}"))


def test_gives_up_after_the_attempts_with_the_last_reason() -> None:
    seen: list[int] = []

    async def attempt(n: int) -> Try[str]:
        seen.append(n)
        return Try(reason=f"HTTP 503 (try {n})")

    out = _run(attempt, RetryPolicy(max_attempts=3, backoff_s=0.0))
    assert seen == [1, 2, 3]
    assert out.startswith("gave up: gave up after 3 attempt(s)") and "try 3" in out


def test_gives_up_when_the_next_wait_would_pass_the_budget() -> None:
    async def attempt(n: int) -> Try[str]:
        return Try(reason="HTTP 429", wait_s=0.3)

    t0 = time.monotonic()
    out = _run(attempt, RetryPolicy(max_attempts=10, budget_s=0.5))
    assert "after 2 attempt(s)" in out and "retry budget 0.5 s" in out
    assert 0.25 < time.monotonic() - t0 < 0.6


def test_a_final_answer_ends_the_loop_and_max_wait_caps_the_delay() -> None:
    async def attempt(n: int) -> Try[str]:
        if n < 3:
            return Try(reason="connect refused", max_wait_s=0.01)  # another server is up
        return Try("ok")

    t0 = time.monotonic()
    assert _run(attempt, RetryPolicy(max_attempts=5, backoff_s=10.0)) == "ok"
    assert time.monotonic() - t0 < 1.0


@dataclass
class Endpoint:
    name: str
    outstanding: int = 0


def test_least_outstanding_picks_the_idlest_and_rotates_ties() -> None:
    a, b, c = Endpoint("a"), Endpoint("b"), Endpoint("c")
    lo: LeastOutstanding[Endpoint] = LeastOutstanding()
    a.outstanding, b.outstanding, c.outstanding = 3, 1, 2
    assert lo.pick([a, b, c]) is b
    a.outstanding = b.outstanding = c.outstanding = 0
    assert [lo.pick([a, b, c]).name for _ in range(6)] == ["b", "c", "a", "b", "c", "a"]
    with lo.track(a):
        assert a.outstanding == 1 and lo.pick([a]) is a
    assert a.outstanding == 0 and lo.pick([]) is None
