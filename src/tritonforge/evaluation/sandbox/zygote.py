"""The fork server's own process: torch and triton preloaded, one sandboxed worker forked per candidate.

Run as `python -m tritonforge.evaluation.sandbox.zygote FD` by the judge's handle
(`evaluation/judge/forkserver.py`). The server is started with the device pinned and a minimal
environment before torch is imported, so every child inherits them; CUDA is never initialised
here, only in children. It also watches each child's resident memory (whole process tree) and
kills trees over their limit. `preload` installs the audit (hook, stubs, tripwires) once here,
inherited by every child. Every child runs `_run_child`: wire fds, enter the sandbox, run the
worker; so this module is part of the candidate's process.
Does not cover: the judge's handle (judge/forkserver.py), isolation (isolation.py), the worker
loop (worker.py).
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import time
from typing import Any

from tritonforge.evaluation.sandbox import captured

captured.private_builtins()  # the worker's modules, imported from here on, keep their builtins
from tritonforge.evaluation.sandbox.numerics import exact_fp32  # noqa: E402
from tritonforge.evaluation.sandbox.protocol import (  # noqa: E402
    PeerClosed,
    ProtocolError,
    Reader,
    send_msg,
)

RSS_POLL_S = 0.2


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
        from tritonforge.evaluation.sandbox import worker
        from tritonforge.evaluation.sandbox.isolation import SandboxSpec, enter_sandbox

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


def serve(fd: int) -> None:
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
