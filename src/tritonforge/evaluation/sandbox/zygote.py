"""The fork server's own process: torch and triton preloaded, one sandboxed worker forked per candidate.

Run as `python -m tritonforge.evaluation.sandbox.zygote FD` by the judge's handle
(`evaluation/judge/forkserver.py`). The server is started with the device pinned and a minimal
environment before torch is imported, so every child inherits them; CUDA is never initialised
here, only in children. `preload` installs the audit (hook, stubs, tripwires) once here,
inherited by every child. Every child runs `_run_child`: join its cgroup, wire fds, enter the
sandbox, run the worker (or, when the sandbox refused, only answer the refusal); so this module
is part of the candidate's process.

What the server does for the OS layer (`Children`): it is not dumpable (its /proc files are
root's) and is a child subreaper (what a worker's double fork leaves behind is reparented here,
not to init). Each worker gets a cgroup where the kernel allows (cgroups.py: memory, pids,
freezer; shared-memory pages included); when a worker exits or is killed, everything in its
cgroup and its whole process tree is killed, and orphans reparented here are killed at once.
Memory: with a cgroup memory limit the kernel enforces it and the server reports an OOM kill as
the memory limit; without, the server polls the tree's memory every 0.2 s (treewatch.py:
private pages, memfd and shared-memory files held open or mapped, the namespace's tmpfs) and
kills trees over their limit.
Does not cover: the judge's handle (judge/forkserver.py), isolation (isolation.py), the worker
loop (worker.py).
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import socket
import sys
import time
from dataclasses import dataclass
from typing import Any

from tritonforge.evaluation.sandbox import cgroups, treewatch
from tritonforge.evaluation.sandbox.numerics import exact_fp32
from tritonforge.evaluation.sandbox.protocol import PeerClosed, ProtocolError, Reader, send_msg

RSS_POLL_S = 0.2
PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 4, 36


def harden() -> None:
    """This process: not dumpable (/proc/PID/{environ,mem,maps,fd} become root's, so a worker
    of the same user cannot read them) and the subreaper of everything it forks."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _python_layer_off() -> None:
    """Test-only (`"python_layer": false` in a spawn spec, set by tests/eval/test_os_layer.py):
    the worker imports the candidate without arming the audit hook or the guarded import, so a
    test shows what the OS layer holds alone. The judge never sets it."""
    from tritonforge.evaluation.sandbox import audit

    audit.arm = lambda *a, **k: None
    audit.guard_module = lambda d: None


def _refuse_all(fd: int, why: str) -> int:
    """The sandbox refused the candidate: answer every request with the refusal, run nothing."""
    sock = socket.socket(fileno=fd)
    reader = Reader(sock)
    while True:
        try:
            msg, fds = reader.recv(None)
        except (PeerClosed, ProtocolError, OSError):
            return 0
        for f in fds:
            os.close(f)
        if msg.get("op") == "exit":
            send_msg(sock, {"ok": True})
            return 0
        message = f"the sandbox refused to run the candidate: {why}"
        send_msg(
            sock, {"ok": False, "status": "internal_error", "phase": "sandbox", "message": message}
        )


def _run_child(
    spec: dict[str, Any],
    fds: list[int],
    server_sock: socket.socket,
    group: cgroups.WorkerGroup | None,
) -> None:
    """In the forked child: join the cgroup, wire fds, sandbox, then run the worker. Never returns."""
    code = 70
    try:
        if group is not None:
            group.join()  # first: whatever this process forks from now on stays in the group
        os.setsid()
        server_sock.close()
        ctl, out, err = fds
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.dup2(ctl, 3)
        os.closerange(4, 65536)
        from tritonforge.evaluation.sandbox import worker
        from tritonforge.evaluation.sandbox.isolation import SandboxSpec, enter_sandbox

        sspec = SandboxSpec.from_json(spec["sandbox"])
        report = enter_sandbox(sspec)
        if report.refused:
            code = _refuse_all(3, report.refused)
        else:
            if spec.get("python_layer") is False:
                _python_layer_off()
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


def warm_gpu_driver() -> bool:
    """GPU fork servers: load Triton's CUDA driver utilities (compiled with a C compiler on first
    use) here, once, so no worker pays for it. Returns False if that touched CUDA in a way that
    breaks forked children (checked by a throw-away child that must be able to use the GPU)."""
    import torch

    try:
        from triton.runtime import driver

        driver.active.utils  # noqa: B018 - builds/loads cuda_utils without creating a context
    except Exception:
        return True
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            torch.zeros(1, device="cuda").add_(1)
            torch.cuda.synchronize()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def preload() -> None:
    """Imports and wrappers done once in the fork server, inherited by every worker."""
    import traceback  # noqa: F401

    import torch
    import torch.profiler

    from tritonforge.evaluation.sandbox import audit

    exact_fp32()  # the precision the judge's references compute in, inherited by every fork
    # Warm the legacy profiler used by the audit (cheap; Kineto is avoided here because it would
    # initialise CUDA in the fork server, and a forked child cannot use CUDA after that).
    # Not on GPU fork servers: on a CUDA build even the legacy profiler initialises the driver,
    # after which forked children cannot use CUDA.
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) == "":
        with torch.autograd.profiler.profile(use_kineto=False) as prof:
            torch.relu(torch.zeros(4))
        prof.function_events  # noqa: B018
    audit.preload(cpu=os.environ.get("CUDA_VISIBLE_DEVICES", None) == "")
    if torch.cuda.is_initialized():
        raise RuntimeError("CUDA was initialised in the fork server; children could not use it")


@dataclass
class Child:
    pid: int
    limit_kb: int  # 0 = none
    group: cgroups.WorkerGroup | None
    memory_killed: bool = False


class Children:
    """The workers this server forked: their cgroups, memory watch, killing and reaping."""

    def __init__(self) -> None:
        self.h = cgroups.Hierarchy.detect()
        self.dirs: dict[str, str] = {}
        self.warnings: list[str] = []
        if self.h is not None:
            try:
                cgroups.sweep_stale(self.h)
                self.dirs = self.h.server_group(os.getpid())
            except OSError as exc:
                self.warnings.append(f"no per-worker cgroups: {exc}")
                self.h = None
        self.by_pid: dict[int, Child] = {}
        self.seq = 0

    def describe(self) -> str:
        if self.h is None:
            return "none (watchdog and child subreaper)"
        return f"v{self.h.version}: {', '.join(sorted(self.dirs))}"

    def new_group(self, spec: dict[str, Any]) -> cgroups.WorkerGroup | None:
        if self.h is None:
            return None
        self.seq += 1
        sandbox = spec.get("sandbox") or {}
        memory = int(spec.get("rss_limit_mb", 0)) or int(sandbox.get("memory_mb", 16384))
        try:
            return cgroups.WorkerGroup.create(
                self.h, self.dirs, f"w{self.seq}", memory, int(sandbox.get("max_processes", 512))
            )
        except OSError as exc:
            self.warnings.append(f"cgroup for a worker: {exc}")
            return None

    def add(self, pid: int, spec: dict[str, Any], group: cgroups.WorkerGroup | None) -> None:
        self.by_pid[pid] = Child(pid, int(spec.get("rss_limit_mb", 0)) * 1024, group)

    def kill(self, pid: int) -> None:
        """The worker's whole tree and cgroup, now (also what left its process group)."""
        child = self.by_pid.get(pid)
        if child is None:
            return
        treewatch.kill_tree(pid)
        if child.group is not None:
            child.group.kill()
        self.sweep_orphans()

    def poll_memory(self) -> None:
        for child in list(self.by_pid.values()):
            if not child.limit_kb or child.memory_killed:
                continue
            g = child.group
            if g is not None and g.memory_limited:
                over = g.oom_kills() > 0  # the kernel enforces the limit; an OOM kill ends all
            else:
                over = treewatch.tree_memory_kb(child.pid) > child.limit_kb
            if over:
                child.memory_killed = True
                self.kill(child.pid)

    def sweep_orphans(self) -> None:
        """Kill what was reparented to this server: a worker's double-forked daemon."""
        for pid in treewatch.orphans(set(self.by_pid)):
            treewatch.kill_tree(pid)

    def reaped(self, pid: int, status: int) -> dict[str, Any] | None:
        """A child was reaped: the exit event for the judge (None for an orphan). Whatever is
        left in the worker's cgroup dies first."""
        child = self.by_pid.pop(pid, None)
        if child is None:
            return None
        if child.group is not None:
            child.group.kill()
            child.memory_killed = child.memory_killed or child.group.oom_kills() > 0
            child.group.remove()
        self.sweep_orphans()
        code = os.waitstatus_to_exitcode(status)
        code = 128 - code if code < 0 else code
        return {
            "event": "exit",
            "pid": pid,
            "code": code,
            "reason": "rss" if child.memory_killed else "",
        }

    def close(self) -> None:
        for pid in list(self.by_pid):
            self.kill(pid)
        self.sweep_orphans()
        if self.h is not None:
            cgroups.reap_server(self.h, os.getpid())


def _reap(children: Children, sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        event = children.reaped(pid, status)
        if event is not None:
            send_msg(sock, event)


def _spawn(children: Children, msg: dict[str, Any], fds: list[int], sock: socket.socket) -> None:
    if len(fds) != 3:
        for f in fds:
            os.close(f)
        send_msg(sock, {"error": "spawn needs 3 fds"})
        return
    group = children.new_group(msg["spec"])
    pid = os.fork()
    if pid == 0:
        _run_child(msg["spec"], fds, sock, group)
    for f in fds:
        os.close(f)
    children.add(pid, msg["spec"], group)
    send_msg(sock, {"pid": pid})


def serve(fd: int) -> None:
    harden()
    sock = socket.socket(fileno=fd)
    # Preload everything a worker needs so each fork starts warm.
    t0 = time.perf_counter()
    import numpy  # noqa: F401
    import torch
    import triton
    import triton.language

    from tritonforge.evaluation.sandbox import worker  # noqa: F401

    preload()
    gpu_fork_ok = warm_gpu_driver() if os.environ.get("TRITONFORGE_WARM_GPU") == "1" else None
    children = Children()
    send_msg(
        sock,
        {
            "event": "ready",
            "pid": os.getpid(),
            "preload_s": round(time.perf_counter() - t0, 3),
            "torch": torch.__version__,
            "triton": triton.__version__,
            "gpu_fork_ok": gpu_fork_ok,
            "cgroups": children.describe(),
            "warnings": children.warnings,
        },
    )
    reader = Reader(sock)
    last_poll = 0.0
    try:
        while True:
            ready, _, _ = select.select([sock], [], [], 0.05)
            if ready:
                try:
                    msg, fds = reader.recv(time.monotonic() + 5)
                except (PeerClosed, ProtocolError, OSError):
                    break
                op = msg.get("op")
                if op == "spawn":
                    _spawn(children, msg, fds, sock)
                elif op == "kill":
                    children.kill(int(msg.get("pid", -1)))
                    send_msg(sock, {"ok": True})
                elif op == "exit":
                    break
                else:
                    send_msg(sock, {"error": f"unknown op {op!r}"})
            now = time.monotonic()
            if now - last_poll >= RSS_POLL_S:
                last_poll = now
                children.poll_memory()
                children.sweep_orphans()
            _reap(children, sock)
    finally:
        children.close()


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        serve(int(sys.argv[1]))
    except Exception as exc:
        sys.stderr.write(json.dumps({"forkserver_error": repr(exc)}) + "\n")
        raise
