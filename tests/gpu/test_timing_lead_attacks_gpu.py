"""Attacks on the `cuda_events` clock's device lead, on a real GPU (`pytest -m gpu tests/gpu`).

Covers: a call whose device work (a calibrated `_cuda_sleep`, `WORK_MS`) is done, all or in
part, where the clock might not see it must still be measured at >= 0.9x that work:
- code of the candidate's run *inside* the loop: a rebound `torch.cuda.current_stream` or
  `torch.cuda._lazy_init` (what `torch.cuda.Event.record` looks up when given no stream), run
  between the lead and the start event (work there counts as lead and was subtracted from the
  host time) or while the host overhead is calibrated (a host pause after the end event inflates
  the latency that is subtracted from every later trial, hiding unjoined side-stream work); a
  finalizer of cyclic garbage doing the same through the collector;
- streams that might not wait for the lead: the per-thread and legacy default streams as
  external streams, the highest-priority pool, a pool stream rebuilt from its id or pointer, a
  side stream left current across trials, a CUDA graph replayed on a side stream;
- a lead stretched by slow warmup calls, then side-stream work in fast timed calls.
Does not cover: the evaluator around the loop (test_attacks_gpu.py, corpus c3_*), devices other
than the current one (a candidate's worker sees one).
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

from tritonforge.evaluation.sandbox import timing_loop
from tritonforge.evaluation.sandbox.timing_loop import run_trials

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

# the worker's own sync (sandbox/audit.py captures the C function): torch.cuda.synchronize
# would look up a rebound torch.cuda._lazy_init and run the candidate's hook inside the loop
SYNC = getattr(torch._C, "_cuda_synchronize", lambda: None)  # (absent from CPU builds)
WORK_MS = 1.0
PAUSE_S = 0.002  # a host pause the attacks put where the overhead is calibrated


@pytest.fixture(scope="module")
def x() -> torch.Tensor:
    return torch.randn(1 << 20, device="cuda")


@pytest.fixture
def cycles(x: torch.Tensor) -> Iterator[int]:
    """Sleep cycles for WORK_MS; the process's calibration is saved and restored around the
    test (an attack that inflates it must not leak into later tests)."""
    run_trials(torch.relu, [x], 1, 2, "cuda_events", None, SYNC)
    saved = dict(timing_loop._OVERHEAD)
    yield int(WORK_MS * timing_loop._CAL["cycles"])
    timing_loop._OVERHEAD.clear()
    timing_loop._OVERHEAD.update(saved)


def _work(cycles: int) -> None:
    torch._C._cuda_sleep(cycles)


def _measured(fn: Callable[..., Any], x: torch.Tensor, trials: int = 20) -> float:
    t = run_trials(fn, [x], 3, trials, "cuda_events", None, SYNC)
    assert t.clock == "cuda_events"
    return statistics.median(t.times[1:])


@pytest.mark.parametrize("name", ["current_stream", "_lazy_init"])
def test_a_hook_in_event_record_cannot_hide_work_in_the_lead(
    x: torch.Tensor, cycles: int, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """Per trial the loop records led, start, end; a hook on the third call after a timed call
    (the second after the last warmup call) runs right after the lead's sleep was queued."""
    state = {"n": 0, "timed": False, "done": False}
    original = getattr(torch.cuda, name)

    def hook(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        state["n"] += 1
        if state["n"] == (3 if state["timed"] else 2):
            _work(cycles)  # between the lead and the start event
            state["done"] = True
        return result

    def call(a: torch.Tensor) -> torch.Tensor:
        state["timed"], state["n"] = state["n"] > 0, 0
        if not state["done"]:
            _work(cycles)
        state["done"] = False
        return torch.relu(a)

    monkeypatch.setattr(torch.cuda, name, hook)
    measured = _measured(call, x)
    assert measured >= 0.9 * WORK_MS, measured


@pytest.mark.parametrize("name", ["current_stream", "_lazy_init"])
def test_a_hook_in_event_record_cannot_inflate_the_host_overhead(
    x: torch.Tensor, cycles: int, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """A pause after each calibration trial's end event (before the first call of the time
    op), then side-stream work the end event does not wait for, left to the host floor."""
    state = {"calibrating": True, "n": 0}
    original = getattr(torch.cuda, name)
    side = torch.cuda.Stream()

    def hook(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        state["n"] += 1
        if state["calibrating"] and state["n"] % 3 == 0:
            time.sleep(PAUSE_S)
        return result

    def call(a: torch.Tensor) -> torch.Tensor:
        state["calibrating"] = False
        with torch.cuda.stream(side):
            _work(cycles)  # not joined: after the end event, seen by the host floor only
        return torch.relu(a)

    monkeypatch.setattr(torch.cuda, name, hook)
    timing_loop._OVERHEAD.clear()  # a fresh worker: calibrated at its first time op
    measured = _measured(call, x)
    assert timing_loop._OVERHEAD[True] < 0.5, timing_loop._OVERHEAD
    assert measured >= 0.9 * WORK_MS, measured


class _Renewing:
    """Cyclic garbage whose finalizer makes more: the collector runs it again and again, at
    whatever point of the loop the collector next runs (a candidate needs no `gc` for this)."""

    def __init__(self, act: Callable[[], None]) -> None:
        self.me, self.act = self, act

    def __del__(self) -> None:
        self.act()
        _Renewing(self.act)


def test_a_finalizer_cannot_inflate_the_host_overhead(x: torch.Tensor, cycles: int) -> None:
    state = {"calibrating": True}
    side = torch.cuda.Stream()

    def act() -> None:
        if state["calibrating"]:
            time.sleep(PAUSE_S)

    def call(a: torch.Tensor) -> torch.Tensor:
        state["calibrating"] = False
        with torch.cuda.stream(side):
            _work(cycles)
        return torch.relu(a)

    old = gc.get_threshold()
    timing_loop._OVERHEAD.clear()
    _Renewing(act)
    gc.set_threshold(1)  # stands for a candidate keeping the young generation full
    try:
        measured = _measured(call, x)
    finally:
        state["calibrating"] = False
        gc.set_threshold(*old)
    assert timing_loop._OVERHEAD[True] < 0.5, timing_loop._OVERHEAD
    assert measured >= 0.9 * WORK_MS, measured


def _per_thread() -> Any:
    return torch.cuda.ExternalStream(2)  # cudaStreamPerThread


def _legacy() -> Any:
    return torch.cuda.ExternalStream(1)  # cudaStreamLegacy


def _high_priority() -> Any:
    return torch.cuda.Stream(priority=torch.cuda.Stream.priority_range()[1])


def _rebuilt_from_id() -> Any:
    s = torch.cuda.Stream()
    return torch.cuda.Stream(stream_id=s.stream_id, device_index=s.device_index, device_type=1)


def _rebuilt_from_pointer() -> Any:
    return torch.cuda.ExternalStream(torch.cuda.Stream(priority=-1).cuda_stream)


STREAMS = {
    "per_thread_default": _per_thread,
    "legacy_default": _legacy,
    "high_priority_pool": _high_priority,
    "pool_from_id": _rebuilt_from_id,
    "pool_from_pointer": _rebuilt_from_pointer,
}


@pytest.mark.parametrize("current_side", [False, True], ids=["current_default", "current_side"])
@pytest.mark.parametrize("kind", list(STREAMS))
def test_work_on_any_stream_waits_for_the_lead_or_counts(
    x: torch.Tensor, cycles: int, kind: str, current_side: bool
) -> None:
    """`current_side`: the call leaves a pool stream current, so the next trial's lead sleeps
    on a non-blocking stream (the legacy stream's implicit ordering no longer covers it)."""
    stream = STREAMS[kind]()
    side = torch.cuda.Stream()
    before = torch.cuda.current_stream()
    try:
        with torch.cuda.stream(stream):
            _work(1)
        SYNC()
    except RuntimeError as exc:  # torch 2.11 refuses the legacy stream's handle outright
        assert kind == "legacy_default" and "invalid StreamId" in str(exc), (kind, exc)
        return

    def call(a: torch.Tensor) -> torch.Tensor:
        with torch.cuda.stream(stream):
            _work(cycles)
        if current_side:
            torch.cuda.set_stream(side)
        return torch.relu(a)

    try:
        measured = _measured(call, x)
    finally:
        torch.cuda.set_stream(before)
        SYNC()
    assert measured >= 0.9 * WORK_MS, measured


def test_a_graph_replayed_on_a_side_stream_counts(x: torch.Tensor, cycles: int) -> None:
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _work(cycles)
    side = torch.cuda.Stream()

    def call(a: torch.Tensor) -> torch.Tensor:
        with torch.cuda.stream(side):
            graph.replay()
        return torch.relu(a)

    measured = _measured(call, x)
    assert measured >= 0.9 * WORK_MS, measured


def test_a_lead_stretched_in_warmup_hides_no_work(x: torch.Tensor, cycles: int) -> None:
    """Slow warmup calls stretch the lead to its maximum; the timed calls are fast on the host
    and put their work on a side stream."""
    state = {"calls": 0}
    side = torch.cuda.Stream()

    def call(a: torch.Tensor) -> torch.Tensor:
        state["calls"] += 1
        if state["calls"] <= 3:  # the warmup calls
            t = time.perf_counter()
            while time.perf_counter() - t < timing_loop.LEAD_MAX_MS / 1000:
                pass
        with torch.cuda.stream(side):
            _work(cycles)
        return torch.relu(a)

    t = run_trials(call, [x], 3, 20, "cuda_events", None, SYNC)
    assert t.first_lead_ms == timing_loop.LEAD_MAX_MS  # (later leads follow the fast trials)
    measured = statistics.median(t.times[1:])
    assert measured >= 0.9 * WORK_MS, measured
