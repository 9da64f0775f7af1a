"""Several engine endpoints behind one client-side balancer.

Covers: routing each prompt to the healthy endpoint with the fewest outstanding requests (ties
rotate; tritonforge.retry.LeastOutstanding, the same choice the evaluation client makes), marking an endpoint unhealthy when a call fails and its health check then
fails, re-checking it after `health_recheck_s`, re-sending a failed prompt once to another
endpoint, and fanning weight updates out to every endpoint (an endpoint whose update failed is
benched until a later update succeeds, so stale weights never serve). Does not cover: the
endpoints themselves (any `Engine`), prefix-cache-aware routing (an sglang-router front
does that and can be used as a single `sglang` endpoint instead).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from tritonforge.config.engine import BalancedEngineConfig
from tritonforge.logging_setup import get_logger
from tritonforge.retry import LeastOutstanding
from tritonforge.rollout.engines.base import Engine, SamplingParams, build_engine, failed
from tritonforge.types import Generation, GenStatus

log = get_logger(__name__)


@dataclass
class _Slot:
    engine: Engine
    name: str
    outstanding: int = 0
    healthy: bool = True
    recheck_at: float = 0.0
    stale: bool = False  # last weight update failed here


class BalancedEngine:
    """Least-outstanding-requests balancer over engines (see module docstring)."""

    def __init__(
        self,
        engines: list[Engine],
        *,
        names: list[str] | None = None,
        health_recheck_s: float = 5.0,
    ) -> None:
        if not engines:
            raise ValueError("BalancedEngine needs at least one engine")
        names = names or [f"endpoint{i}" for i in range(len(engines))]
        self._slots = [_Slot(engine=e, name=n) for e, n in zip(engines, names)]
        self._recheck_s = health_recheck_s
        self._version = 0
        self._balance: LeastOutstanding[_Slot] = LeastOutstanding()

    @classmethod
    def from_config(cls, config: BalancedEngineConfig) -> BalancedEngine:
        """One engine of kind `config.backend` per URL (config.endpoint), balanced."""
        if not config.urls:
            raise ValueError("balanced engine needs `urls`")
        engines = [build_engine(config.endpoint(u)) for u in config.urls]  # type: ignore[arg-type]
        return cls(engines, names=list(config.urls), health_recheck_s=config.health_recheck_s)

    @property
    def policy_version(self) -> int:
        return self._version

    @property
    def outstanding(self) -> list[int]:
        """In-flight requests per endpoint (for tests and metrics)."""
        return [s.outstanding for s in self._slots]

    async def _usable(self) -> list[_Slot]:
        now = time.monotonic()
        for slot in self._slots:
            if not slot.healthy and not slot.stale and now >= slot.recheck_at:
                slot.healthy = await slot.engine.health()
                slot.recheck_at = now + self._recheck_s
                if slot.healthy:
                    log.info("endpoint healthy again", extra={"fields": {"endpoint": slot.name}})
        return [s for s in self._slots if s.healthy and not s.stale]

    def _pick(self, usable: list[_Slot], exclude: set[int]) -> _Slot | None:
        return self._balance.pick([s for s in usable if id(s) not in exclude])

    async def _mark_if_down(self, slot: _Slot) -> None:
        if not await slot.engine.health():
            slot.healthy = False
            slot.recheck_at = time.monotonic() + self._recheck_s
            log.warning("endpoint unhealthy", extra={"fields": {"endpoint": slot.name}})

    async def _route_one(self, prompt: list[int], params: SamplingParams) -> Generation:
        tried: set[int] = set()
        gen = failed(GenStatus.ERROR, "no healthy endpoint")
        for _ in range(2):  # first choice, then one re-send elsewhere after an error
            slot = self._pick(await self._usable(), tried)
            if slot is None:
                return gen
            tried.add(id(slot))
            with self._balance.track(slot):
                gen = (await slot.engine.generate([prompt], params))[0]
            if gen.status is not GenStatus.ERROR:
                return gen
            await self._mark_if_down(slot)
        return gen

    async def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        """Route each prompt separately. A request's seed stays per-row (seed + index)."""
        rows = [
            params if params.seed is None else params.model_copy(update={"seed": params.seed + i})
            for i in range(len(prompts))
        ]
        return list(await asyncio.gather(*(self._route_one(p, r) for p, r in zip(prompts, rows))))

    async def update_weights(self, path: str, version: int) -> bool:
        """Update every endpoint; True only if all succeeded (failed ones are benched)."""
        results = await asyncio.gather(
            *(s.engine.update_weights(path, version) for s in self._slots)
        )
        for slot, ok in zip(self._slots, results):
            slot.stale = not ok
            if not ok:
                log.warning(
                    "weight update failed; endpoint benched",
                    extra={"fields": {"endpoint": slot.name}},
                )
        if any(results):
            self._version = version
        return all(results)

    async def health(self) -> bool:
        return bool(await self._usable())

    async def aclose(self) -> None:
        await asyncio.gather(*(s.engine.aclose() for s in self._slots))
