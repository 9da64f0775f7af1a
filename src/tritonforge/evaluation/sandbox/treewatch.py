"""The fork server's view of a worker's process tree without cgroups: who is in it, how much
memory it holds, and how to kill all of it.

Covers: `descendants`, `kill_tree` (stop the whole tree first, so nothing forks while it is
listed, then SIGKILL it), `orphans` (processes reparented to the fork server, which is a child
subreaper: what a double fork left behind), and `tree_memory_kb`, the memory watchdog's measure:
per process its private and file-backed resident pages (RssAnon + RssFile), plus every
shared-memory file the tree holds, open or mapped (memfd, /dev/shm, SysV), counted once by its
allocated size whether or not a page of it is mapped, plus the used space of the private tmpfs
mounts (/tmp, /dev/shm, /var/tmp) of a sandbox's mount namespace. Used where the kernel cannot
limit memory per worker (no cgroup memory controller); zygote.py polls it every 0.2 s.
Limits: a memfd only in flight in a unix socket's queue is held by no process and is not seen;
memory reached through another user's process needs root to read its /proc entries (without
root, files the fork server cannot stat count as their mapped resident pages only).
Does not cover: cgroups (cgroups.py), the fork-server loop (zygote.py).
"""

from __future__ import annotations

import os
import signal
import time

SHM_PREFIXES = ("/memfd:", "/dev/shm/", "/SYSV")
PRIVATE_TMPFS = ("/tmp", "/dev/shm", "/var/tmp")  # isolation.MASKED


def children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(c) for c in f.read().split())
    except (OSError, ValueError):
        pass
    return out


def descendants(pid: int) -> list[int]:
    """`pid` and every process below it, parents first."""
    out, seen, stack = [], set(), [pid]
    while stack:
        p = stack.pop()
        if p in seen:
            continue
        seen.add(p)
        out.append(p)
        stack.extend(children(p))
    return out


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_tree(pid: int, group: bool = True) -> None:
    """SIGKILL `pid`, its process group (`group`) and every descendant, also those that left the
    group with setsid: the tree is stopped first (SIGSTOP until no new process appears), so a
    process cannot fork away between being listed and being killed."""
    if group:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    stopped: set[int] = set()
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        fresh = [p for p in descendants(pid) if p not in stopped]
        if not fresh:
            break
        for p in fresh:
            _signal(p, signal.SIGSTOP)
        stopped.update(fresh)
    for p in stopped | {pid}:
        _signal(p, signal.SIGKILL)


def orphans(known: set[int]) -> list[int]:
    """Children of this process that it did not fork itself (reparented to it as the subreaper)."""
    return [p for p in children(os.getpid()) if p not in known]


def _status_kb(pid: int) -> tuple[int, int]:
    """(RssAnon + RssFile, RssShmem) of `pid` in KB."""
    private = shmem = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("RssAnon:", "RssFile:")):
                private += int(line.split()[1])
            elif line.startswith("RssShmem:"):
                shmem = int(line.split()[1])
    return private, shmem


def _shm_files(pid: int, seen: dict[tuple[int, int], int], private_ns: bool) -> bool:
    """Add the shared-memory files `pid` holds open or mapped to `seen` ((dev, inode) -> KB).
    Returns False when a mapped one could not be measured (its pages count as RssShmem)."""
    ok = True
    skip = PRIVATE_TMPFS if private_ns else ()  # measured as the namespace's tmpfs usage
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        fds = []
    for fd in fds:
        path = f"/proc/{pid}/fd/{fd}"
        try:
            target = os.readlink(path)
            if target.startswith(SHM_PREFIXES) and not target.startswith(skip):
                st = os.stat(path)
                seen[(st.st_dev, st.st_ino)] = st.st_blocks // 2
        except OSError:
            continue
    try:
        with open(f"/proc/{pid}/maps") as f:
            lines = [ln for ln in f if " /memfd:" in ln or " /dev/shm/" in ln or " /SYSV" in ln]
    except OSError:
        return True
    for line in lines:
        parts = line.split(maxsplit=5)
        dev, ino = parts[3], int(parts[4])
        key = (os.makedev(*(int(x, 16) for x in dev.split(":"))), ino)
        if key in seen or parts[5].startswith(skip):
            continue
        try:
            st = os.stat(f"/proc/{pid}/map_files/{parts[0]}")
            seen[(st.st_dev, st.st_ino)] = st.st_blocks // 2
        except OSError:
            ok = False
    return ok


def _tmpfs_used_kb(pid: int) -> int:
    total = 0
    for d in PRIVATE_TMPFS:
        try:
            st = os.statvfs(f"/proc/{pid}/root{d}")
        except OSError:
            continue
        total += (st.f_blocks - st.f_bfree) * st.f_frsize // 1024
    return total


def tree_memory_kb(pid: int) -> int:
    """Memory the tree at `pid` holds (see the module docstring)."""
    try:
        own_ns = os.readlink("/proc/self/ns/mnt")
    except OSError:
        own_ns = ""
    total, files, namespaces = 0, {}, {}
    for p in descendants(pid):
        try:
            private, shmem = _status_kb(p)
            ns = os.readlink(f"/proc/{p}/ns/mnt") if own_ns else ""
        except (OSError, ValueError):
            continue
        in_private = bool(ns) and ns != own_ns
        if in_private and ns not in namespaces:
            namespaces[ns] = _tmpfs_used_kb(p)
        total += private
        if not _shm_files(p, files, in_private):
            total += shmem
    return total + sum(files.values()) + sum(namespaces.values())
