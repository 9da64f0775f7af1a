"""The group timing's scheduling (judge/group_timing.py), with stand-in members and conducts.

Covers: members that reach their timing wait while another admitted member is still before its
own, then one timing for all of them; a member that leaves (fails) before its timing is not
waited for; a member not yet admitted is not waited for (it may need the memory the waiting
members hold) and is timed in a later batch; arrivals during a timing form the next batch; a
conduct's Stop reaches only its member, an error of the conduct itself reaches every member of
the batch. Deterministic: threads step through events, no clock. Does not cover: real timing
(tests/eval/test_group_timing.py).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tritonforge.evaluation.judge.candidate import Stop
from tritonforge.evaluation.judge.group_timing import TimingGroup
from tritonforge.types import Status, Verdict

WAIT = 10.0


class Log:
    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.lock = threading.Lock()

    def conduct(self, runs: list[str]) -> list[Any]:
        with self.lock:
            self.batches.append(sorted(runs))
        return [f"rounds of {r}" for r in runs]


def _member(group: TimingGroup, name: str, log: Log, go: threading.Event, out: dict) -> None:
    with group.member() as m:
        assert go.wait(WAIT)
        out[name] = m.time(name, log.conduct)


def test_members_are_timed_together_once_none_is_still_running() -> None:
    group, log, out = TimingGroup(), Log(), {}
    gos = {n: threading.Event() for n in "abc"}
    threads = [threading.Thread(target=_member, args=(group, n, log, gos[n], out)) for n in "abc"]
    for t in threads:
        t.start()
    _until(lambda: group.running == 3)
    gos["a"].set()
    gos["b"].set()
    _until(lambda: len(group.waiting) == 2)
    assert log.batches == []  # c is still running: a and b wait for it
    gos["c"].set()
    for t in threads:
        t.join(WAIT)
    assert log.batches == [["a", "b", "c"]] and group.batches == [3]
    assert out == {n: f"rounds of {n}" for n in "abc"}


def test_a_member_that_leaves_is_not_waited_for() -> None:
    group, log, out = TimingGroup(), Log(), {}
    go = threading.Event()
    t = threading.Thread(target=_member, args=(group, "a", log, go, out))
    with group.member():  # a member that fails before its timing
        t.start()
        go.set()
        _until(lambda: len(group.waiting) == 1)
        assert log.batches == []
    t.join(WAIT)
    assert log.batches == [["a"]] and out["a"] == "rounds of a"


def test_a_member_not_yet_admitted_is_timed_later() -> None:
    group, log, out = TimingGroup(), Log(), {}
    go = threading.Event()
    go.set()
    first = threading.Thread(target=_member, args=(group, "a", log, go, out))
    first.start()
    first.join(WAIT)  # b has not been admitted yet: a is timed alone
    later = threading.Thread(target=_member, args=(group, "b", log, go, out))
    later.start()
    later.join(WAIT)
    assert log.batches == [["a"], ["b"]]


def test_arrivals_during_a_timing_form_the_next_batch() -> None:
    group, out = TimingGroup(), {}
    inside, release = threading.Event(), threading.Event()
    batches: list[list[str]] = []

    def slow(runs: list[str]) -> list[str]:
        batches.append(sorted(runs))
        if runs == ["a"]:
            inside.set()
            assert release.wait(WAIT)
        return runs

    def member(name: str, go: threading.Event) -> None:
        with group.member() as m:
            assert go.wait(WAIT)
            out[name] = m.time(name, slow)

    go_a, go_bc = threading.Event(), threading.Event()
    ta = threading.Thread(target=member, args=("a", go_a))
    ta.start()
    _until(lambda: group.running == 1)
    go_a.set()
    assert inside.wait(WAIT)  # a's timing is under way
    others = [threading.Thread(target=member, args=(n, go_bc)) for n in "bc"]
    for t in others:
        t.start()
    go_bc.set()
    _until(lambda: len(group.waiting) == 2)
    release.set()
    for t in [ta, *others]:
        t.join(WAIT)
    assert batches == [["a"], ["b", "c"]]


def test_a_stop_reaches_its_member_and_an_error_every_member() -> None:
    stop = Stop(Verdict(status=Status.REWARD_HACK, rule="timed_output_mismatch"))
    group = TimingGroup()
    with group.member() as m:
        assert m.time("a", lambda runs: [stop]) is stop
    group = TimingGroup()

    def broken(runs: list[str]) -> list[str]:
        raise RuntimeError("the timing process is gone")

    with group.member() as m, pytest.raises(RuntimeError, match="gone"):
        m.time("a", broken)


def _until(cond: Any, limit: float = WAIT) -> None:
    done = threading.Event()
    for _ in range(int(limit / 0.005)):
        if cond():
            return
        done.wait(0.005)
    raise AssertionError("condition not reached")
