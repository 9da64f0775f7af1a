"""Candidates of one problem timed together: one interleaved round-robin against one reference.

Covers: `TimingGroup`, shared by the evaluations of one group (`Evaluator.evaluate_group`: the
samples of one GRPO group, a `/v1/eval/batch` of one problem). Each evaluation is a `Member`
from its admission on (`TimingGroup.member()`, a context manager); a member that reaches its
timing waits (`Member.time(run, conduct)`) until no other admitted member is still before its
own timing, and then the first one waiting conducts the timing of every waiting member at once
(`conduct(runs)`, gpu_timing.timed_together: the reference runs once per round for all of them
instead of once per candidate, and the speedups the advantage compares are taken in the same
device state). Every member gets its own Rounds, or the Stop that ended its part. Members still
waiting for memory admission are not waited for (they may need the memory the waiting members
hold): they are timed later, alone or with whoever is ready then. A member that fails before
its timing, or whose evaluation ends otherwise, leaves at the end of its `member()` block.
`batches` records the size of every timing conducted (diagnostics, tests).
Does not cover: the rounds themselves (gpu_timing.py), admission (resources.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@dataclass
class _Seat:
    run: Any
    conduct: Callable[[list[Any]], list[Any]]
    result: Any = None
    done: bool = False


@dataclass
class Member:
    group: TimingGroup
    arrived: bool = False

    def time(self, run: Any, conduct: Callable[[list[Any]], list[Any]]) -> Any:
        """Wait for the group, time together; this member's Rounds (or Stop)."""
        return self.group._time(self, _Seat(run, conduct))


class TimingGroup:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.running = 0  # admitted members not yet at their timing
        self.waiting: list[_Seat] = []
        self.conducting = False
        self.batches: list[int] = []

    @contextmanager
    def member(self) -> Iterator[Member]:
        m = Member(self)
        with self._cond:
            self.running += 1
        try:
            yield m
        finally:
            with self._cond:
                if not m.arrived:
                    self.running -= 1
                    self._cond.notify_all()

    def _time(self, m: Member, seat: _Seat) -> Any:
        with self._cond:
            m.arrived = True
            self.running -= 1
            self.waiting.append(seat)
            self._cond.notify_all()
            while not seat.done:
                if self._ready() and self.waiting[0] is seat:
                    batch, self.waiting = self.waiting, []
                    self.conducting = True
                    break
                self._cond.wait()
            else:
                return _outcome(seat)
        try:
            results = seat.conduct([s.run for s in batch])
        except BaseException as exc:  # every member of the batch hears of it
            results = [exc] * len(batch)
        with self._cond:
            self.batches.append(len(batch))
            for s, r in zip(batch, results):
                s.result, s.done = r, True
            self.conducting = False
            self._cond.notify_all()
        return _outcome(seat)

    def _ready(self) -> bool:
        return self.running == 0 and not self.conducting and bool(self.waiting)


def _outcome(seat: _Seat) -> Any:
    """The seat's Rounds or Stop; an error of the conduct itself is raised in every member."""
    r = seat.result
    if isinstance(r, BaseException) and type(r).__name__ != "Stop":
        raise r
    return r
