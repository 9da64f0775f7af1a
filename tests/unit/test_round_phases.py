"""Diagnostics of timed rounds and of the judge's device lock: what a `time` reply reports about
its trials (`parts_ms`, `loop_ms`, from the candidate's own process: untrusted) only adds
numbers to the verdict's phases, never raises, whatever the reply holds; the judge lock's
counters add up holds, waits and hold times."""

from __future__ import annotations

import math
import threading
import time
from collections import defaultdict

from tritonforge.evaluation.judge import gpu_lock
from tritonforge.evaluation.judge.gpu_timing import _round_phases
from tritonforge.evaluation.sandbox import timing_loop
from tritonforge.evaluation.sandbox.protocol import TRIAL_PARTS


def test_round_phases_sum_an_honest_reply() -> None:
    phases: defaultdict[str, float] = defaultdict(float)
    reply = {
        "times_ms": [1.0, 2.0],
        "loop_ms": 10.0,
        "lead_ms": 0.5,
        "first_lead_ms": 0.2,
        "exposed": 3,
        "parts_ms": {name: 1.0 for name in TRIAL_PARTS},
        "leads_ms": {"asked": 4.0, "device": 3.0, "enqueue": 2.0},
        "synced": True,
    }
    _round_phases(phases, 0.02, reply)
    _round_phases(phases, 0.02, {**reply, "lead_ms": 0.25})
    assert phases["round_requests"] == 0.04
    assert phases["round_loops"] == 0.02
    assert abs(phases["round_device"] - 0.006) < 1e-12
    assert all(phases[f"round_{name}"] == 0.002 for name in TRIAL_PARTS)
    assert phases["round_lead_ms_max"] == 0.5 and phases["round_first_lead_ms_max"] == 0.2
    assert phases["round_exposed"] == 6
    assert phases["round_lead_asked"] == 0.008 and phases["round_lead_device"] == 0.006
    assert phases["round_lead_enqueue"] == 0.004 and phases["round_synced"] == 2


def test_round_phases_ignore_what_is_not_a_number() -> None:
    phases: defaultdict[str, float] = defaultdict(float)
    for junk in (None, "x", [1], {"a": 1}, True, float("nan")):
        reply = {"times_ms": junk, "loop_ms": junk, "lead_ms": junk, "parts_ms": junk,
                 "exposed": junk, "leads_ms": junk, "synced": junk}  # fmt: skip
        _round_phases(phases, 0.01, reply)
    _round_phases(phases, 0.01, {"parts_ms": {"flush": "1", "lead": None, "call": [2]}})
    huge = 10**400  # beyond any float: skipped, never raised on
    _round_phases(phases, 0.01, {"exposed": huge, "loop_ms": [huge, 1e308, 1e308],
                                 "times_ms": [huge], "lead_ms": -1e308})  # fmt: skip
    assert abs(phases["round_requests"] - 0.08) < 1e-12
    assert all(isinstance(v, float) and math.isfinite(v) for v in phases.values())


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
