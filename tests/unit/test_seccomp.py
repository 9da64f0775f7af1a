"""The worker's seccomp filter (sandbox/seccomp.py), installed in a throw-away process.

Covers: the filter builds for x86_64 and aarch64 and not for an unknown machine; once installed,
a new thread fails (threading, raw _thread) while fork, a subprocess and a plain file in the
current directory still work, and mknod/mkfifo are refused with EPERM; raw routes (libc
syscalls, the `os`/`signal`/`socket` modules; no Python layer here) to the network (TCP to a
loopback listener of the test, an abstract unix socket, netlink), to other processes of the same
user (kill, kill(-1, 0), tgkill, pidfd_open/pidfd_send_signal, prlimit, setpriority) and to
System V shared memory all fail, while signals to itself, socketpair and prlimit(0) still work.
Does not cover: which threads torch, CUDA or Triton need (tests/gpu/test_hybrid_gpu.py checks
honest GPU candidates compile and run under it).
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import textwrap

import pytest

from tritonforge.evaluation.sandbox.seccomp import policy_bpf

PROBE = textwrap.dedent(
    """
    import json, os, subprocess, threading, _thread
    from tritonforge.evaluation.sandbox import seccomp
    out = {"install": seccomp.install()}
    try:
        threading.Thread(target=lambda: None).start()
        out["thread"] = "started"
    except RuntimeError as exc:
        out["thread"] = str(exc)
    try:
        _thread.start_new_thread(lambda: None, ())
        out["raw_thread"] = "started"
    except RuntimeError as exc:
        out["raw_thread"] = str(exc)
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    out["fork"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    out["subprocess"] = subprocess.run(["true"]).returncode
    try:
        os.mkfifo("fifo")
        out["mkfifo"] = "made"
    except OSError as exc:
        out["mkfifo"] = exc.errno
    with open("plain.txt", "w") as f:
        out["file"] = f.write("ok")
    print(json.dumps(out))
    """
)


def test_filter_builds_per_architecture() -> None:
    for machine in ("x86_64", "aarch64"):
        prog = policy_bpf(machine)
        assert prog is not None and all(len(ins) == 8 for ins in prog)
        assert len(prog) < 4096  # the kernel's limit on a filter's length
    assert policy_bpf("sparc64") is None


@pytest.mark.skipif(policy_bpf(platform.machine()) is None, reason="no filter for this machine")
def test_threads_refused_processes_allowed(tmp_path) -> None:
    res = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    if out["install"]:
        pytest.skip(f"the kernel refused the filter here: {out['install']}")
    assert out["thread"] == "can't start new thread", out
    assert out["raw_thread"] == "can't start new thread", out
    assert out["fork"] == 7 and out["subprocess"] == 0 and out["file"] == 2, out
    assert out["mkfifo"] == 1, out  # EPERM
    assert not (tmp_path / "fifo").exists()


RAW = textwrap.dedent(
    """
    import ctypes, json, os, signal, socket, sys
    from tritonforge.evaluation.sandbox import seccomp
    libc = ctypes.CDLL(None, use_errno=True)
    port, abstract, victim = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    out = {"install": seccomp.install()}

    def attempt(name, fn):
        try:
            r = fn()
            out[name] = "ok" if r is None or r >= 0 else os.strerror(ctypes.get_errno())
        except OSError as exc:
            out[name] = exc.strerror

    def raw(nr, *args):
        return libc.syscall(nr, *args)

    attempt("tcp", lambda: socket.create_connection(("127.0.0.1", port), timeout=2).close())
    attempt("raw_socket", lambda: raw(41, 2, 1, 0))  # socket(AF_INET, SOCK_STREAM) on x86_64
    attempt("abstract", lambda: socket.socket(socket.AF_UNIX).connect("\\0" + abstract))
    attempt("netlink", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0).close())
    attempt("socketpair", lambda: [s.close() for s in socket.socketpair()] and None)
    attempt("kill_other", lambda: os.kill(victim, 0))
    attempt("kill_all", lambda: os.kill(-1, 0))
    attempt("kill_group", lambda: os.kill(0, 0))
    attempt("raw_kill_other", lambda: raw(62, victim, 0))
    attempt("tgkill_other", lambda: raw(234, victim, victim, 0))
    attempt("pidfd_open", lambda: raw(434, victim, 0))
    attempt("pidfd_send_signal", lambda: raw(424, 0, 0, None, 0))
    attempt("prlimit_other", lambda: raw(302, victim, 7, None, None))
    attempt("setpriority_user", lambda: os.setpriority(os.PRIO_USER, 0, 0))
    attempt("shmget", lambda: raw(29, 0, 1 << 20, 0o1600))
    attempt("kill_self", lambda: os.kill(os.getpid(), 0))
    attempt("raise_self", lambda: signal.raise_signal(signal.SIGWINCH))
    attempt("prlimit_self", lambda: raw(302, 0, 7, None, None))
    print(json.dumps(out))
    """
)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="raw syscall numbers are x86_64's")
def test_raw_routes_to_network_and_other_processes_refused(tmp_path) -> None:
    import socket
    import uuid

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.settimeout(0.1)
    abstract = f"tf-seccomp-{uuid.uuid4().hex[:8]}"
    unix = socket.socket(socket.AF_UNIX)
    unix.bind("\0" + abstract)
    unix.listen(4)
    unix.settimeout(0.1)
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        port = str(listener.getsockname()[1])
        res = subprocess.run(
            [sys.executable, "-c", RAW, port, abstract, str(victim.pid)],
            cwd=tmp_path, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        out = json.loads(res.stdout.strip().splitlines()[-1])
        if out["install"]:
            pytest.skip(f"the kernel refused the filter here: {out['install']}")
        for sock in (listener, unix):
            with pytest.raises(OSError):
                sock.accept()  # nothing ever connected
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()
        listener.close()
        unix.close()
    refused = "Operation not permitted"
    for name in (
        "tcp", "raw_socket", "abstract", "netlink", "kill_other", "kill_all", "kill_group",
        "raw_kill_other", "tgkill_other", "pidfd_open", "pidfd_send_signal", "prlimit_other",
        "setpriority_user", "shmget",
    ):  # fmt: skip
        assert out[name] == refused, (name, out)
    for name in ("socketpair", "kill_self", "raise_self", "prlimit_self"):
        assert out[name] == "ok", (name, out)
