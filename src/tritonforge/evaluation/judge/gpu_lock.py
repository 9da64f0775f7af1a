"""The judge's own device work, one thread at a time per device, as shared use of the device.

Covers: `judge_device(device)`, held around every piece of GPU work the judge process does
itself (loading reference models, drawing inputs and computing reference outputs, filling and
reading shared buffers, comparisons). It takes shared access of the device's gate
(device_gate.py: no such work runs while a candidate and its reference are timed) and then a
process-wide lock per device (`device_lock`): the judge's device-wide synchronizes (transport.py)
must not wait for GPU work other judge threads queued meanwhile. Workers are separate processes
with their own CUDA contexts; their requests take the gate themselves (candidate.py).
Re-entrant for the thread that holds it; a no-op for "cpu" (CPU judging times nothing on the
judge side: its reference runs stay parallel).
Lock order: after a reference's case lock; only the generator locks of rng.py and the
profiler lock of work.py are taken inside it.
Does not cover: exclusivity of timing (device_gate.py, gpu_timing.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from tritonforge.evaluation.judge.device_gate import gate

_LOCKS: dict[str, threading.RLock] = {}
_GUARD = threading.Lock()


def device_lock(device: str) -> threading.RLock:
    """The process-wide re-entrant lock of `device` ("cuda:0", ...)."""
    with _GUARD:
        lock = _LOCKS.get(device)
        if lock is None:
            lock = _LOCKS[device] = threading.RLock()
        return lock


@contextmanager
def judge_device(device: str) -> Iterator[None]:
    """Shared access to `device` plus its judge lock; a no-op for "cpu"."""
    if device == "cpu":
        yield
        return
    with gate(device).shared():
        lock = device_lock(device)
        asked = time.monotonic()
        with lock:
            got = time.monotonic()
            outer = _DEPTH.get(device, 0) == 0  # (only this thread can hold it now)
            _DEPTH[device] = _DEPTH.get(device, 0) + 1
            try:
                yield
            finally:
                _DEPTH[device] -= 1
                if outer:
                    _add(device, got - asked, time.monotonic() - got)


_DEPTH: dict[str, int] = {}  # nesting depth of the holding thread, per device (under its lock)
_STATS: dict[str, list[float]] = {}  # device -> [outermost holds, seconds waited, seconds held]


def _add(device: str, waited: float, held: float) -> None:
    with _GUARD:
        row = _STATS.setdefault(device, [0.0, 0.0, 0.0])
        row[0] += 1
        row[1] += waited
        row[2] += held


def lock_stats(device: str) -> dict[str, float]:
    """How the judge's lock of `device` was used: outermost holds, seconds threads waited for it
    and seconds it was held (held near the wall clock: the judge's own device work is the
    bottleneck)."""
    with _GUARD:
        holds, waited, held = _STATS.get(device, [0.0, 0.0, 0.0])
    return {"holds": int(holds), "waited_s": round(waited, 3), "held_s": round(held, 3)}
