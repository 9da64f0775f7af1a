"""One candidate's sandboxed worker as seen from the judge: spawn, request with deadlines, close.

Covers: the socket pair and stdout/stderr pipes of one worker (output capped to head + tail,
excess drained and counted), requests with deadlines, detection of unsolicited frames, and the
exit status after the worker is killed. Does not cover: what to ask (evaluator.py) or isolation
(sandbox/isolation.py, sandbox/zygote.py).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import threading
from collections.abc import Callable
from typing import Any

from tritonforge.evaluation.judge.forkserver import ChildExit, ForkServer
from tritonforge.evaluation.sandbox.protocol import Deadline, PeerClosed, Reader, send_msg

# Kineto's own start/stop log lines (the profiler runs inside the worker): not the candidate's output.
_PROFILER_NOISE = re.compile(r"^(USDT|STAGE):\S+ \S+ \d+:\d+ \S+\.cpp:\d+\].*\n?", re.MULTILINE)


class OutputTail:
    """Drains a pipe in a thread, keeping the first and last `cap // 2` bytes."""

    def __init__(self, fd: int, cap: int):
        self.fd, self.cap = fd, cap
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.thread = threading.Thread(target=self._drain, daemon=True)
        self.thread.start()

    def _drain(self) -> None:
        half = self.cap // 2
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            self.total += len(chunk)
            if len(self.head) < half:
                take = half - len(self.head)
                self.head.extend(chunk[:take])
                chunk = chunk[take:]
            if chunk:
                self.tail.extend(chunk)
                if len(self.tail) > half:
                    del self.tail[: len(self.tail) - half]
        os.close(self.fd)

    def text(self) -> str:
        self.thread.join(timeout=2.0)
        body = self.head.decode(errors="replace")
        dropped = self.total - len(self.head) - len(self.tail)
        if dropped > 0:
            body += f"\n... [{dropped} bytes dropped] ...\n"
        return _PROFILER_NOISE.sub("", body + self.tail.decode(errors="replace"))


class Session:
    """A live worker. Use as a context manager; `close()` kills it and returns its exit."""

    def __init__(self, server: ForkServer, spec: dict[str, Any], output_cap: int):
        self.server = server
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            self.pid = server.spawn(spec, [child.fileno(), out_w, err_w])
        finally:
            child.close()
            os.close(out_w)
            os.close(err_w)
        self.sock = parent
        self.reader = Reader(parent)
        self.stdout = OutputTail(out_r, output_cap)
        self.stderr = OutputTail(err_r, output_cap)
        self.exit: ChildExit | None = None
        self.unsolicited = False
        self.transport: Any = None  # transport.Transport, closed after the worker is gone
        self.closed = False

    def request(
        self,
        msg: dict[str, Any],
        fds: list[int] | None,
        deadline: float,
        extend: Callable[[], float | None] | None = None,
    ) -> tuple[dict[str, Any], list[int]]:
        """Send one request and wait for its reply until `deadline` (time.monotonic); when it
        passes, `extend` may give a later one (budget.LoadAwareBudget) or None (Deadline)."""
        try:
            send_msg(self.sock, msg, fds)
        except OSError as exc:
            raise PeerClosed(f"worker gone: {exc}") from exc
        while True:
            try:
                reply, rfds = self.reader.recv(deadline)
                break
            except Deadline:
                later = extend() if extend is not None else None
                if later is None:
                    raise
                deadline = later
        if self.reader.pending():
            self.unsolicited = True  # the real worker never sends more than one reply
        return reply, rfds

    def close(self, wait_s: float = 10.0) -> ChildExit | None:
        if self.exit is None:
            self.server.kill(self.pid)
            self.exit = self.server.wait_exit(self.pid, wait_s)
        # also when the worker had already ended (crash: exit set by wait_exit), once
        if not self.closed:
            self.closed = True
            try:
                self.reader.close_fds()
                self.sock.close()
            finally:
                if self.transport is not None:
                    self.transport.close()
        return self.exit

    def wait_exit(self, wait_s: float) -> ChildExit | None:
        """Wait for the worker to end by itself (after it closed the socket)."""
        if self.exit is None:
            self.exit = self.server.wait_exit(self.pid, wait_s)
        return self.exit

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def describe_exit(
    ex: ChildExit | None, stderr_tail: Callable[[], str] | None = None
) -> tuple[str, str]:
    """(status name, message) for a worker that ended without answering. A GPU fault the ROCm
    runtime reports on stderr before aborting ("Memory access fault by GPU node ...") is an
    illegal memory access, as the same fault is on CUDA (untested on AMD hardware)."""
    if ex is None:
        return "crash", "the worker ended without answering and its exit status is unknown"
    if ex.reason == "rss":
        return "resource_limit", "killed: resident memory exceeded the limit"
    sig = ex.signal
    if sig is not None:
        name = (
            signal.Signals(sig).name
            if sig in signal.Signals.__members__.values()
            else f"signal {sig}"
        )
        if sig == signal.SIGXCPU:
            return "resource_limit", "killed: CPU time limit exceeded (SIGXCPU)"
        if sig == signal.SIGXFSZ:
            return "resource_limit", "killed: file size limit exceeded (SIGXFSZ)"
        if (
            sig == signal.SIGABRT
            and stderr_tail
            and "memory access fault by gpu" in (stderr_tail().lower())
        ):
            return "illegal_memory_access", f"the GPU reported a memory access fault ({name})"
        return "crash", f"the process crashed with {name}"
    return "crash", f"the process exited with code {ex.code} before answering"
