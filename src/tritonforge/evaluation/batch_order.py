"""Which job a batch of judgements starts next: memory-heavy problems kept apart, light ones around.

A batch (`tritonforge eval-dir`, the KernelBench benchmarks) judges many (problem, candidate)
jobs with `workers` in flight. Memory admission (judge/admission.py) lets only so many
evaluations share a device; KernelBench level 1 has dozens of problems of 75-100 GiB per
evaluation, one at a time on an H200, and they come in clusters by problem number. Started in
problem order, several of them are in flight at once, all but one waiting for memory, while the
light problems that could have run beside them are not started.

Covers: `device_share` (a problem's estimated evaluation bytes over the device's budget, from
one forward on the meta device: problems/workload.py; None where the reference cannot run
there, which counts as light), `estimate_shares` / `shares_for` (of many, under evaluation
settings), `is_heavy` (a share above 1/workers: that
many could not run together), `Feed` (the next job to start) and `run_jobs` (a thread pool fed
by a `Feed`, stopping at a deadline). The rule of `Feed`, with `fit` the number of heavy jobs
in flight that fit together (their shares summed, in start order, up to 1):
- while heavy jobs remain and fewer than `fit` + 1 are in flight, start the next heavy one: one
  runs (or as many as fit together) and one more is queued at memory admission, so the device's
  memory chain never waits for a thread; otherwise start the next light one; when one class is
  exhausted, the other;
- a job counts against `workers` unless it is the one heavy job that cannot fit beside the heavy
  ones in flight: that one waits for memory and holds none (admission.py), so at most
  `workers` + 1 jobs are in flight and at most `workers` run (when shares are right).
With 4 workers and level 1 this keeps one large problem running, the next one queued and three
light ones beside them; when large problems outnumber light ones the light ones still run three
at a time beside the chain of large ones and finish first. Each class starts in its original
order; nothing heavy (the CPU: no budget) leaves the original order and `workers` unchanged.
Results are the caller's to report in the original order (`run_jobs` gives each job's index).
Does not cover: admission itself (judge/admission.py), what a job does (the caller's).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def is_heavy(share: float | None, workers: int) -> bool:
    """More than 1/workers of the device per evaluation: `workers` of them cannot run together."""
    return share is not None and share > 1.0 / max(1, workers)


def device_share(reference_src: str, capacity: int, context_bytes: int) -> float | None:
    """Estimated bytes of one evaluation of the problem over the device's budget `capacity`
    (inputs, outputs and parameters of one forward on the meta device; the workspace guessed as
    one more output, as reference.meta_footprint does). None when the reference cannot run on
    the meta device."""
    from tritonforge.evaluation.judge.admission import Footprint, evaluation_bytes
    from tritonforge.problems.workload import measure_workload

    try:
        w = measure_workload(reference_src)
    except Exception:  # a reference the meta device cannot run: no estimate, counted light
        return None
    fp = Footprint(w.input_bytes, w.output_bytes, w.output_bytes, w.param_bytes)
    return evaluation_bytes(fp, context_bytes) / capacity


def estimate_shares(
    sources: Sequence[str], capacity: int, context_bytes: int
) -> list[float | None]:
    """`device_share` of each reference source (each distinct source estimated once); all None
    when `capacity` is unbounded (the CPU without a memory setting: nothing is heavy)."""
    if capacity >= 1 << 60:
        return [None] * len(sources)
    cache: dict[str, float | None] = {}
    for src in sources:
        if src not in cache:
            cache[src] = device_share(src, capacity, context_bytes)
    return [cache[src] for src in sources]


def shares_for(sources: Sequence[str], settings: Any, device: str) -> list[float | None]:
    """`estimate_shares` on `device` under evaluation `settings` (its memory budget and worker
    context: judge/resources.py)."""
    from tritonforge.evaluation.judge.resources import capacity

    try:
        cap = capacity(settings, device)
    except Exception:  # no such device here: the evaluations will say so, in the given order
        return [None] * len(sources)
    context = settings.worker_context_mb << 20 if device != "cpu" else 0
    return estimate_shares(sources, cap, context)


class Feed:
    """The jobs of a batch, handed out one at a time by the rule of the module docstring."""

    def __init__(self, shares: Sequence[float | None], workers: int):
        self.workers = max(1, workers)
        self.shares = [s or 0.0 for s in shares]
        heavy = [is_heavy(s, self.workers) for s in shares]
        self._heavy = deque(i for i, h in enumerate(heavy) if h)
        self._light = deque(i for i, h in enumerate(heavy) if not h)
        self.heavy_in_flight: list[int] = []  # in start order
        self.light_in_flight = 0
        self.light_share = 0.0  # summed shares of the light jobs in flight

    def __len__(self) -> int:
        return len(self._heavy) + len(self._light)

    def _fit(self, heavies: list[int]) -> int:
        """How many of `heavies` (in start order) fit the device together."""
        total, n = 0.0, 0
        for i in heavies:
            total += self.shares[i]
            if total > 1.0 and n:
                break
            n += 1
        return n

    def _slots_used(self, heavies: list[int], lights: int) -> int:
        waiting = min(1, len(heavies) - self._fit(heavies))  # the one queued at admission
        return lights + len(heavies) - waiting

    def next(self) -> int | None:
        """The index of the job to start now, or None (nothing left, or no slot free)."""
        want_heavy = len(self.heavy_in_flight) < self._fit(self.heavy_in_flight) + 1
        tries = (self._heavy_now, self._light_now)
        for attempt in tries if want_heavy else tries[::-1]:
            index = attempt()
            if index is not None:
                return index
        return None

    def _heavy_now(self) -> int | None:
        if not self._heavy:
            return None
        after = [*self.heavy_in_flight, self._heavy[0]]
        if self._slots_used(after, self.light_in_flight) > self.workers:
            return None
        self.heavy_in_flight.append(self._heavy.popleft())
        return after[-1]

    def _heavy_reserve(self) -> float:
        """The device share the chain of heavy jobs needs at any time: the heavy ones in flight
        that fit together, or any single one in flight or next to start."""
        fit = self.heavy_in_flight[: self._fit(self.heavy_in_flight)]
        singles = [self.shares[i] for i in self.heavy_in_flight]
        if self._heavy:
            singles.append(self.shares[self._heavy[0]])
        return max([sum(self.shares[i] for i in fit), *singles])

    def _light_now(self) -> int | None:
        """The first light job that fits beside the heavy chain and the light jobs in flight
        (any, when nothing is in flight), if a slot is free."""
        if not self._light:
            return None
        if self._slots_used(self.heavy_in_flight, self.light_in_flight + 1) > self.workers:
            return None
        room = 1.0 - self._heavy_reserve() - self.light_share
        idle = not self.heavy_in_flight and not self.light_in_flight
        pick = next((i for i in self._light if idle or self.shares[i] <= room), None)
        if pick is None:
            return None
        self._light.remove(pick)
        self.light_in_flight += 1
        self.light_share += self.shares[pick]
        return pick

    def done(self, index: int) -> None:
        if index in self.heavy_in_flight:
            self.heavy_in_flight.remove(index)
        else:
            self.light_in_flight -= 1
            self.light_share -= self.shares[index]

    def order(self) -> list[int]:
        """The start order if jobs finished in the order they started (a dry run of this feed:
        it is consumed)."""
        started: list[int] = []
        flight: deque[int] = deque()
        while len(self) or flight:
            i = self.next()
            if i is None:
                self.done(flight.popleft())
                continue
            started.append(i)
            flight.append(i)
        return started


def run_jobs(
    run: Callable[[T], R],
    jobs: Sequence[T],
    shares: Sequence[float | None] | None,
    workers: int,
    on_done: Callable[[int, T, R], Any],
    deadline: float = math.inf,
) -> int:
    """Run `jobs` on a thread pool in the order a `Feed` gives (`shares`: each job's device share,
    None: no estimates, plain order), `workers` in flight (+1 waiting for memory); `on_done(index,
    job, result)` as each finishes. No job starts after `deadline` (time.monotonic). Returns how
    many finished."""
    feed = Feed(shares if shares is not None else [None] * len(jobs), workers)
    pending: dict[Future, int] = {}
    finished = 0
    with ThreadPoolExecutor(feed.workers + 1) as pool:
        while True:
            while time.monotonic() < deadline:
                i = feed.next()
                if i is None:
                    break
                pending[pool.submit(run, jobs[i])] = i
            if not pending:
                return finished
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                i = pending.pop(fut)
                feed.done(i)
                on_done(i, jobs[i], fut.result())
                finished += 1
