"""File-system decisions of the audit hook: which path an event really touches, and whether that
is allowed for candidate code.

Covers: resolving an event's path arguments before judging them (relative names against the
directory of their `dir_fd`, or the cwd; symlinks), refusing any open of a file on a procfs mount
(by device number, so `//proc/self/mem`, `/dev/fd/...` or a relative walk through a directory fd
cannot dodge a string prefix), refusing writes, renames, links and deletes outside the scratch
dir, and `os.open` calls whose relative name cannot be resolved (the interpreter's `open` event
does not carry `dir_fd`; our `os.open` stub resolves it first, so only a raw call lands here).
`mkfifo`/`mknod` are refused by the seccomp filter (seccomp.py) and named by tripwires.
Does not cover: origins and the other rules (audit_hook.py).
"""

from __future__ import annotations

import os
from typing import Any

# filesystem events: (index of a path argument, index of its dir_fd argument or None)
FS_ARGS: dict[str, tuple[tuple[int, int | None], ...]] = {
    "open": ((0, None),),
    "os.remove": ((0, 1),),
    "os.rmdir": ((0, 1),),
    "os.mkdir": ((0, 2),),
    "os.rename": ((0, 2), (1, 3)),
    "os.link": ((0, 2), (1, 3)),
    "os.symlink": ((1, 2),),
    "os.chmod": ((0, 2),),
    "os.chown": ((0, 3),),
    "os.truncate": ((0, None),),
    "os.utime": ((0, 3),),
    "os.chflags": ((0, None),),
    "os.setxattr": ((0, None),),
    "os.removexattr": ((0, None),),
    "shutil.copyfile": ((1, None),),
    "shutil.copymode": ((1, None),),
    "shutil.copystat": ((1, None),),
    "shutil.copytree": ((1, None),),
    "shutil.move": ((0, None), (1, None)),
    "shutil.rmtree": ((0, None),),
    "shutil.make_archive": ((0, None),),
    "shutil.unpack_archive": ((1, None),),
}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


def proc_devices() -> frozenset[int]:
    """Device numbers of every procfs mount visible to this process."""
    devs = set()
    try:
        devs.add(os.stat("/proc").st_dev)
        with open("/proc/self/mountinfo") as f:
            for line in f:
                parts = line.split(" - ", 1)
                if len(parts) == 2 and parts[1].split()[0] == "proc":
                    try:
                        devs.add(os.stat(parts[0].split()[4]).st_dev)
                    except OSError:
                        continue
    except OSError:
        pass
    return frozenset(devs)


def resolve(path: Any, dir_fd: Any = None) -> str | None:
    """Absolute path named by `path` relative to `dir_fd` (or the cwd); None if not knowable."""
    try:
        name = os.fsdecode(path)
    except (TypeError, ValueError):
        return None
    if os.path.isabs(name):
        return os.path.normpath(name)
    if isinstance(dir_fd, int) and not isinstance(dir_fd, bool):
        try:
            base = os.readlink(f"/proc/self/fd/{dir_fd}")
        except OSError:
            return None
        if not os.path.isabs(base):
            return None  # a socket, pipe or deleted file: nothing to be relative to
    elif dir_fd is None:
        base = os.getcwd()
    else:
        return None
    return os.path.normpath(os.path.join(base, name))


def on_procfs(path: str, devs: frozenset[int]) -> bool:
    """Whether `path` (absolute), after following symlinks, or any directory on the way lies on
    a procfs mount."""
    for p in {path, os.path.realpath(path)}:
        cur = p
        while True:
            try:
                if os.stat(cur).st_dev in devs:
                    return True
            except OSError:
                pass
            parent = os.path.dirname(cur)
            if parent == cur:
                break
            cur = parent
    return False


def inside(path: str, scratch: str) -> bool:
    real = os.path.realpath(path)
    return bool(scratch) and (real == scratch or real.startswith(scratch.rstrip(os.sep) + os.sep))


def _writes(mode: Any, flags: Any) -> bool:
    if isinstance(mode, str) and any(c in mode for c in "wax+"):
        return True
    return isinstance(flags, int) and bool(flags & _WRITE_FLAGS)


def bad_path(event: str, args: tuple, scratch: str, devs: frozenset[int]) -> str | None:
    """Why candidate code may not do `event` with `args`, or None when it may."""
    for i, d in FS_ARGS[event]:
        if i >= len(args):
            continue
        raw = args[i]
        if isinstance(raw, int) and not isinstance(raw, bool):
            continue  # an fd the process already holds
        dir_fd = args[d] if d is not None and d < len(args) else None
        if event == "open" and args[1:2] == (None,) and not _absolute(raw):
            return "a relative os.open without a resolvable directory"
        path = resolve(raw, dir_fd)
        if path is None:
            return "a path that cannot be resolved"
        if on_procfs(path, devs):
            return f"{path} is on /proc"
        if event == "open":
            writes = _writes(args[1] if len(args) > 1 else None, args[2] if len(args) > 2 else None)
            if writes and not inside(path, scratch):
                return f"writing {path} outside the scratch dir"
        elif not inside(path, scratch):
            return f"{path} is outside the scratch dir"
    return None


def _absolute(raw: Any) -> bool:
    try:
        return os.path.isabs(os.fsdecode(raw))
    except (TypeError, ValueError):
        return False
