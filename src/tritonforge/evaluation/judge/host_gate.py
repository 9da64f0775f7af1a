"""One device's shared/exclusive gate across every judging process of the host (flock).

Covers: `HostGate`, the outer layer of a device's gate (device_gate.py) when several processes
judge on one GPU (`eval-kernel`, `eval-dir`, `serve-eval`, each its own process): shared access
is a `LOCK_SH` and exclusive access a `LOCK_EX` on `gate-<device key>.lock` in the runtime
directory (host_share.py), each hold on its own open file description, so threads and processes
are alike. A turnstile (`gate-<key>.turn`, `LOCK_EX` held only while waiting) gives exclusive
requests precedence: a timing waiting for the gate holds the turnstile, so new shared holders
queue behind it instead of starving it. flock is released by the kernel when its holder dies,
however it dies: a process killed while timing never blocks the others.
Not FIFO: among exclusive requests of different processes the kernel decides who goes next
(within one process DeviceGate keeps arrival order). A holder that hangs without dying holds
the gate until its own budget kills the work it waits for.
Does not cover: re-entrancy and the in-process order (device_gate.py), memory (host_ledger.py).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from tritonforge.evaluation.judge.host_share import flocked, open_lock


class HostGate:
    """Shared/exclusive access to one device for every process that opens the same files."""

    def __init__(self, directory: Path, key: str):
        self.directory, self.key = directory, key
        self.path = directory / f"gate-{key}.lock"
        self.turnstile = directory / f"gate-{key}.turn"

    @contextmanager
    def _hold(self, kind: int) -> Iterator[None]:
        fd = open_lock(self.path)
        try:
            with flocked(self.turnstile, fcntl.LOCK_EX):
                fcntl.flock(fd, kind)
            yield
        finally:
            os.close(fd)  # releases the hold

    def shared(self) -> AbstractContextManager[None]:
        """Hold shared access (blocks while an exclusive holder or waiter is there)."""
        return self._hold(fcntl.LOCK_SH)

    def exclusive(self) -> AbstractContextManager[None]:
        """Hold exclusive access (waits for every shared holder of every process)."""
        return self._hold(fcntl.LOCK_EX)
