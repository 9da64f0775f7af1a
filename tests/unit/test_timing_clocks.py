"""Timing clocks as a registry (sandbox/protocol.py CLOCKS) and how the judge reads them.

Covers: every clock the settings accept is registered and the two agree; on the CPU every clock
falls back to host time; the verdict names the device clock both sides used, and falls back to
host times when the sides disagree; trials that outlasted the device lead are noted per side; long calls get fewer trials
(perf_round_ms), and the verdict says so.
Does not cover: the lead on a real device (tests/gpu/test_timing_lead_gpu.py).
"""

from __future__ import annotations

import gc
import time
from typing import get_args

import torch

from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.judge.gpu_timing import Rounds, timing_result
from tritonforge.evaluation.sandbox.protocol import CLOCKS, DEVICE_CLOCKS
from tritonforge.evaluation.sandbox.timing_loop import MIN_TRIALS, fitting, run_trials


def test_every_configurable_clock_is_registered() -> None:
    accepted = set(get_args(EvalSettings.model_fields["timing_clock"].annotation))
    assert accepted == set(CLOCKS)
    assert DEVICE_CLOCKS == {"cuda_events", "cuda_events_idle"}
    assert CLOCKS["cuda_events"].lead and not CLOCKS["cuda_events_idle"].lead
    assert EvalSettings().timing_clock == "cuda_events"


def test_every_clock_is_host_time_on_the_cpu() -> None:
    x = torch.ones(8)
    for clock in CLOCKS:
        t = run_trials(torch.relu, [x], 2, 5, clock, None, lambda: None)
        assert t.clock == "host" and len(t.times) == len(t.hosts) == 5
        assert t.lead_ms == 0.0 and t.exposed == 0 and all(v > 0 for v in t.times)


def _rounds(clocks: set[str], **exposed: int) -> Rounds:
    r = Rounds(clocks=clocks, exposed=dict(exposed))
    r.cand, r.base = [1.0, 1.1, 0.9], [2.0, 2.1, 1.9]  # device times
    r.cand_host, r.base_host = [3.0, 3.1, 2.9], [3.0, 3.1, 2.9]  # host times
    return r


def test_the_verdict_names_the_device_clock_both_sides_used() -> None:
    v = timing_result(_rounds({"cuda_events_idle"}), 200)
    assert v.timing_clock == "cuda_events_idle" and abs(v.speedup - 2.0) < 1e-9
    v = timing_result(_rounds({"cuda_events"}), 200)
    assert v.timing_clock == "cuda_events" and abs(v.speedup - 2.0) < 1e-9 and not v.notes


def test_mixed_clocks_fall_back_to_host_times() -> None:
    v = timing_result(_rounds({"cuda_events", "host"}), 200)
    assert v.timing_clock == "host" and abs(v.speedup - 1.0) < 1e-9


def test_host_bound_trials_are_noted_per_side() -> None:
    v = timing_result(_rounds({"cuda_events"}, cand=3, base=1), 200)
    assert any("3 timed call(s) of the candidate outlasted" in n for n in v.notes), v.notes
    assert any("1 timed call(s) of the reference outlasted" in n for n in v.notes), v.notes


class _Cycle:
    """Cyclic garbage with a finalizer: what a candidate can leave behind to get code run at
    the collector's next pass (no `gc` import needed)."""

    def __init__(self, fired: list[str]) -> None:
        self.me, self.fired = self, fired

    def __del__(self) -> None:
        self.fired.append("finalizer")


def test_no_finalizer_of_a_call_runs_between_calls() -> None:
    """The collector is off during the loop, and off again after every call even when the
    call turned it back on: a finalizer never runs in the loop's own code (in the device lead,
    before the start event, between trials), where its device work would not be timed."""
    fired: list[str] = []
    x = torch.ones(8)

    def call(a: torch.Tensor) -> torch.Tensor:
        fired.append("in" if not gc.isenabled() else "in, collector on")
        for _ in range(50):
            _Cycle(fired)
        gc.enable()  # a candidate that reached gc turns the collector back on
        torch.relu(a)  # (a collection may run in its own call: that is timed)
        fired.append("out")
        return torch.relu(a)

    old = gc.get_threshold()
    gc.set_threshold(1)  # the collector would otherwise run at almost every allocation
    try:
        assert gc.isenabled()
        t = run_trials(call, [x], 3, 6, "cuda_events", None, lambda: None)
        assert gc.isenabled() and len(t.times) == 6  # restored afterwards
    finally:
        gc.set_threshold(*old)
    assert fired.count("in") == 9  # off at every call's entry
    depth = 0
    for what in fired:
        depth += {"in": 1, "out": -1}.get(what, 0)
        assert depth == 1 or what != "finalizer", fired  # only ever inside a call
    gc.collect()
    assert fired.count("finalizer") == 9 * 50


def test_long_calls_get_fewer_trials_within_the_round_budget() -> None:
    """perf_round_ms: warmup stops once it used the budget (after two calls) and the trials are
    cut to what fits at the fastest warmup call's time, never below MIN_TRIALS; a short call, or
    no budget, keeps every trial."""
    x = torch.ones(8)
    calls: list[int] = []

    def slow(t: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        time.sleep(0.02)
        return t

    t = run_trials(slow, [x], 5, 50, "host", None, lambda: None, budget_ms=60.0)
    assert 2 <= len(t.times) <= 3, len(t.times)  # 60 ms / ~20 ms per call
    assert len(calls) - len(t.times) == 3  # warmup: 20 + 20 + 20 ms reaches 60 ms
    assert len(run_trials(slow, [x], 1, 4, "host", None, lambda: None).times) == 4
    assert (
        len(run_trials(torch.relu, [x], 2, 50, "host", None, lambda: None, budget_ms=60.0).times)
        == 50
    )
    assert fitting(50, 250.0, 185.0) == MIN_TRIALS == 2
    assert fitting(10, 250.0, 25.0) == 10 and fitting(10, 250.0, 40.0) == 6
    assert fitting(10, 0.0, 185.0) == 10 and fitting(10, 250.0, float("inf")) == 10


def test_fewer_trials_than_asked_are_noted() -> None:
    r = _rounds({"cuda_events"})
    r.asked = 3
    v = timing_result(r, 200)
    assert not any("fewer trials" in n for n in v.notes)
    r.asked = 9
    v = timing_result(r, 200)
    assert any("fewer trials (perf_round_ms): 3 of the candidate, 3 of the reference, of 9" in n
               for n in v.notes), v.notes  # fmt: skip


def test_the_kernelbench_presets_time_every_trial() -> None:
    assert EvalSettings().perf_round_ms > 0
    for name in ("kernelbench", "tritonforge"):
        assert EvalSettings.from_preset(name).perf_round_ms == 0.0
