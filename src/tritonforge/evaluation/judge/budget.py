"""Phase budgets that a busy machine cannot spend: the worker's own time, not its wait for a CPU.

A correct kernel must not fail because other jobs share the machine (on a loaded 2-core box the
built-in relu solution once timed out in its 180-s compile budget). So a request's budget counts
the worker's *own* time: wall time minus the time its threads sat runnable on a run queue
waiting for a CPU (the kernel's schedstat, read from /proc for the worker's whole process tree
by the judge; nothing the candidate can fake). Time it computes, sleeps or blocks counts against
it; time the machine makes it wait does not. A hard cap of `stretch` x the budget in wall time
bounds every request: reaching it with own time left means the machine, not the candidate, was
too slow: `Starved`, which the evaluator retries once and then reports as `judge_fault`.
Where /proc has no schedstat the budget is plain wall time, as before.

Covers: `tree_usage` (CPU and run-queue wait of a process tree; `children` is sandbox/treewatch's)
and `LoadAwareBudget` (deadline extension). Does not cover: sending requests (session.py), the retry (evaluator.py).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from tritonforge.evaluation.sandbox.treewatch import children

_TICK = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0


@dataclass(frozen=True)
class Usage:
    cpu_s: float  # user + system time of every process of the tree
    wait_s: float  # the longest run-queue wait of any one thread of the tree


class Starved(Exception):
    """The worker's own time was within its budget when the wall-clock cap passed."""

    def __init__(self, budget: float, wall: float, waited: float, cpu: float):
        super().__init__(
            f"the machine was too busy: in {wall:.0f} s of wall time the worker waited "
            f"{waited:.0f} s for a CPU and computed {cpu:.1f} s, within its {budget:g} s budget"
        )
        self.wall, self.waited, self.cpu = wall, waited, cpu


def _process(pid: int) -> tuple[float, float] | None:
    """(cpu seconds of the process, longest run-queue wait of one of its threads) or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime (fields 14, 15)
        wait = 0.0
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                wait = max(wait, int(f.read().split()[1]) / 1e9)
        return cpu, wait
    except (OSError, IndexError, ValueError):
        return None


def tree_usage(root: int) -> Usage | None:
    """CPU time and run-queue wait of `root` and its descendants; None if /proc cannot say."""
    cpu = wait = 0.0
    seen, stack, found = set(), [root], False
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        got = _process(pid)
        if got is not None:
            found = True
            cpu, wait = cpu + got[0], max(wait, got[1])
        stack.extend(children(pid))
    return Usage(cpu, wait) if found else None


class LoadAwareBudget:
    """The deadline of one request to a worker, extended by the time the worker waited for a
    CPU, never past `stretch` x `budget` of wall time (`next_deadline` raises `Starved`)."""

    def __init__(
        self,
        pid: int,
        budget: float,
        stretch: float,
        usage: Callable[[int], Usage | None] = tree_usage,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.pid, self.budget, self.stretch = pid, budget, stretch
        self.usage, self.clock = usage, clock
        self.start = clock()
        self.base = usage(pid) if stretch > 1 else None
        self.waited = 0.0  # run-queue wait seen so far (s)

    @property
    def deadline(self) -> float:
        return self.start + self.budget

    def next_deadline(self) -> float | None:
        """At a passed deadline: a later one when the worker's own time is still within its
        budget, None when it is spent (the candidate's timeout). Raises Starved at the cap."""
        now = self.usage(self.pid) if self.base is not None else None
        wall = self.clock() - self.start
        if now is None or self.base is None:
            return None
        self.waited = max(0.0, now.wait_s - self.base.wait_s)
        if wall - self.waited >= self.budget:
            return None
        cap = self.start + self.stretch * self.budget
        if self.clock() >= cap:
            raise Starved(self.budget, wall, self.waited, now.cpu_s - self.base.cpu_s)
        own_left = self.budget - (wall - self.waited)
        return min(self.clock() + max(own_left, 0.05), cap)
