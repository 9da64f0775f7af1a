"""The rollout workers seen from the driver: an `Agent`-like and an `Engine`-like facade.

Covers: `RolloutPool` (splits a batch of episode jobs into contiguous, balanced chunks, one per
worker, and reassembles the trajectories in job order; a chunk whose worker died is re-sent to
another worker, bounded; a worker that failed is left out until a background task has given it
the newest weights, since Ray restarts it with its initial ones; weight pushes), `RayAgent`
(what `collect`/`measure`/the driver loop call on an Agent: `run(jobs)`, `params`, `engine`) and
`PoolEngine` / `InMemoryPoolEngine` (what `push_weights` calls on an engine: `policy_version`,
`update_weights(path)`, and for in-process engines `load_state_dict(ref)` with an ObjectRef to
the trainer's weights, which each worker resolves from the object store).
Does not cover: the workers themselves (scale.actors) or evaluation (scale.backend).

Seeds: with a per-request seed s, job k of the batch is sampled with seed s + k exactly as one
engine call would do (chunk starting at job k0 gets seed s + k0); workers' engine RNGs (no seed)
differ by `rollout.seed_stride`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tritonforge.config.scale import RolloutRole
from tritonforge.logging_setup import get_logger
from tritonforge.rollout.engines.base import SamplingParams
from tritonforge.types import Generation, GenStatus, Problem, Trajectory

__all__ = ["InMemoryPoolEngine", "PoolEngine", "RayAgent", "RolloutPool", "split_jobs"]

log = get_logger(__name__)

Job = tuple[Problem, int, str]


def split_jobs(n_jobs: int, n_workers: int) -> list[tuple[int, int]]:
    """[start, end) of contiguous chunks, sizes differing by at most one, empty ones left out."""
    base, extra = divmod(n_jobs, max(n_workers, 1))
    out, start = [], 0
    for i in range(n_workers):
        end = start + base + (1 if i < extra else 0)
        if end > start:
            out.append((start, end))
        start = end
    return out


def _actor_errors() -> tuple[type[BaseException], ...]:
    from ray.exceptions import RayActorError

    return (RayActorError,)


class RolloutPool:
    """Rollout worker handles + the newest weights (see the module docstring)."""

    def __init__(
        self,
        workers: list[Any],
        role: RolloutRole,
        errors: tuple[type[BaseException], ...] | None = None,
    ) -> None:
        if not workers:
            raise ValueError("RolloutPool needs at least one worker")
        self.workers, self.role = workers, role
        self.version = 0
        self.latest: tuple[str, Any, int] | None = None  # ("state" | "path", ref or path, version)
        self.stale: set[int] = set()  # failed workers: not used until re-synced
        self._resyncs: dict[int, asyncio.Task] = {}
        self.retried_chunks = 0
        self.resynced = 0
        self.errors = errors or _actor_errors()  # "the worker is gone": re-send, re-sync

    async def run(self, jobs: list[Job], params: SamplingParams) -> list[Trajectory]:
        """Play every job on the workers; trajectories in job order."""
        spans = split_jobs(len(jobs), len(self.workers))
        parts = await asyncio.gather(
            *(self._run_chunk(i, s, jobs[s:e], params) for i, (s, e) in enumerate(spans))
        )
        return [t for part in parts for t in part]

    async def _run_chunk(
        self, first: int, start: int, chunk: list[Job], params: SamplingParams
    ) -> list[Trajectory]:
        if params.seed is not None:
            params = params.model_copy(update={"seed": params.seed + start})
        payload = params.model_dump_json()
        last: BaseException | None = None
        for attempt in range(self.role.max_attempts):
            k = await self._pick(first + attempt)
            try:
                trajs = await self.workers[k].run.remote(chunk, payload)
            except self.errors as exc:
                last = exc
                self.retried_chunks += 1
                self._mark_stale(k)
                log.warning(
                    "rollout worker failed; re-sending its episodes",
                    extra={"fields": {"worker": k, "jobs": len(chunk), "attempt": attempt + 1}},
                )
                continue
            if len(trajs) != len(chunk):
                raise RuntimeError(f"worker {k} returned {len(trajs)} of {len(chunk)} episodes")
            return list(trajs)
        raise RuntimeError(
            f"{len(chunk)} episodes failed on {self.role.max_attempts} rollout workers: {last!r}"
        )

    async def _pick(self, start: int) -> int:
        """The first worker from `start` (round robin) that is in sync; waits for a re-sync
        when every worker is stale."""
        n = len(self.workers)
        while True:
            for j in range(n):
                k = (start + j) % n
                if k not in self.stale:
                    return k
            pending = [t for t in self._resyncs.values() if not t.done()]
            if not pending:
                raise RuntimeError("every rollout worker failed and none could be re-synced")
            await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)

    def _mark_stale(self, k: int) -> None:
        """Take worker k out of use until it (restarted by Ray) holds the newest weights."""
        self.stale.add(k)
        task = self._resyncs.get(k)
        if task is None or task.done():
            self._resyncs[k] = asyncio.get_running_loop().create_task(self._resync(k))

    async def _resync(self, k: int) -> None:
        deadline = asyncio.get_running_loop().time() + self.role.resync_timeout_s
        while asyncio.get_running_loop().time() < deadline:
            latest = self.latest
            try:
                if latest is None:
                    await self.workers[k].info.remote()
                elif not await self._push_one(k, *latest):
                    raise RuntimeError(f"rollout worker {k} refused the weights of v{latest[2]}")
            except self.errors:
                await asyncio.sleep(1.0)  # still restarting
                continue
            if self.latest is latest:  # nothing newer arrived meanwhile
                self.stale.discard(k)
                self.resynced += 1
                log.info(
                    "rollout worker re-synced", extra={"fields": {"worker": k, "v": self.version}}
                )
                return
        log.error("rollout worker %d did not come back within %.0fs", k, self.role.resync_timeout_s)

    async def _push_one(self, k: int, kind: str, what: Any, version: int) -> bool:
        w = self.workers[k]
        method = w.load_state_dict if kind == "state" else w.update_weights
        return bool(await method.remote(what, version))

    async def push(self, kind: str, what: Any, version: int) -> bool:
        """Weights to every worker in sync; stale workers get them from their re-sync task, and a
        worker that fails now becomes stale instead of failing the push. False if a live worker
        refused the weights or none took them."""
        self.latest = (kind, what, version)
        live = [k for k in range(len(self.workers)) if k not in self.stale]
        results = await asyncio.gather(
            *(self._push_one(k, kind, what, version) for k in live), return_exceptions=True
        )
        ok = 0
        for k, r in zip(live, results):
            if isinstance(r, self.errors):
                self._mark_stale(k)
            elif isinstance(r, BaseException):
                raise r
            elif not r:
                return False
            else:
                ok += 1
        if ok:
            self.version = version
        return ok > 0

    async def settle(self, timeout_s: float) -> None:
        """Wait (bounded) for running re-syncs, e.g. before reporting the workers' state."""
        pending = [t for t in self._resyncs.values() if not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=timeout_s)

    def close(self) -> None:
        for t in self._resyncs.values():
            t.cancel()

    async def params(self) -> SamplingParams:
        """The workers' default sampling params (stop tokens filled from the chat template)."""
        return SamplingParams.model_validate_json(await self.workers[0].params_json.remote())

    async def info(self, checksum: bool = True) -> list[dict[str, Any]]:
        out = []
        for k, w in enumerate(self.workers):
            try:
                out.append(await w.info.remote(checksum))
            except self.errors as exc:
                out.append({"index": k, "error": type(exc).__name__})
        return out


class PoolEngine:
    """Engine facade over the pool for weight pushes and versions (generation goes through
    `RayAgent.run`, never through this object)."""

    def __init__(self, pool: RolloutPool) -> None:
        self.pool = pool

    @property
    def policy_version(self) -> int:
        return self.pool.version

    async def update_weights(self, path: str, version: int) -> bool:
        return await self.pool.push("path", path, version)

    async def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        from tritonforge.rollout.engines.base import failed

        return [failed(GenStatus.ERROR, "generate through RayAgent.run") for _ in prompts]

    async def health(self) -> bool:
        return True

    async def aclose(self) -> None:
        """The workers belong to the driver, which stops them."""


class InMemoryPoolEngine(PoolEngine):
    """For in-process engines: weights travel as one object-store copy, no disk."""

    async def load_state_dict(self, state_ref: Any, version: int) -> bool:
        return await self.pool.push("state", state_ref, version)


class RayAgent:
    """What the driver loop needs from an Agent, over the pool."""

    def __init__(self, pool: RolloutPool, engine: PoolEngine, params: SamplingParams) -> None:
        self.pool, self.engine, self.params = pool, engine, params

    async def run(self, jobs: list[Job]) -> list[Trajectory]:
        return await self.pool.run(list(jobs), self.params)
