"""Memory admission: reservations never exceed a device's budget, are granted in arrival order,
make room by trimming caches, and a request that cannot fit even alone says so with figures."""

from __future__ import annotations

import random
import threading
import time

import pytest

from tritonforge.evaluation.judge.admission import (
    GIB,
    DeviceBudget,
    DoesNotFit,
    Footprint,
    case_build_bytes,
    evaluation_bytes,
)


def test_admission_never_exceeds_the_budget() -> None:
    cap, resident = 1000, 100
    budget = DeviceBudget("test", cap, resident=lambda: resident, poll_s=0.01)
    held = [0]
    peak = [0]
    lock = threading.Lock()
    rng = random.Random(3)

    def job(n: int, seconds: float) -> None:
        with budget.reserve(n):
            with lock:
                held[0] += n
                peak[0] = max(peak[0], held[0])
                assert held[0] + resident <= cap
            time.sleep(seconds)
            with lock:
                held[0] -= n

    threads = [
        threading.Thread(target=job, args=(rng.randint(50, 600), rng.uniform(0.001, 0.01)))
        for _ in range(60)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert held[0] == 0 and budget.reserved == 0
    assert peak[0] <= cap - resident
    assert peak[0] > 600, "several reservations must have run together"
    assert budget.granted == 60


def test_reservations_are_granted_first_come_first_served() -> None:
    budget = DeviceBudget("test", 100, poll_s=0.01)
    order: list[int] = []
    with budget.reserve(100):  # the device is full: everyone queues
        threads = []
        for i in range(6):
            size = 80 if i % 2 == 0 else 10  # a small one must not overtake a big one
            t = threading.Thread(target=_take, args=(budget, size, i, order))
            t.start()
            threads.append(t)
            time.sleep(0.02)
    for t in threads:
        t.join(10)
    assert order == list(range(6))


def _take(budget: DeviceBudget, size: int, i: int, order: list[int]) -> None:
    with budget.reserve(size):
        order.append(i)
        time.sleep(0.005)


def test_does_not_fit_names_the_bytes() -> None:
    budget = DeviceBudget("cuda:0", 10 * GIB, pinned=lambda: 2 * GIB)
    with pytest.raises(DoesNotFit) as info:
        with budget.reserve(9 * GIB):
            pass
    e = info.value
    assert (e.needed, e.available, e.capacity) == (9 * GIB, 8 * GIB, 10 * GIB)
    assert "needs 9.00 GiB" in str(e) and "8.00 GiB is available" in str(e)


def test_caches_are_trimmed_to_make_room() -> None:
    cache = [700]
    budget = DeviceBudget(
        "test",
        1000,
        resident=lambda: cache[0],
        trim=lambda target: cache.__setitem__(0, min(cache[0], target)),
        poll_s=0.01,
    )
    with budget.reserve(500):
        assert cache[0] <= 500
    assert budget.trims >= 1


def test_caches_that_cannot_shrink_make_it_not_fit() -> None:
    budget = DeviceBudget("test", 1000, resident=lambda: 800, poll_s=0.01)
    with pytest.raises(DoesNotFit) as info:
        with budget.reserve(500):
            pass
    assert (info.value.needed, info.value.available) == (500, 200)
    assert budget.reserved == 0  # nothing left behind by the refusal


def test_alone_waits_for_everyone_and_keeps_others_out() -> None:
    budget = DeviceBudget("test", 1000, poll_s=0.01)
    events: list[str] = []
    first = threading.Event()
    go = threading.Event()

    def small(name: str, wait: threading.Event | None) -> None:
        with budget.reserve(10):
            events.append(f"{name} in")
            if wait is not None:
                first.set()
                go.wait(5)
            events.append(f"{name} out")

    def alone() -> None:
        with budget.reserve(10, alone=True):
            events.append("alone in")
            assert budget.reserved == 1000
            events.append("alone out")

    a = threading.Thread(target=small, args=("a", go))
    a.start()
    first.wait(5)
    b = threading.Thread(target=alone)
    b.start()
    time.sleep(0.05)
    c = threading.Thread(target=small, args=("c", None))
    c.start()
    time.sleep(0.05)
    assert events == ["a in"]
    go.set()
    for t in (a, b, c):
        t.join(5)
    assert events == ["a in", "a out", "alone in", "alone out", "c in", "c out"]


def test_estimates_grow_with_the_problem() -> None:
    small = Footprint(inputs=1 << 20, outputs=1 << 20)
    big = Footprint(inputs=6 * GIB, outputs=6 * GIB, workspace=GIB)
    ctx = 1 << 30
    assert evaluation_bytes(big, ctx) > evaluation_bytes(small, ctx) > ctx
    # the largest KernelBench L1 problems (6 GiB in, 6 GiB out): ~80 GiB per evaluation with
    # the judge's copies (the comparison's temporaries are bounded by its chunk, not by the
    # output), so an H200's default budget (0.9 x 140 GiB) admits one at a time
    assert 70 * GIB < evaluation_bytes(big, ctx) < 0.9 * 140 * GIB / 1.4
    # ... and the 8 GiB-in, 8 GiB-out norms of KernelBench L1 fit too
    assert evaluation_bytes(Footprint(8 * GIB, 8 * GIB, GIB), ctx) < 0.9 * 140 * GIB
    assert case_build_bytes(big) >= 3 * big.inputs
    assert "inputs 6.00 GiB" in big.describe()


def test_a_grant_knows_whether_it_shared_the_device() -> None:
    budget = DeviceBudget("test", 100, poll_s=0.01)
    with budget.reserve(10) as first:
        assert not first.crowded
        with budget.reserve(10) as second:
            assert first.crowded and second.crowded
        assert first.crowded  # it did share the device, even if alone again now
    with budget.reserve(10) as later:
        assert not later.crowded and later.waited >= 0
