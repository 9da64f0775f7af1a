"""DeviceGate: a timing (exclusive) never overlaps anything else of ours on the device.

Covers the scheduling logic of fair timing without a GPU: shared holders overlap each other, an
exclusive holder overlaps nothing (intervals recorded by the work itself, not by the gate), a
waiting timing keeps new shared work out (no starvation), timings are served in arrival order,
re-entrancy, and asking for exclusive access while holding shared access is refused; each in
this process only and with the cross-process layer (host_gate.py) in a temporary runtime
directory, where the same rules must hold among threads. Across real processes:
tests/unit/test_host_share.py.
"""

from __future__ import annotations

import fcntl
import os
import random
import threading
import time
from pathlib import Path

import pytest

from tritonforge.evaluation.judge.device_gate import DeviceGate, gate
from tritonforge.evaluation.judge.host_gate import HostGate
from tritonforge.evaluation.judge.host_share import open_lock


@pytest.fixture(params=["process", "host"])
def make_gate(request, tmp_path: Path):
    """DeviceGate without, or with, the cross-process layer."""
    return lambda name: DeviceGate(
        name, HostGate(tmp_path, name.replace(":", "-")) if request.param == "host" else None
    )


def _wait_queued(g: DeviceGate, n: int = 1) -> None:
    """Until `n` timings wait; with the host layer, until one of them holds the turnstile (a
    queued timing takes it only once it is this process's turn)."""
    while g.busy()[2] < n:
        time.sleep(0.001)
    if g.host is None:
        return
    fd = open_lock(g.host.turnstile)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
                time.sleep(0.001)
            except BlockingIOError:
                return
    finally:
        os.close(fd)


def _overlaps(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def test_no_timing_overlaps_any_other_work(make_gate) -> None:
    g = make_gate("test:0")
    spans: list[tuple[str, float, float]] = []
    lock = threading.Lock()
    seen_by_listener: list[tuple[str, float, float]] = []
    g.listeners.append(lambda kind, t0, t1: seen_by_listener.append((kind, t0, t1)))

    def work(kind: str, seconds: float) -> None:
        ctx = g.exclusive() if kind == "timing" else g.shared()
        with ctx:
            t0 = time.monotonic()
            time.sleep(seconds)
            t1 = time.monotonic()
        with lock:
            spans.append((kind, t0, t1))

    rng = random.Random(7)
    jobs = [
        ("timing" if rng.random() < 0.3 else "correctness", rng.uniform(0.002, 0.01))
        for _ in range(120)
    ]
    threads = [threading.Thread(target=work, args=job) for job in jobs]
    for t in threads:
        t.start()
        time.sleep(rng.uniform(0, 0.002))
    for t in threads:
        t.join()
    timings = [(a, b) for k, a, b in spans if k == "timing"]
    others = [(a, b) for k, a, b in spans if k != "timing"]
    assert len(timings) + len(others) == len(jobs)
    for i, tm in enumerate(timings):
        assert not any(_overlaps(tm, o) for o in others), "a timing overlapped correctness work"
        assert not any(_overlaps(tm, t2) for j, t2 in enumerate(timings) if j != i)
    shared_pairs = sum(_overlaps(a, b) for i, a in enumerate(others) for b in others[i + 1 :])
    assert shared_pairs > 0, "shared work must overlap (otherwise the test proves nothing)"
    assert g.exclusive_count == len(timings)
    assert sorted(k for k, *_ in seen_by_listener) == sorted(
        k2 for k2, *_ in (("exclusive" if k == "timing" else "shared", 0, 0) for k, *_ in spans)
    )


def test_a_waiting_timing_keeps_new_shared_work_out(make_gate) -> None:
    g = make_gate("test:1")
    order: list[str] = []
    holding = threading.Event()
    release = threading.Event()

    def first_shared() -> None:
        with g.shared():
            holding.set()
            release.wait(5)
            order.append("shared-1 done")

    def timing() -> None:
        with g.exclusive():
            order.append("timing")

    def late_shared() -> None:
        with g.shared():
            order.append("shared-2")

    a = threading.Thread(target=first_shared)
    a.start()
    holding.wait(5)
    b = threading.Thread(target=timing)
    b.start()
    _wait_queued(g)
    c = threading.Thread(target=late_shared)
    c.start()
    time.sleep(0.05)
    assert order == []  # neither the timing nor the late shared work ran yet
    release.set()
    for t in (a, b, c):
        t.join(5)
    assert order == ["shared-1 done", "timing", "shared-2"]


def test_timings_are_served_in_arrival_order(make_gate) -> None:
    g = make_gate("test:2")
    served: list[int] = []
    with g.shared():  # hold the device so every timing queues up
        threads = []
        for i in range(8):
            t = threading.Thread(target=lambda i=i: _timed(g, served, i))
            t.start()
            threads.append(t)
            _wait_queued(g, i + 1)
    for t in threads:
        t.join(5)
    assert served == list(range(8))


def _timed(g: DeviceGate, served: list[int], i: int) -> None:
    with g.exclusive():
        served.append(i)


def test_reentrant_and_no_upgrade(make_gate) -> None:
    g = make_gate("test:3")
    with g.exclusive(), g.exclusive(), g.shared():  # the holder may do anything
        assert g.held_exclusive()
    assert g.busy() == (0, False, 0)
    with g.shared(), g.shared():
        with pytest.raises(RuntimeError, match="holding shared"):
            with g.exclusive():
                pass
    assert g.busy() == (0, False, 0)


def test_one_gate_per_device() -> None:
    assert gate("cuda:5") is gate("cuda:5") and gate("cuda:5") is not gate("cuda:6")
