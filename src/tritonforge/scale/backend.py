"""An `EvalBackend` over evaluation actors: least-outstanding dispatch, requeue on actor death.

Covers: `ActorEvalBackend.evaluate` (JSON in, JSON out through `actor.evaluate.remote(problem_json,
source, settings_json)`; the actor with the fewest requests in flight from this backend gets the
next one, actors that just failed are skipped for `down_s`), requeueing a request whose actor
died (Ray's RayActorError family) or timed out, up to `max_attempts` tries in all, asking another
actor once more when a verdict is `internal_error` or `judge_fault` (the judge's fault, not the
candidate's: e.g. an actor whose fork server was killed with it, or whose device ran out of
memory), and counters (`stats()`). Never raises for a
bad candidate or a dead actor and never returns None: when every try failed the answer is an
`internal_error` verdict saying why.
Does not cover: restarting actors (Ray does, `max_restarts` on the actor; a restarted actor is
simply tried again once its down time is over) or the actors themselves (scale.actors). A request
that times out here is re-sent, but its first copy is not cancelled on the actor: the
evaluator's own phase budgets bound it.

Imports no Ray at module level: tests drive it with fake actors and their own error types.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from tritonforge.config.eval import EvalSettings
from tritonforge.logging_setup import get_logger
from tritonforge.types import Problem, Status, Verdict

__all__ = ["ActorEvalBackend", "ray_retry_errors"]

log = get_logger(__name__)


def ray_retry_errors() -> tuple[type[BaseException], ...]:
    """Errors meaning 'the actor is gone or unreachable, the request may be re-sent'."""
    try:
        from ray.exceptions import GetTimeoutError, RayActorError
    except ImportError:  # no Ray: only timeouts are retried
        return (asyncio.TimeoutError,)
    return (RayActorError, GetTimeoutError, asyncio.TimeoutError)


@dataclass
class _Slot:
    actor: Any
    index: int
    outstanding: int = 0
    down_until: float = 0.0
    failures: int = 0  # consecutive
    done: int = 0


@dataclass
class _Counters:
    requests: int = 0
    verdicts: int = 0
    requeued: int = 0
    rejudged: int = 0  # internal_error verdicts asked again of another actor
    failed: int = 0  # requests answered with internal_error after every try failed
    errors: dict[str, int] = field(default_factory=dict)


class ActorEvalBackend:
    """EvalBackend over a fixed list of actor handles (see the module docstring)."""

    def __init__(
        self,
        actors: list[Any],
        *,
        max_attempts: int = 4,
        down_s: float = 5.0,
        timeout_s: float = 1800.0,
        retry_errors: tuple[type[BaseException], ...] | None = None,
        rejudge_internal: int = 1,
    ) -> None:
        if not actors:
            raise ValueError("ActorEvalBackend needs at least one actor")
        self.slots = [_Slot(a, i) for i, a in enumerate(actors)]
        self.max_attempts, self.down_s, self.timeout_s = max_attempts, down_s, timeout_s
        self.retry_errors = retry_errors or ray_retry_errors()
        self.rejudge_internal = rejudge_internal
        self.counters = _Counters()

    def _pick(self, avoid: set[int]) -> _Slot:
        """Fewest outstanding among actors that are up and not yet tried for this request;
        else (all down or tried) the one whose down time ends first."""
        now = time.monotonic()
        fresh = [s for s in self.slots if s.index not in avoid] or self.slots
        up = [s for s in fresh if s.down_until <= now]
        if up:
            return min(up, key=lambda s: (s.outstanding, s.failures, s.index))
        return min(fresh, key=lambda s: (s.down_until, s.outstanding, s.index))

    async def evaluate(
        self, problem: Problem, source: str, settings: EvalSettings | None = None
    ) -> Verdict:
        """The verdict of `source` on `problem`; requeued on another actor if its actor dies."""
        payload = (
            problem.model_dump_json(),
            source,
            settings.model_dump_json() if settings is not None else None,
        )
        self.counters.requests += 1
        tried: set[int] = set()
        rejudge, last = self.rejudge_internal, "no attempt"
        for attempt in range(1, self.max_attempts + 1):
            slot = self._pick(tried)
            tried.add(slot.index)
            verdict, last, final = await self._attempt(slot, payload, attempt, problem)
            if final:
                self.counters.failed += 1
                return verdict  # type: ignore[return-value]
            if verdict is None:
                continue  # the actor died or timed out: requeued
            if (
                verdict.status in (Status.INTERNAL_ERROR, Status.JUDGE_FAULT)
                and rejudge > 0
                and attempt < self.max_attempts
            ):
                rejudge -= 1  # the judge's fault, not the candidate's: ask another actor
                self.counters.rejudged += 1
                last = f"{verdict.status.value}: {verdict.message[:300]}"
                continue
            self.counters.verdicts += 1
            return verdict
        self.counters.failed += 1
        return _internal(
            problem, f"evaluation failed on {self.max_attempts} actor tries; last: {last}"
        )

    async def _attempt(
        self, slot: _Slot, payload: tuple[str, str, str | None], attempt: int, problem: Problem
    ) -> tuple[Verdict | None, str, bool]:
        """One try on one actor: (verdict, note, final). verdict None: retry elsewhere; final:
        stop with this (internal_error) verdict."""
        wait = slot.down_until - time.monotonic()
        if wait > 0:  # every actor failed recently: give restarts a moment
            await asyncio.sleep(min(wait, self.down_s))
        slot.outstanding += 1
        try:
            out = await asyncio.wait_for(self._call(slot.actor, payload), self.timeout_s)
            verdict = Verdict.model_validate_json(out)
        except asyncio.CancelledError:
            raise
        except self.retry_errors as exc:
            self._failed(slot, exc, attempt, problem)
            return None, f"{type(exc).__name__}: {str(exc)[:300]}", False
        except Exception as exc:  # the actor answered with an error: not worth re-sending
            self._count_error(exc)
            msg = f"evaluation actor {slot.index} raised {exc!r}"[:2000]
            return _internal(problem, msg), msg, True
        finally:
            slot.outstanding -= 1
        slot.failures, slot.down_until = 0, 0.0
        slot.done += 1
        return verdict, "", False

    async def _call(self, actor: Any, payload: tuple[str, str, str | None]) -> str:
        return await actor.evaluate.remote(*payload)

    def _failed(self, slot: _Slot, exc: BaseException, attempt: int, problem: Problem) -> None:
        slot.failures += 1
        slot.down_until = time.monotonic() + self.down_s
        self._count_error(exc)
        if attempt < self.max_attempts:
            self.counters.requeued += 1
        log.warning(
            "evaluation actor failed; requeueing",
            extra={
                "fields": {
                    "actor": slot.index,
                    "problem": problem.id,
                    "attempt": attempt,
                    "error": type(exc).__name__,
                }
            },
        )

    def _count_error(self, exc: BaseException) -> None:
        name = type(exc).__name__
        self.counters.errors[name] = self.counters.errors.get(name, 0) + 1

    def stats(self) -> dict[str, Any]:
        """Counters plus per-actor outstanding/done/failures."""
        c = self.counters
        return {
            "requests": c.requests,
            "verdicts": c.verdicts,
            "requeued": c.requeued,
            "rejudged": c.rejudged,
            "failed": c.failed,
            "errors": dict(c.errors),
            "actors": [
                {"outstanding": s.outstanding, "done": s.done, "failures": s.failures}
                for s in self.slots
            ],
        }

    async def aclose(self) -> None:
        """Nothing to release: the actors belong to the driver."""


def _internal(problem: Problem, message: str) -> Verdict:
    return Verdict(status=Status.INTERNAL_ERROR, problem_id=problem.id, message=message)
