"""Who may use a device now: shared access for ordinary work, exclusive access for one timing.

Covers: `DeviceGate`, one per device in this process (`gate(device)`). Every piece of GPU work
of an evaluation holds shared access while it runs: the judge's own device work (through
gpu_lock.judge_device) and each request to a candidate's worker (import, compile, correctness
trials). A timing holds exclusive access: it waits until the shared holders of the moment have
finished and keeps new ones out until it is done, so nothing else of ours runs on that device
while a candidate and its reference are timed. Exclusive requests are served first come, first
served, and a waiting one blocks new shared holders (a steady stream of correctness work cannot
starve timing). Both are re-entrant for the thread holding them; a thread holding shared access
must not ask for exclusive access (that would wait for itself: raises instead).
Across processes (several `eval-kernel`/`eval-dir`/`serve-eval` on one GPU): `gate("cuda:N")`
has an outer layer, host_gate.HostGate (flock on a file of the runtime directory), taken first
by each outermost hold: then the in-process queue orders this process's timings and the host
layer the processes (its turnstile keeps new shared holders behind a waiting timing); shared
holders do not wait for this process's queued timings, which wait outside the host layer.
Listeners see every outermost interval (kind, start, end): tests check that no shared interval
overlaps an exclusive one, the evaluator keeps totals.
Does not cover: memory admission (admission.py), what runs inside (evaluator.py, gpu_timing.py).
Lock order: a gate (its host layer first) before gpu_lock's per-device lock and before the
timing process's lock.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext

from tritonforge.evaluation.judge.host_gate import HostGate
from tritonforge.evaluation.judge.host_share import device_key, runtime_dir

Listener = Callable[[str, float, float], None]  # (kind "shared" | "exclusive", start, end)


class DeviceGate:
    """Shared/exclusive access to one device, exclusive requests FIFO and preferred; `host`:
    the cross-process layer (None: this process only)."""

    def __init__(self, name: str, host: HostGate | None = None):
        self.name, self.host = name, host
        self._cond = threading.Condition()
        self._shared: dict[int, int] = {}  # thread ident -> nesting depth
        self._owner: int | None = None  # thread holding exclusive access
        self._depth = 0
        self._queue: deque[int] = deque()  # exclusive tickets in arrival order
        self._tickets = 0
        self.listeners: list[Listener] = []
        self.exclusive_seconds = 0.0
        self.exclusive_count = 0

    # -- introspection --------------------------------------------------------------------------
    def held_exclusive(self) -> bool:
        """The calling thread holds exclusive access."""
        return self._owner == threading.get_ident()

    def busy(self) -> tuple[int, bool, int]:
        """(shared holders, exclusive held, exclusive waiting)."""
        with self._cond:
            return len(self._shared), self._owner is not None, len(self._queue)

    def _emit(self, kind: str, t0: float, t1: float) -> None:
        for fn in list(self.listeners):
            fn(kind, t0, t1)

    # -- shared ---------------------------------------------------------------------------------
    @contextmanager
    def shared(self) -> Iterator[float]:
        """Hold shared access; yields the seconds spent waiting for it."""
        me = threading.get_ident()
        t_ask = time.monotonic()
        with self._cond:
            outer = self._owner != me and me not in self._shared
        with self.host.shared() if outer and self.host is not None else nullcontext():
            with self._cond:
                if self._owner == me:
                    pass  # the exclusive holder may do anything
                elif me in self._shared:
                    self._shared[me] += 1
                else:  # with a host layer, queued timings wait outside it (see the docstring)
                    while self._owner is not None or (self._queue and self.host is None):
                        self._cond.wait()
                    self._shared[me] = 1
            t0 = time.monotonic()
            try:
                yield t0 - t_ask
            finally:
                with self._cond:
                    if me in self._shared:
                        self._shared[me] -= 1
                        if self._shared[me] == 0:
                            del self._shared[me]
                            self._cond.notify_all()
        if outer:
            self._emit("shared", t0, time.monotonic())

    # -- exclusive ------------------------------------------------------------------------------
    @contextmanager
    def exclusive(self) -> Iterator[float]:
        """Hold exclusive access; yields the seconds spent waiting for it."""
        me = threading.get_ident()
        t_ask = time.monotonic()
        with self._cond:
            outer = self._owner != me
            if not outer:
                self._depth += 1
            elif me in self._shared:
                raise RuntimeError(
                    f"{self.name}: exclusive access asked by a thread holding shared access"
                )
            else:
                ticket = self._tickets
                self._tickets += 1
                self._queue.append(ticket)
                if self.host is not None:  # this process's turn first, holding nothing
                    while self._queue[0] != ticket or self._owner is not None:
                        self._cond.wait()
        with self.host.exclusive() if outer and self.host is not None else nullcontext():
            if outer:
                self._take(me, ticket)
            t0 = time.monotonic()
            try:
                yield t0 - t_ask
            finally:
                with self._cond:
                    self._depth -= 1
                    if self._depth == 0:
                        self._owner = None
                        self._cond.notify_all()
        if outer:
            t1 = time.monotonic()
            self.exclusive_seconds += t1 - t0
            self.exclusive_count += 1
            self._emit("exclusive", t0, t1)

    def _take(self, me: int, ticket: int) -> None:
        """Become the exclusive holder once `ticket` heads the queue and the device is free."""
        with self._cond:
            while self._queue[0] != ticket or self._owner is not None or self._shared:
                self._cond.wait()
            self._queue.popleft()
            self._owner, self._depth = me, 1
            self._cond.notify_all()


_GATES: dict[str, DeviceGate] = {}
_GUARD = threading.Lock()


def gate(device: str) -> DeviceGate:
    """The gate of `device` ("cpu", "cuda:0", ...) in this process; a GPU's gate has the host
    layer when a runtime directory is available (host_share.runtime_dir)."""
    with _GUARD:
        g = _GATES.get(device)
        if g is None:
            where = runtime_dir() if device != "cpu" else None
            host = HostGate(where, device_key(device)) if where is not None else None
            g = _GATES[device] = DeviceGate(device, host)
        return g
