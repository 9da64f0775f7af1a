"""Diagnostics of timed rounds and of the judge's device lock: what a `time` reply reports about
its trials (`parts_ms`, `loop_ms`) only adds numbers to the verdict's phases, and a reply
whose fields are not what they must be does not parse (replies.py); the judge lock's
counters add up holds, waits and hold times."""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import pytest

from tritonforge.evaluation.judge import gpu_lock, replies
from tritonforge.evaluation.judge.gpu_timing import _round_phases
from tritonforge.evaluation.sandbox import timing_loop
from tritonforge.evaluation.sandbox.protocol import TRIAL_PARTS


def _time_reply(**fields):
    """A `time` reply as a worker sends it, with `fields` in place of the defaults."""
    reply = {
        "ok": True,
        "times_ms": [1.0, 2.0],
        "host_ms": [1.5, 2.5],
        "clock": "cuda_events",
        "loop_ms": 10.0,
        "lead_ms": 0.5,
        "first_lead_ms": 0.2,
        "exposed": 3,
        "parts_ms": {name: 1.0 for name in TRIAL_PARTS},
        "leads_ms": {"asked": 4.0, "device": 3.0, "enqueue": 2.0},
        "synced": True,
        "launches": [1, 1],
        "signatures": ["a", "a"],
        "audit": {"violations": [], "launches_ok": 2, "integrity": {"armed": "", "glue": ""}},
    }
    return {**reply, **fields}


def test_round_phases_sum_an_honest_reply() -> None:
    phases: defaultdict[str, float] = defaultdict(float)
    _round_phases(phases, 0.02, replies.parse("time", _time_reply()))
    _round_phases(phases, 0.02, replies.parse("time", _time_reply(lead_ms=0.25)))
    assert phases["round_requests"] == 0.04
    assert phases["round_loops"] == 0.02
    assert abs(phases["round_device"] - 0.006) < 1e-12
    assert all(phases[f"round_{name}"] == 0.002 for name in TRIAL_PARTS)
    assert phases["round_lead_ms_max"] == 0.5 and phases["round_first_lead_ms_max"] == 0.2
    assert phases["round_exposed"] == 6
    assert phases["round_lead_asked"] == 0.008 and phases["round_lead_device"] == 0.006
    assert phases["round_lead_enqueue"] == 0.004 and phases["round_synced"] == 2


@pytest.mark.parametrize("junk", [None, "x", [1], {"a": 1}, True, float("nan"), 10**400, -1.0])
@pytest.mark.parametrize("name", ["times_ms", "loop_ms", "lead_ms", "parts_ms", "exposed",
                                  "leads_ms", "synced", "launches"])  # fmt: skip
def test_a_time_reply_with_junk_does_not_parse(name: str, junk: object) -> None:
    """What a `time` reply reports comes from the worker's process: a field that is not what
    it must be is a ReplyError (the judge's `ask` makes it a protocol_violation), never a number
    summed into the verdict and never an exception of the judge's."""
    if (name, junk) in (("synced", True), ("launches", [1])):
        return  # valid values
    with pytest.raises(replies.ReplyError):
        replies.parse("time", _time_reply(**{name: junk}))


def test_a_time_reply_with_unknown_or_missing_fields_does_not_parse() -> None:
    with pytest.raises(replies.ReplyError, match="unknown"):
        replies.parse("time", _time_reply(verdict="correct"))
    reply = _time_reply()
    del reply["times_ms"]
    with pytest.raises(replies.ReplyError, match="missing"):
        replies.parse("time", reply)
    with pytest.raises(replies.ReplyError, match="as many"):
        replies.parse("time", _time_reply(host_ms=[1.0]))


def test_trial_parts_cover_a_host_timed_trial() -> None:
    """On the CPU (host clock, no lead) the parts of each trial are recorded and add up to about
    the trials' host time."""

    def call(x):
        time.sleep(0.002)
        return x

    timed = timing_loop.run_trials(call, [1], 1, 5, "host", None, lambda: None)
    parts = dict(timing_loop._PARTS)
    assert set(parts) == set(TRIAL_PARTS)
    assert parts["call"] >= 5 * 2.0
    assert sum(parts.values()) >= sum(timed.times) * 0.99


def test_judge_lock_stats_count_outermost_holds_only() -> None:
    device = "cuda:stats-test"  # the gate and lock of a name no one else uses
    before = gpu_lock.lock_stats(device)
    with gpu_lock.judge_device(device):
        with gpu_lock.judge_device(device):  # re-entrant: one hold
            time.sleep(0.01)
    held = threading.Event()
    release = threading.Event()

    def holder() -> None:
        with gpu_lock.judge_device(device):
            held.set()
            release.wait(5)

    t = threading.Thread(target=holder)
    t.start()
    held.wait(5)
    threading.Timer(0.05, release.set).start()
    with gpu_lock.judge_device(device):  # waits for the holder
        pass
    t.join()
    after = gpu_lock.lock_stats(device)
    assert after["holds"] - before["holds"] == 3
    assert after["held_s"] - before["held_s"] >= 0.05
    assert after["waited_s"] - before["waited_s"] >= 0.03
