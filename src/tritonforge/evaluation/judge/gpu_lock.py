"""The judge's own device work, one thread at a time per device.

Covers: `judge_device(device)`, a process-wide lock per device held around every piece of GPU
work the judge process does itself (drawing inputs and computing reference outputs, filling and
reading shared buffers, comparisons) and around timing the reference. The reference is timed in
the judge process with a device-wide synchronize, which also waits for whatever other judge
threads queued on the device meanwhile: with 6 candidates in flight on an H200 that inflated
reference times up to 3x (docs/benchmarks.md) and with them the speedups. Workers are separate processes
with their own CUDA contexts and are not affected by this lock.

Held only for the reference's own timing rounds, not across the worker's rounds: a candidate
that is slow to answer must not stall the judge's other evaluations. Re-entrant for the thread
that holds it.
Lock order: after the evaluator's timing lock and a reference's case lock; only the global RNG
lock of reference.py is taken inside it.
Does not cover: exclusivity between candidates' timing phases (judge.Evaluator.timing_lock).
"""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager, nullcontext
from typing import Any

_LOCKS: dict[str, Any] = {}
_GUARD = threading.Lock()
_NO_LOCK = nullcontext()  # CPU judging times nothing: its reference runs stay parallel


def judge_device(device: str) -> AbstractContextManager:
    """The lock of `device` ("cuda:0", ...) in this process; a no-op for "cpu"."""
    if device == "cpu":
        return _NO_LOCK
    with _GUARD:
        lock = _LOCKS.get(device)
        if lock is None:
            lock = _LOCKS[device] = threading.RLock()
        return lock
