"""Judge side of the fork server: start it, spawn sandboxed workers, wait for and kill them.

`ForkServer` is the handle the judge holds for one device's fork server (thread-safe; restarts
the server if it dies). The server itself, a process with torch and triton preloaded that forks
one worker per candidate, is `evaluation/sandbox/zygote.py`, run as
`python -m tritonforge.evaluation.sandbox.zygote FD` (no secret in its argv, which every local user
can read in /proc; its environment is the judge's minimal `base_env`). Creating a handle makes
the judge's own process not dumpable (`harden_judge`): its /proc/PID/{environ,mem,maps,fd,...}
then belong to root, so a worker running as the judge's user (the rlimits sandbox without root)
cannot read them; its cmdline, stat and status stay world-readable. When a server process ends
(closed, died, restarted) the handle kills whatever is left in that server's worker cgroups
(sandbox/cgroups.py): a worker cannot outlive its server even if the server was SIGKILLed.
Does not cover: the server's loop and the memory watchdog (sandbox/zygote.py), isolation applied
in the child (sandbox/isolation.py), the worker loop (sandbox/worker.py).
"""

from __future__ import annotations

import ctypes
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any

from tritonforge.evaluation.sandbox import cgroups
from tritonforge.evaluation.sandbox.protocol import ProtocolError, Reader, send_msg
from tritonforge.logging_setup import get_logger

log = get_logger("evaluation.forkserver")
PR_SET_DUMPABLE = 4


def harden_judge() -> None:
    """Make this (the judge's) process not dumpable: /proc/PID/{environ,mem,maps,fd,...} become
    root's. Side effect: debuggers and py-spy need root to attach to the judge."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


@dataclass
class ChildExit:
    pid: int
    code: int  # exit code; 128+N when killed by signal N (mirrored through the namespace init)
    reason: str = ""  # "rss" when the memory watchdog killed it

    @property
    def signal(self) -> int | None:
        return self.code - 128 if self.code > 128 else None


class ForkServer:
    """Handle to one fork-server process for one device. Restarts it if it dies."""

    def __init__(self, env: dict[str, str], python: str | None = None):
        self.env = env
        self.python = python or sys.executable
        self.proc: subprocess.Popen | None = None
        self.sock: socket.socket | None = None
        self.reader: Reader | None = None
        self.info: dict[str, Any] = {}
        self._lock = threading.Lock()  # one spawn/kill request in flight
        self._start_lock = threading.RLock()
        self._cond = threading.Condition()
        self._exits: dict[int, ChildExit] = {}
        self._replies: list[dict[str, Any]] = []
        self._pids: set[int] = set()  # workers forked by the current server process
        self._thread: threading.Thread | None = None
        self._alive = False
        harden_judge()

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self, timeout: float = 120.0) -> dict[str, Any]:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        cmd = [self.python, "-m", "tritonforge.evaluation.sandbox.zygote", str(child.fileno())]
        self.log_path = os.path.join(
            tempfile.gettempdir(), f"tritonforge-forkserver-{os.getpid()}-{id(self)}.log"
        )
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen(
                cmd,
                pass_fds=[child.fileno()],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=logf,
                start_new_session=True,
            )
        child.close()
        self.sock, self.reader = parent, Reader(parent)
        try:
            msg, _ = self.reader.recv(time.monotonic() + timeout)
        except ProtocolError as exc:
            self.close()
            tail = ""
            try:
                with open(self.log_path, errors="replace") as f:
                    tail = f.read()[-2000:]
            except OSError:
                pass
            raise RuntimeError(f"fork server failed to start: {exc}\n{tail}") from exc
        if msg.get("gpu_fork_ok") is False:
            # warming Triton's GPU driver broke CUDA in forked children: start again without it
            log.warning(
                "GPU driver warm-up is not fork-safe here; restarting the fork server without it"
            )
            self.env = {**self.env, "TRITONFORGE_WARM_GPU": "0"}
            self.close()
            return self.start(timeout)
        self.info = msg
        with self._cond:
            self._pids = set()  # workers of a previous server died with it (parent-death signal)
        self._alive = True
        self._thread = threading.Thread(target=self._pump, name="forkserver-pump", daemon=True)
        self._thread.start()
        log.debug(
            "fork server ready",
            extra={
                "fields": {"pid": self.proc.pid, **{k: v for k, v in msg.items() if k != "event"}}
            },
        )
        return msg

    @property
    def alive(self) -> bool:
        """The server process is up and its channel open (False once it died or was closed)."""
        return self._alive

    def ensure(self) -> None:
        with self._start_lock:  # callers with and without _lock must not start two servers
            if not self._alive or self.proc is None or self.proc.poll() is not None:
                self.close()
                self.start()

    def close(self) -> None:
        self._alive = False
        if self.sock is not None:
            try:
                send_msg(self.sock, {"op": "exit"})
            except OSError:
                pass
        if self.proc is not None:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            reap_server_groups(self.proc.pid)
        if self.sock is not None:
            self.sock.close()
        self.sock = self.reader = self.proc = None
        with self._cond:
            self._cond.notify_all()

    # -- pump thread -----------------------------------------------------------------------------
    def _pump(self) -> None:
        reader = self.reader
        while self._alive and reader is not None:
            try:
                msg, fds = reader.recv(None)
            except (ProtocolError, OSError, ValueError):
                break
            for fd in fds:
                os.close(fd)
            with self._cond:
                if msg.get("event") == "exit":
                    self._exits[int(msg["pid"])] = ChildExit(
                        int(msg["pid"]), int(msg["code"]), msg.get("reason", "")
                    )
                else:
                    self._replies.append(msg)
                self._cond.notify_all()
        self._alive = False
        with self._cond:
            self._cond.notify_all()

    def _request(
        self, msg: dict[str, Any], fds: list[int] | None, timeout: float = 30.0
    ) -> dict[str, Any]:
        with self._lock:
            for attempt in (1, 2):  # a server found dead is restarted once and asked again
                self.ensure()
                assert self.sock is not None
                try:
                    send_msg(self.sock, msg, fds)
                except OSError:
                    self._alive = False
                deadline = time.monotonic() + timeout
                with self._cond:
                    while not self._replies and self._alive:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            raise RuntimeError("fork server did not answer")
                        self._cond.wait(left)
                    if self._replies:
                        return self._replies.pop(0)
                log.warning("fork server died (attempt %d); restarting it", attempt)
            raise RuntimeError("fork server died twice in a row")

    # -- API ---------------------------------------------------------------------------------------
    def spawn(self, spec: dict[str, Any], fds: list[int]) -> int:
        """Fork a sandboxed worker that gets `fds` (control socket, stdout, stderr). Returns its pid."""
        reply = self._request({"op": "spawn", "spec": spec}, fds)
        if "pid" not in reply:
            raise RuntimeError(f"spawn failed: {reply.get('error', reply)}")
        with self._cond:
            self._pids.add(int(reply["pid"]))
        return int(reply["pid"])

    def kill(self, pid: int) -> None:
        """Kill the worker's whole process group (and with it its namespace)."""
        if pid not in self._pids or not self._alive:
            return  # its server has died: the worker died with it (parent-death signal)
        try:
            self._request({"op": "kill", "pid": pid}, None, timeout=10.0)
        except (RuntimeError, OSError):
            pass

    def wait_exit(self, pid: int, timeout: float) -> ChildExit | None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while pid not in self._exits:
                left = deadline - time.monotonic()
                if left <= 0 or not self._alive or pid not in self._pids:
                    return None
                self._cond.wait(left)
            self._pids.discard(pid)
            return self._exits.pop(pid)


def reap_server_groups(server_pid: int) -> None:
    """Kill what is left in the worker cgroups of fork server `server_pid` (it has exited)."""
    h = cgroups.Hierarchy.detect()
    if h is None:
        return
    try:
        killed = cgroups.reap_server(h, server_pid)
    except OSError as exc:
        log.warning("could not reap the cgroups of fork server %d: %s", server_pid, exc)
        return
    if killed:
        log.warning("killed %d processes left by fork server %d", killed, server_pid)
