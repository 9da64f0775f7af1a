"""Fork server: a process with torch and triton preloaded that forks one sandboxed worker per candidate.

Covers both sides: `ForkServer` (judge side: start, spawn, wait, kill; thread-safe) and `serve`
(the server's loop, run as `python -m tritonforge.evaluation.forkserver FD`). The server is
started with the device pinned and a minimal environment before torch is imported, so every child
inherits them; CUDA is never initialised here, only in children. It also watches each child's
resident memory (whole process tree) and kills trees over their limit.

Does not cover: the isolation applied in the child (sandbox.py) or the worker loop (worker.py).
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any

from tritonforge.evaluation.protocol import PeerClosed, ProtocolError, Reader, send_msg
from tritonforge.logging_setup import get_logger

log = get_logger("evaluation.forkserver")

RSS_POLL_S = 0.2


@dataclass
class ChildExit:
    pid: int
    code: int  # exit code; 128+N when killed by signal N (mirrored through the namespace init)
    reason: str = ""  # "rss" when the memory watchdog killed it

    @property
    def signal(self) -> int | None:
        return self.code - 128 if self.code > 128 else None


# ---------------------------------------------------------------------------------------------
# Judge side
# ---------------------------------------------------------------------------------------------


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

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self, timeout: float = 120.0) -> dict[str, Any]:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        cmd = [self.python, "-m", "tritonforge.evaluation.forkserver", str(child.fileno())]
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


# ---------------------------------------------------------------------------------------------
# Server side
# ---------------------------------------------------------------------------------------------


def _tree_rss_kb(pid: int) -> int:
    total, stack, seen = 0, [pid], set()
    while stack:
        p = stack.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            with open(f"/proc/{p}/statm") as f:
                total += int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    stack.extend(int(c) for c in f.read().split())
        except (OSError, ValueError):
            continue
    return total


def _kill_tree(pid: int) -> None:
    for fn in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            fn()
        except (ProcessLookupError, PermissionError):
            pass


def _run_child(spec: dict[str, Any], fds: list[int], server_sock: socket.socket) -> None:
    """In the forked child: wire fds, sandbox, then run the worker. Never returns."""
    code = 70
    try:
        os.setsid()
        server_sock.close()
        ctl, out, err = fds
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.dup2(ctl, 3)
        os.closerange(4, 65536)
        from tritonforge.evaluation import worker
        from tritonforge.evaluation.sandbox import SandboxSpec, enter_sandbox

        sspec = SandboxSpec.from_json(spec["sandbox"])
        report = enter_sandbox(sspec)
        code = worker.main(3, spec, report)
    except BaseException as exc:
        try:
            import traceback

            tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-6:])
            os.write(
                2,
                f"worker failed outside the candidate: {type(exc).__name__}: {exc}\n{tb}".encode(),
            )
        except (OSError, RecursionError):
            pass
    finally:
        os._exit(code)


def serve(fd: int) -> None:
    sock = socket.socket(fileno=fd)
    # Preload everything a worker needs so each fork starts warm.
    t0 = time.perf_counter()
    import numpy  # noqa: F401
    import torch
    import triton
    import triton.language

    from tritonforge.evaluation import audit, worker  # noqa: F401

    worker.preload()
    gpu_fork_ok = (
        worker.warm_gpu_driver() if os.environ.get("TRITONFORGE_WARM_GPU") == "1" else None
    )
    send_msg(
        sock,
        {
            "event": "ready",
            "pid": os.getpid(),
            "preload_s": round(time.perf_counter() - t0, 3),
            "torch": torch.__version__,
            "triton": triton.__version__,
            "gpu_fork_ok": gpu_fork_ok,
        },
    )
    reader = Reader(sock)
    children: dict[int, int] = {}  # pid -> rss limit in KB (0 = none)
    rss_killed: set[int] = set()
    last_poll = 0.0
    while True:
        ready, _, _ = select.select([sock], [], [], 0.05)
        if ready:
            try:
                msg, fds = reader.recv(time.monotonic() + 5)
            except (PeerClosed, ProtocolError, OSError):
                break
            op = msg.get("op")
            if op == "spawn":
                if len(fds) != 3:
                    for f in fds:
                        os.close(f)
                    send_msg(sock, {"error": "spawn needs 3 fds"})
                    continue
                pid = os.fork()
                if pid == 0:
                    _run_child(msg["spec"], fds, sock)
                for f in fds:
                    os.close(f)
                children[pid] = int(msg["spec"].get("rss_limit_mb", 0)) * 1024
                send_msg(sock, {"pid": pid})
            elif op == "kill":
                pid = int(msg.get("pid", -1))
                if pid in children:
                    _kill_tree(pid)
                send_msg(sock, {"ok": True})
            elif op == "exit":
                break
            else:
                send_msg(sock, {"error": f"unknown op {op!r}"})
        now = time.monotonic()
        if now - last_poll >= RSS_POLL_S:
            last_poll = now
            for pid, limit in list(children.items()):
                if limit and pid not in rss_killed and _tree_rss_kb(pid) > limit:
                    rss_killed.add(pid)
                    _kill_tree(pid)
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            code = os.waitstatus_to_exitcode(status)
            code = 128 - code if code < 0 else code
            children.pop(pid, None)
            reason = "rss" if pid in rss_killed else ""
            rss_killed.discard(pid)
            send_msg(sock, {"event": "exit", "pid": pid, "code": code, "reason": reason})
    for pid in children:
        _kill_tree(pid)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        serve(int(sys.argv[1]))
    except Exception as exc:
        sys.stderr.write(json.dumps({"forkserver_error": repr(exc)}) + "\n")
        raise
