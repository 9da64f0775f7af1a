"""Pieces of the sandbox's OS layer on their own, in throw-away processes.

Covers: a per-worker cgroup (sandbox/cgroups.py) kills a double-forked setsid daemon and its
memory limit OOM-kills a process holding unmapped memfd pages (counted by `oom_kills`); the
watchdog's measure (sandbox/treewatch.py) counts memfd pages a child holds without mapping them
and `kill_tree` kills a child that left the process group; Landlock (sandbox/landlock.py) keeps
writes in scratch and signals inside the domain; a non-dumpable process's /proc environ, maps
and mem are closed to another process of the same user (the judge and fork server rely on it),
and making a ForkServer handle makes the judge non-dumpable; serve-eval refuses a token on its
command line and reads one from --token-file. Does not cover: the same through a whole
evaluation (tests/eval/test_os_layer.py).
"""

from __future__ import annotations

import argparse
import errno
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tritonforge.config import ConfigError
from tritonforge.evaluation.sandbox import cgroups, landlock, treewatch

HOLDER = textwrap.dedent(
    """
    import os, sys, time
    fd = os.memfd_create("hold")
    chunk = b"x" * (1 << 20)
    for i in range(int(sys.argv[1])):
        os.pwrite(fd, chunk, i << 20)
    print("held", flush=True)
    time.sleep(60)
    """
)
DAEMON = textwrap.dedent(
    """
    import os, sys, time
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            print(os.getpid(), flush=True)
            time.sleep(60)
        os._exit(0)
    os.wait()
    time.sleep(60)
    """
)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] not in "ZX"
    except OSError:
        return False


def _group(memory_mb: int) -> tuple[cgroups.Hierarchy, cgroups.WorkerGroup]:
    h = cgroups.Hierarchy.detect()
    if h is None:
        pytest.skip("no cgroup hierarchy this process may write")
    dirs = h.server_group(os.getpid())
    return h, cgroups.WorkerGroup.create(h, dirs, "w-test", memory_mb, 64)


def _in_group(group: cgroups.WorkerGroup, code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        preexec_fn=group.join,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_cgroup_kills_a_double_forked_daemon() -> None:
    h, group = _group(512)
    proc = _in_group(group, DAEMON)
    try:
        daemon = int(proc.stdout.readline())
        assert _alive(daemon) and os.getsid(daemon) != os.getsid(proc.pid)
        assert daemon in group.procs()
        assert group.kill() >= 2
        proc.wait(timeout=10)
        deadline = time.monotonic() + 5
        while _alive(daemon) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(daemon)
    finally:
        group.kill()
        group.remove()
        cgroups.reap_server(h, os.getpid())


def test_cgroup_memory_limit_counts_unmapped_memfd_pages() -> None:
    h, group = _group(256)
    if not group.memory_limited:
        pytest.skip("no memory controller in this cgroup hierarchy")
    proc = _in_group(group, HOLDER, "1024")  # 1 GB into a memfd, never mapped
    try:
        proc.wait(timeout=60)
        assert proc.returncode == -signal.SIGKILL
        assert group.oom_kills() >= 1
    finally:
        group.kill()
        group.remove()
        cgroups.reap_server(h, os.getpid())


def test_watchdog_counts_a_childs_unmapped_memfd_and_kills_the_tree() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", f"import subprocess, sys, time\n"
         f"subprocess.Popen([sys.executable, '-c', {HOLDER!r}, '200'], start_new_session=True)\n"
         "time.sleep(60)"],
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while treewatch.tree_memory_kb(parent.pid) < 200 * 1024 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert treewatch.tree_memory_kb(parent.pid) >= 200 * 1024
        tree = treewatch.descendants(parent.pid)
        assert len(tree) == 2 and os.getsid(tree[1]) != os.getsid(parent.pid)
        treewatch.kill_tree(parent.pid, group=False)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 5
        while _alive(tree[1]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(tree[1])
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


LANDLOCK = textwrap.dedent(
    """
    import ctypes, json, os, sys
    from tritonforge.evaluation.sandbox import landlock
    scratch, outside, victim = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ctypes.CDLL(None).prctl(38, 1, 0, 0, 0)
    out = {"why": landlock.restrict(scratch)}
    for name, path in (("inside", scratch + "/f"), ("outside", outside + "/f")):
        try:
            open(path, "w").write("x")
            out[name] = "ok"
        except OSError as exc:
            out[name] = exc.errno
    try:
        os.kill(victim, 0)
        out["signal"] = "ok"
    except OSError as exc:
        out["signal"] = exc.errno
    print(json.dumps(out))
    """
)


@pytest.mark.skipif(landlock.abi() < 1, reason="no Landlock in this kernel")
def test_landlock_keeps_writes_in_scratch_and_signals_inside(tmp_path) -> None:
    import json

    scratch, outside = tmp_path / "scratch", tmp_path / "outside"
    scratch.mkdir()
    outside.mkdir()
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        res = subprocess.run(
            [sys.executable, "-c", LANDLOCK, str(scratch), str(outside), str(victim.pid)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    finally:
        victim.kill()
        victim.wait()
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["why"] == "" and out["inside"] == "ok", out
    assert out["outside"] == 13 and not (outside / "f").exists(), out  # EACCES
    if landlock.abi() >= 6:
        assert out["signal"] == 1, out  # EPERM: the victim is outside the domain


PROC = textwrap.dedent(
    """
    import ctypes, json, os, sys, time
    libc = ctypes.CDLL(None)
    out = {}
    for dumpable in (1, 0):
        r, w = os.pipe()
        target = os.fork()
        if target == 0:
            os.setgid(65534); os.setuid(65534)
            libc.prctl(4, dumpable, 0, 0, 0)
            os.write(w, b"x")
            time.sleep(30)
            os._exit(0)
        os.read(r, 1)
        reader = os.fork()
        if reader == 0:
            os.setgid(65534); os.setuid(65534)
            got = []
            for name in ("environ", "maps", "mem", "cmdline"):
                try:
                    open(f"/proc/{target}/{name}", "rb").read(1)
                    got.append(name)
                except OSError:
                    pass
            os.write(w, json.dumps(got).encode())
            os._exit(0)
        os.waitpid(reader, 0)
        out[dumpable] = json.loads(os.read(r, 4096))
        os.kill(target, 9)
        os.waitpid(target, 0)
    print(json.dumps(out))
    """
)


@pytest.mark.skipif(os.geteuid() != 0, reason="two processes of another user need root")
def test_non_dumpable_proc_closed_to_the_same_user() -> None:
    import json

    res = subprocess.run([sys.executable, "-c", PROC], capture_output=True, text=True, timeout=60)
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert set(out["1"]) >= {"environ", "maps", "cmdline"}, out  # dumpable: the same user reads
    assert out["0"] == ["cmdline"], out  # not dumpable: only the command line stays readable


def test_forkserver_handle_makes_the_judge_non_dumpable() -> None:
    code = (
        "import ctypes\n"
        "from tritonforge.evaluation.judge.forkserver import ForkServer\n"
        "libc = ctypes.CDLL(None)\n"
        "before = libc.prctl(3, 0, 0, 0, 0)\n"
        "ForkServer({})\n"
        "print(before, libc.prctl(3, 0, 0, 0, 0))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.stdout.split() == ["1", "0"], res.stderr


def _serve_args(**kw: object) -> argparse.Namespace:
    base = dict(
        config=None, set=[], preset=None, host=None, port=None, device=None, workers=None,
        token=None, token_file=None, queue_size=None, gpus=None,
    )  # fmt: skip
    return argparse.Namespace(**{**base, **kw})


def test_serve_eval_refuses_a_token_on_the_command_line(tmp_path) -> None:
    from tritonforge.commands.serve_eval import config_from_args

    with pytest.raises(ConfigError, match="cmdline"):
        config_from_args(_serve_args(token="s3cret"))
    with pytest.raises(ConfigError, match="cmdline"):
        config_from_args(_serve_args(set=['token="s3cret"']))
    path = tmp_path / "token"
    path.write_text("s3cret\n")
    assert config_from_args(_serve_args(token_file=str(path))).token == "s3cret"
    path.write_text("")
    with pytest.raises(ConfigError, match="empty"):
        config_from_args(_serve_args(token_file=str(path)))


LANDLOCK_GPU = textwrap.dedent(
    """
    import ctypes, json, os, sys
    from tritonforge.evaluation.sandbox import landlock
    scratch, outside, gpu = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
    ctypes.CDLL(None).prctl(38, 1, 0, 0, 0)
    out = {"why": landlock.restrict(scratch, gpu=gpu)}
    for name, path, mode in (("existing", outside + "/existing", "r+"), ("new", outside + "/new", "w")):
        try:
            open(path, mode).write("x")
            out[name] = "ok"
        except OSError as exc:
            out[name] = exc.errno
    print(json.dumps(out))
    """
)


@pytest.mark.skipif(landlock.abi() < 1, reason="no Landlock in this kernel")
@pytest.mark.parametrize("gpu", [False, True])
def test_gpu_workers_may_write_existing_files_only(tmp_path, gpu: bool) -> None:
    # NVIDIA's driver opens an existing file for writing while CUDA initialises (error 304 on
    # the H200 with writes of existing files confined); making files stays confined either way
    import json

    scratch, outside = tmp_path / "scratch", tmp_path / "outside"
    scratch.mkdir()
    outside.mkdir()
    (outside / "existing").write_text("")
    res = subprocess.run(
        [sys.executable, "-c", LANDLOCK_GPU, str(scratch), str(outside), "1" if gpu else "0"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["why"] == "", out
    assert out["new"] == errno.EACCES
    assert out["existing"] == ("ok" if gpu else errno.EACCES)
