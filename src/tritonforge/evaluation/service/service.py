"""The evaluation service core: per-device scheduling, a verdict cache, quarantine and draining.

Covers: `EvalService.evaluate(job)` (cache lookup, sharing of identical in-flight requests,
admission with backpressure, a FIFO queue feeding N concurrent evaluations per device, run in a
thread pool so the event loop stays free, per-request deadlines, cancellation of queued work
whose clients went away), device state (busy, faults, quarantine after repeated judge errors
confirmed by a probe with a known-good built-in solution, periodic re-probes) and graceful
shutdown. Timing exclusivity and memory admission per GPU are the judge's (judge/device_gate.py,
judge/admission.py): an evaluation thread waits there, inside the pool. `judge_fault` verdicts
are counted apart (metric `tritonforge_eval_judge_faults`) and never cached.
Does not cover: HTTP (server.py), judging (judge/evaluator.py), KernelBench shapes (compat.py).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from tritonforge.config.eval import EvalSettings
from tritonforge.config.server import ServerConfig
from tritonforge.evaluation.service.metrics import ServiceMetrics
from tritonforge.evaluation.service.state import (
    DeviceState,
    VerdictCache,
    discover_devices,
    probe_problem,
    sha256_text,
)
from tritonforge.logging_setup import get_logger
from tritonforge.types import Problem, Status, Verdict

log = get_logger("evaluation.service")

WORKER_DIED = {Status.CRASH, Status.RESOURCE_LIMIT}


class QueueFull(Exception):
    """The queue cannot take the request now; retry after `retry_after` seconds."""

    def __init__(self, message: str, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after


class Unavailable(Exception):
    """The service takes no work now (draining, or every device quarantined)."""

    def __init__(self, message: str, retry_after: int = 30):
        super().__init__(message)
        self.retry_after = retry_after


@dataclass
class Job:
    """One evaluation request after validation."""

    problem: Problem
    source: str
    settings: EvalSettings
    deadline: float  # time.monotonic() by which an answer is due
    preferred: int | None = None  # preferred device index (a hint)


@dataclass
class _Pending:
    future: asyncio.Future
    task: asyncio.Task | None = None
    waiters: int = 0
    started: bool = False


class EvalService:
    """Schedules evaluations over the devices of one Evaluator."""

    def __init__(self, cfg: ServerConfig, evaluator: Any = None):
        self.cfg = cfg
        self.metrics = ServiceMetrics()
        self.cache = VerdictCache(cfg.cache_entries)
        self.devices, self.device_type = discover_devices(cfg)
        self._owns_evaluator = evaluator is None
        if evaluator is None:
            from tritonforge.evaluation.judge.evaluator import Evaluator

            evaluator = Evaluator(cfg.eval)
        self.evaluator = evaluator
        self.queued = 0
        self.draining = False
        self.started_at = time.monotonic()
        self._inflight: dict[str, _Pending] = {}
        self._tasks: set[asyncio.Task] = set()
        self._cond: asyncio.Condition | None = None
        self._pool = ThreadPoolExecutor(
            max_workers=sum(d.workers for d in self.devices), thread_name_prefix="tf-eval"
        )
        self._side_pool = ThreadPoolExecutor(
            max_workers=len(self.devices) + 1, thread_name_prefix="tf-probe"
        )
        self._run_ema = 5.0  # seconds per evaluation, for Retry-After estimates
        self._reprobe: asyncio.Task | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        self._cond = asyncio.Condition()
        loop = asyncio.get_running_loop()
        if self.cfg.warmup:
            for d in self.devices:
                fut = loop.run_in_executor(self._side_pool, self.evaluator.server, d.name)
                fut.add_done_callback(lambda f, n=d.name: self._warm_done(f, n))
        self._reprobe = asyncio.create_task(self._reprobe_loop())

    @staticmethod
    def _warm_done(fut: asyncio.Future, name: str) -> None:
        if fut.exception() is not None:
            log.warning("fork server for %s failed to start: %s", name, fut.exception())

    async def drain(self, timeout: float | None = None) -> bool:
        """Stop admitting work and wait for what is queued or running. True if all finished."""
        self.draining = True
        deadline = time.monotonic() + (self.cfg.drain_timeout_s if timeout is None else timeout)
        while self._tasks and time.monotonic() < deadline:
            await asyncio.wait(set(self._tasks), timeout=max(0.0, deadline - time.monotonic()))
        return not self._tasks

    async def aclose(self, timeout: float | None = None) -> None:
        finished = await self.drain(timeout)
        if not finished:
            log.warning("shutting down with %d evaluations unfinished", len(self._tasks))
        for t in [*self._tasks, self._reprobe]:
            if t is not None:
                t.cancel()
        if self._owns_evaluator:
            await asyncio.to_thread(self.evaluator.close)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._side_pool.shutdown(wait=False, cancel_futures=True)

    # -- state -------------------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        healthy = sum(not d.quarantined for d in self.devices)
        status = "ok"
        if self.draining:
            status = "draining"
        elif healthy == 0:
            status = "unavailable"
        elif healthy < len(self.devices):
            status = "degraded"
        return {
            "status": status,
            "devices": len(self.devices),
            "healthy_devices": healthy,
            "busy": sum(d.busy for d in self.devices),
            "queued": self.queued,
            "uptime_s": round(time.monotonic() - self.started_at, 1),
        }

    def devices_json(self) -> dict[str, Any]:
        judged = getattr(self.evaluator, "device_stats", dict)()  # budget, timings per device
        return {
            "device_type": self.device_type,
            "queued": self.queued,
            "queue_size": self.cfg.queue_size,
            "cache_entries": len(self.cache),
            "devices": [{**d.to_json(), "judge": judged.get(d.name)} for d in self.devices],
        }

    @property
    def in_flight(self) -> int:
        """Evaluations queued or running (and probes)."""
        return len(self._tasks)

    def free_slots(self) -> int:
        return sum(max(0, d.workers - d.busy) for d in self.devices if not d.quarantined)

    def retry_after(self) -> int:
        slots = max(1, sum(d.workers for d in self.devices if not d.quarantined))
        return int(min(60, max(1, math.ceil(self._run_ema * (self.queued + 1) / slots))))

    def admit(self, n: int) -> None:
        """Raise QueueFull/Unavailable unless `n` more evaluations fit now."""
        if self.draining:
            raise Unavailable("the server is shutting down", retry_after=5)
        if all(d.quarantined for d in self.devices):
            reasons = "; ".join(f"{d.name}: {d.reason}" for d in self.devices)
            raise Unavailable(f"every device is quarantined ({reasons})")
        if self.queued + n > self.cfg.queue_size + self.free_slots():
            raise QueueFull(
                f"queue full ({self.queued} waiting, limit {self.cfg.queue_size})",
                self.retry_after(),
            )

    def cache_key(self, job: Job) -> str:
        s = job.settings.model_copy(deep=True)
        s.device = self.devices[0].kind  # placement is the server's; the device type counts
        p = job.problem
        payload = {
            "reference": sha256_text(p.reference_src),
            "candidate": sha256_text(job.source),
            "settings": s.cache_key(),
            "device_type": self.device_type,
            "problem": [p.atol, p.rtol, p.flops, p.bytes_moved],
        }
        return sha256_text(json.dumps(payload, sort_keys=True, default=str))

    # -- evaluation --------------------------------------------------------------------------
    async def evaluate(self, job: Job, admitted: bool = False) -> Verdict:
        """Answer `job`. Raises QueueFull/Unavailable (before queueing) unless `admitted`."""
        key = self.cache_key(job)
        hit = self.cache.get(key)
        if hit is not None:
            self.metrics.cache_hits.inc()
            return self._copy(hit, job, cached=True)
        pending = self._inflight.get(key)
        shared = pending is not None
        if pending is None:
            if not admitted:
                self.admit(1)
            self.metrics.cache_misses.inc()
            pending = _Pending(asyncio.get_running_loop().create_future())
            self._inflight[key] = pending
            pending.task = asyncio.create_task(self._execute(job, key, pending))
            self._tasks.add(pending.task)
            pending.task.add_done_callback(self._tasks.discard)
        else:
            self.metrics.cache_hits.inc()
        pending.waiters += 1
        try:
            left = max(0.0, job.deadline - time.monotonic())
            verdict = await asyncio.wait_for(asyncio.shield(pending.future), timeout=left)
        except asyncio.TimeoutError:
            return self._deadline_verdict(job, pending.started)
        finally:
            pending.waiters -= 1
            if pending.waiters == 0 and not pending.started and pending.task is not None:
                pending.task.cancel()  # nobody waits for it any more: drop it from the queue
                if self._inflight.get(key) is pending:
                    del self._inflight[key]
        return self._copy(verdict, job, cached=shared)

    async def _execute(self, job: Job, key: str, pending: _Pending) -> None:
        try:
            t_queue = time.monotonic()
            device = await self._acquire(job.preferred)
            queued = time.monotonic() - t_queue
            pending.started = True
            try:
                verdict = await self._run(job, device)
            finally:
                await self._release(device)
            if queued > 0.0005:  # the service's queue, before the judge's own phases
                verdict.phase_seconds = {"queue": round(queued, 4), **verdict.phase_seconds}
            self.metrics.observe_phases(verdict.phase_seconds)
            if verdict.status.value not in self.cfg.cache_skip:
                self.cache.put(key, verdict)
            pending.future.set_result(verdict)
        except asyncio.CancelledError:
            if not pending.future.done():  # waiters (if any) still get an answer
                pending.future.set_result(
                    Verdict(status=Status.INTERNAL_ERROR, message="evaluation cancelled")
                )
            raise
        except Unavailable as exc:
            pending.future.set_result(
                Verdict(status=Status.INTERNAL_ERROR, message=f"not evaluated: {exc}")
            )
        except Exception as exc:  # a bug here must still answer the request
            log.exception("scheduler failure")
            pending.future.set_result(
                Verdict(status=Status.INTERNAL_ERROR, message=f"scheduler error: {exc!r}")
            )
        finally:
            if self._inflight.get(key) is pending:
                del self._inflight[key]

    async def _run(self, job: Job, device: DeviceState) -> Verdict:
        settings = job.settings.model_copy(deep=True)
        settings.device, settings.device_index = device.kind, device.index
        t0 = time.monotonic()
        loop = asyncio.get_running_loop()
        verdict = await loop.run_in_executor(
            self._pool, self._judge, job.problem, job.source, settings
        )
        self._observe(device, verdict, time.monotonic() - t0)
        return verdict

    def _judge(self, problem: Problem, source: str, settings: EvalSettings) -> Verdict:
        try:
            return self.evaluator.evaluate(problem, source, settings)
        except Exception as exc:  # the judge promises not to raise; do not rely on it
            log.exception("judge raised on %s", problem.id)
            return Verdict(status=Status.INTERNAL_ERROR, message=f"evaluator error: {exc!r}")

    async def _acquire(self, preferred: int | None) -> DeviceState:
        assert self._cond is not None, "EvalService.start() was not awaited"
        self.queued += 1
        self.metrics.queue_depth.set(self.queued)
        try:
            async with self._cond:
                while True:
                    healthy = [d for d in self.devices if not d.quarantined]
                    if not healthy:
                        raise Unavailable("every device is quarantined")
                    free = [d for d in healthy if d.busy < d.workers]
                    if free:
                        pick = next((d for d in free if d.index == preferred), None) or min(
                            free, key=lambda d: d.busy / d.workers
                        )
                        pick.busy += 1
                        self.metrics.busy.labels(pick.name).set(pick.busy)
                        return pick
                    await self._cond.wait()
        finally:
            self.queued -= 1
            self.metrics.queue_depth.set(self.queued)

    async def _release(self, device: DeviceState) -> None:
        assert self._cond is not None
        async with self._cond:
            device.busy -= 1
            self.metrics.busy.labels(device.name).set(device.busy)
            self._cond.notify_all()

    # -- outcomes, quarantine ------------------------------------------------------------------
    def _observe(self, device: DeviceState, v: Verdict, seconds: float) -> None:
        device.evaluated += 1
        self.metrics.run_seconds.labels(device.name).observe(seconds)
        self._run_ema = 0.9 * self._run_ema + 0.1 * seconds
        if v.status in WORKER_DIED:
            self.metrics.worker_crashes.labels(device.name).inc()
        if v.status.is_fault:
            device.faults[v.status.value] += 1
        if v.status.is_judge_fault:  # load, not a broken device: no quarantine count
            device.judge_faults += 1
            self.metrics.judge_faults.labels(device.name).inc()
        if v.status is Status.INTERNAL_ERROR and v.phase not in ("reference", "static"):
            device.consecutive_errors += 1
            self.metrics.judge_errors.labels(device.name).inc()
            if device.consecutive_errors >= self.cfg.quarantine_after and not device.probing:
                task = asyncio.create_task(self.probe(device))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        else:
            device.consecutive_errors = 0

    async def probe(self, device: DeviceState) -> bool:
        """Judge a known-good solution on `device`; quarantine it on failure, restore on success."""
        device.probing = True
        try:
            problem = await asyncio.to_thread(probe_problem, device.kind)
            settings = self.cfg.eval.model_copy(deep=True)
            settings.correctness_trials, settings.measure_performance = 2, False
            settings.device, settings.device_index = device.kind, device.index
            loop = asyncio.get_running_loop()
            v = await loop.run_in_executor(
                self._side_pool, self._judge, problem, problem.solution_src or "", settings
            )
        except Exception as exc:
            v = Verdict(status=Status.INTERNAL_ERROR, message=f"probe failed to run: {exc!r}")
        finally:
            device.probing = False
        ok = v.status is Status.CORRECT
        if ok:
            device.consecutive_errors = 0
            if device.quarantined:
                log.warning("device %s passed its probe: back in service", device.name)
            device.quarantined, device.reason = False, ""
        else:
            device.quarantined = True
            device.reason = f"probe ({v.status.value}): {v.message[:300]}"
            log.error("device %s quarantined: %s", device.name, device.reason)
        self.metrics.quarantined.labels(device.name).set(0 if ok else 1)
        if self._cond is not None:
            async with self._cond:
                self._cond.notify_all()  # queued jobs re-check which devices are usable
        return ok

    async def _reprobe_loop(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.reprobe_s)
            for d in self.devices:
                if d.quarantined and not d.probing:
                    await self.probe(d)

    # -- verdict helpers -----------------------------------------------------------------------
    @staticmethod
    def _copy(v: Verdict, job: Job, cached: bool) -> Verdict:
        out = v.model_copy(deep=True)
        out.problem_id = job.problem.id
        out.cached = cached or v.cached
        return out

    def _deadline_verdict(self, job: Job, started: bool) -> Verdict:
        where = "running" if started else "waiting in the queue"
        return Verdict(
            status=Status.TIMEOUT,
            phase="deadline" if started else "queue",
            problem_id=job.problem.id,
            mode=job.settings.mode,
            message=f"no answer within the request's deadline (still {where}); "
            "the server is busy or the deadline is too short",
        )
