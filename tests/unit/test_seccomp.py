"""The worker's seccomp filter (sandbox/seccomp.py), installed in a throw-away process.

Covers: the filter builds for x86_64 and aarch64 and not for an unknown machine; once installed,
a new thread fails (threading, raw _thread) while fork, a subprocess and a plain file in the
current directory still work, and mknod/mkfifo are refused with EPERM. Does not cover: which
threads torch, CUDA or Triton need (tests/gpu/test_hybrid_gpu.py checks honest GPU candidates
compile and run under it).
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
