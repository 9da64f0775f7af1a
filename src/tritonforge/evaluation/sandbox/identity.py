"""Who a worker runs as: never root. A judge running as root hands the worker to `nobody`, with
the groups of the GPU device nodes it must open as its only supplementary groups.

Covers: `NOBODY`, `Refusal` (the typed reasons a sandbox refuses to run a candidate at all),
`device_access` (which groups open the device nodes, and which nodes no group opens),
`interpreter_paths`/`blocked_ancestor` (can `nobody` reach the interpreter's folders) and
`become_nobody`. There is no fallback to root: where `nobody` cannot reach the interpreter (the
rlimits sandbox cannot hide a blocking folder such as a 0700 /root behind a tmpfs) or cannot open
a device node, the worker becomes `nobody` anyway and refuses the candidate (isolation.py,
zygote.py), and the verdict says which.
Does not cover: namespaces, mounts and rlimits (isolation.py).
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum

NOBODY = 65534


class Refusal(str, Enum):
    """Why a sandbox will not run a candidate (the start of `SandboxReport.refused`)."""

    INTERPRETER_UNREACHABLE = "interpreter_unreachable"
    DEVICE_UNREACHABLE = "device_unreachable"


@dataclass
class DeviceAccess:
    groups: list[int] = field(default_factory=list)  # supplementary groups that open the nodes
    unreachable: list[str] = field(default_factory=list)  # nodes `nobody` cannot open at all
    skipped: list[str] = field(default_factory=list)  # MIG capability nodes it cannot read


def _opens(st: os.stat_result, bits: int) -> str:
    """How `nobody` gets `bits` (read, or read+write, as owner-class bits) on a node: "any"
    (owner nobody, or others), "group" (through the node's group), or ""."""
    if st.st_uid == NOBODY and (st.st_mode >> 6) & bits == bits:
        return "any"
    if st.st_mode & bits == bits:
        return "any"
    if (st.st_mode >> 3) & bits == bits:
        return "group"
    return ""


def device_access(
    paths: Iterable[str], stat_fn: Callable[[str], os.stat_result] = os.stat
) -> DeviceAccess:
    """How `nobody` opens each character device among `paths`: as anyone, through the node's
    group (collected), or not at all. GPU nodes need read and write; NVIDIA's capability nodes
    (`nvidia-caps/*`, used only to enter MIG instances) only read, and one it cannot read is
    skipped (noted), not refused. Absent nodes are skipped."""
    out = DeviceAccess()
    for dev in paths:
        try:
            st = stat_fn(dev)
        except OSError:
            continue
        if not stat.S_ISCHR(st.st_mode):
            continue
        capability = "/nvidia-caps/" in dev
        how = _opens(st, 0o4 if capability else 0o6)
        if how == "group" and st.st_gid not in out.groups:
            out.groups.append(st.st_gid)
        elif not how:
            (out.skipped if capability else out.unreachable).append(dev)
    return out


def interpreter_paths() -> list[str]:
    paths = {sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable))}
    paths.update(p for p in sys.path if p and os.path.isdir(p))
    return sorted(os.path.realpath(p) for p in paths)


def _traversable(st: os.stat_result, groups: Iterable[int]) -> bool:
    if st.st_uid == NOBODY:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid in groups or st.st_gid == NOBODY:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


def blocked_ancestor(path: str, groups: Iterable[int] = ()) -> str | None:
    """Top-most ancestor of `path` that `nobody` (with `groups`) cannot traverse, e.g. /root."""
    groups = list(groups)
    parts = os.path.realpath(path).split(os.sep)[1:]
    cur = ""
    for part in parts[:-1]:
        cur += os.sep + part
        try:
            st = os.stat(cur)
        except OSError:
            return None
        if not _traversable(st, groups):
            return cur
    return None


def unreachable_interpreter(groups: Iterable[int] = ()) -> str | None:
    """The first folder blocking `nobody` from the interpreter, or None."""
    for p in interpreter_paths():
        blocked = blocked_ancestor(p, groups)
        if blocked:
            return f"{blocked} (above {p})"
    return None


def become_nobody(groups: Iterable[int]) -> None:
    """Drop root for good: uid and gid `nobody`, the given supplementary groups only."""
    os.setgroups(sorted(set(groups)))
    os.setgid(NOBODY)
    os.setuid(NOBODY)


def refusal(code: Refusal, detail: str) -> str:
    return f"{code.value}: {detail}"
