"""The device-side lead of the `cuda_events` clock on a real GPU (`pytest -m gpu tests/gpu`).

Covers: a call that spends host time before its kernel (Python glue, a slow launcher, a busy
CPU) is timed like the same kernel launched at once under `cuda_events`, while
`cuda_events_idle` counts the host time (the per-process, load-dependent error the lead
removes); work a call puts on a side stream waits for the lead and is counted, even when the
call stretches its own lead with host work; a call whose host work outlasts the lead is
reported as exposed; the lead follows the trials' enqueue, the device sleeps about what was
asked, and a call that waits for the device inside its enqueue gets the shortest lead. Does not cover: the evaluator around the loop (test_fair_timing_gpu.py).
"""

from __future__ import annotations

import statistics
import time

import pytest
import torch

from tritonforge.evaluation.sandbox import timing_loop
from tritonforge.evaluation.sandbox.timing_loop import LEAD_MAX_MS, run_trials

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

SYNC = torch.cuda.synchronize


def _spin(us: float) -> None:
    t = time.perf_counter()
    while (time.perf_counter() - t) * 1e6 < us:
        pass


def _median(fn, x: torch.Tensor, clock: str, trials: int = 30) -> tuple[float, object]:
    t = run_trials(fn, [x], 3, trials, clock, None, SYNC)
    return statistics.median(t.times[1:]), t


@pytest.fixture(scope="module")
def x() -> torch.Tensor:
    return torch.randn(1 << 22, device="cuda")


def test_the_lead_hides_host_time_before_the_kernel(x) -> None:
    def late(a: torch.Tensor) -> torch.Tensor:
        _spin(300)
        return torch.relu(a)

    fast, _ = _median(torch.relu, x, "cuda_events")
    slow, timed = _median(late, x, "cuda_events")
    assert timed.clock == "cuda_events" and timed.exposed <= 1 and timed.lead_ms >= 0.3
    assert slow <= fast * 1.15 + 0.005, (fast, slow)
    fast_idle, _ = _median(torch.relu, x, "cuda_events_idle")
    slow_idle, idle = _median(late, x, "cuda_events_idle")
    assert idle.clock == "cuda_events_idle" and idle.lead_ms == 0.0
    assert slow_idle - fast_idle >= 0.2, (fast_idle, slow_idle)  # what the lead removes


def test_side_stream_work_waits_for_the_lead_and_counts(x) -> None:
    side = torch.cuda.Stream()
    run_trials(torch.relu, [x], 1, 2, "cuda_events", None, SYNC)  # calibrates the sleep
    work_ms = 1.0
    cycles = int(work_ms * timing_loop._CAL["cycles"])

    def hidden(a: torch.Tensor) -> torch.Tensor:
        _spin(400)  # stretches its own lead to about 1.2 ms
        with torch.cuda.stream(side):
            torch.cuda._sleep(cycles)  # 1 ms of device work that the events do not see
        return torch.relu(a)

    measured, _ = _median(hidden, x, "cuda_events", trials=20)
    assert measured >= 0.9 * work_ms, measured


def test_host_work_beyond_the_lead_is_exposed(x) -> None:
    def host_bound(a: torch.Tensor) -> torch.Tensor:
        _spin(LEAD_MAX_MS * 1000 * 1.2)
        return torch.relu(a)

    t = run_trials(host_bound, [x], 2, 4, "cuda_events", None, SYNC)
    assert t.exposed >= 3 and t.lead_ms == LEAD_MAX_MS
    assert statistics.median(t.times) >= 0.1 * LEAD_MAX_MS  # its launch gap is counted


def test_the_lead_follows_the_enqueue_and_sleeps_what_was_asked(x) -> None:
    run_trials(torch.relu, [x], 3, 10, "cuda_events", None, SYNC)  # the clock up, the rate seen
    t = run_trials(torch.relu, [x], 3, 40, "cuda_events", None, SYNC)
    assert not t.synced and t.exposed <= 4
    per_trial = t.leads["enqueue"] / 40
    assert t.lead_ms <= 3 * timing_loop.LEAD_FIT * per_trial + 0.2, (t.lead_ms, per_trial)
    assert 0.8 <= t.leads["device"] / t.leads["asked"] <= 1.5, t.leads


def test_a_call_that_waits_for_the_device_gets_the_shortest_lead(x) -> None:
    def reads_back(a: torch.Tensor) -> torch.Tensor:
        y = torch.relu(a)
        _ = float(y[0])  # a synchronize inside the call
        return y

    t = run_trials(reads_back, [x], 3, 12, "cuda_events", None, SYNC)
    assert t.synced and t.lead_ms == timing_loop.LEAD_MIN_MS, (t.lead_ms, t.leads)
    assert t.leads["asked"] < 12 * LEAD_MAX_MS / 4  # found before the lead ran to its maximum
