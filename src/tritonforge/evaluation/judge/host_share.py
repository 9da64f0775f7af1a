"""Where judging processes on one host meet: a runtime directory, device keys, and liveness.

Covers: `runtime_dir()` (env `TRITONFORGE_RUNTIME_DIR`, `off` for none; else
`$XDG_RUNTIME_DIR/tritonforge`; else `<tmp>/tritonforge-<uid>`; a default directory must be ours
and private, 0700), `device_key(device)` (the physical device behind "cuda:N": its UUID, so
processes with different CUDA_VISIBLE_DEVICES agree), `flocked(path, kind)` (a blocking flock on
a file of that directory, released when the context ends or the process dies), and process
liveness through flocks: `register(directory)` makes this process hold `alive-<pid>-<token>.lock`
exclusively for its whole life (the kernel releases it when the process dies, however it dies),
and `alive(directory, pid, token)` asks whether that holder still lives. Every lock file is
opened close-on-exec, so a child that execs (the fork server) does not keep it.
Does not cover: the gate (host_gate.py) and the ledger (host_ledger.py) built on these.
"""

from __future__ import annotations

import fcntl
import os
import re
import secrets
import stat
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tritonforge.logging_setup import get_logger

log = get_logger("evaluation.host_share")

ENV = "TRITONFORGE_RUNTIME_DIR"
OFF = {"off", "none", "0", ""}
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_GUARD = threading.Lock()
_ALIVE: dict[str, tuple[int, str, int]] = {}  # directory -> (pid, token, fd) of this process
_WARNED: set[str] = set()


def _private(path: Path) -> str | None:
    """Why `path` is not a private directory of this user, or None."""
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory (or a symlink)"
    if st.st_uid != os.getuid():
        return f"owned by uid {st.st_uid}, not {os.getuid()}"
    if st.st_mode & 0o077:
        return f"mode {oct(st.st_mode & 0o777)} lets others in"
    return None


def runtime_dir() -> Path | None:
    """The directory judging processes of this user share, or None (then each process keeps its
    gate and ledger to itself, with a warning logged once)."""
    chosen = os.environ.get(ENV)
    if chosen is not None and chosen.strip().lower() in OFF:
        return None
    if chosen:
        path, default = Path(chosen), False
    elif os.environ.get("XDG_RUNTIME_DIR") and Path(os.environ["XDG_RUNTIME_DIR"]).is_dir():
        path, default = Path(os.environ["XDG_RUNTIME_DIR"]) / "tritonforge", True
    else:
        path, default = Path(tempfile.gettempdir()) / f"tritonforge-{os.getuid()}", True
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        why = _private(path)
    except OSError as exc:
        why = str(exc)
    if why is None or (not default and os.access(path, os.W_OK | os.X_OK)):
        if why is not None:
            _warn(str(path), f"{path} is shared ({why}): anyone who can write it can hold the gate")
        return path
    _warn(str(path), f"no cross-process gate and ledger: runtime directory {path}: {why}")
    return None


def _warn(key: str, message: str) -> None:
    with _GUARD:
        if key in _WARNED:
            return
        _WARNED.add(key)
    log.warning(message)


def device_key(device: str) -> str:
    """A file-name key of the physical device: `cuda:N` -> its UUID (CUDA_VISIBLE_DEVICES may
    differ between processes), else the visible id it maps to, else the name (also for a name
    that is not `cuda` or `cuda:N`)."""
    suffix = device.split(":", 1)[1] if ":" in device else "0"
    if device.split(":", 1)[0] == "cuda" and suffix.isdigit():
        index = int(suffix)
        try:
            import torch

            if torch.cuda.is_available():
                return "cuda-" + _SAFE.sub("_", str(torch.cuda.get_device_properties(index).uuid))
        except Exception as exc:  # no usable CUDA here: fall back to the visible list
            log.debug("device uuid of %s: %s", device, exc)
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
        if visible != [""] and index < len(visible):
            return "cuda-" + _SAFE.sub("_", visible[index].strip())
        return f"cuda-{index}"
    return _SAFE.sub("_", device)


def open_lock(path: Path) -> int:
    """An fd of a lock file (created 0600 if missing), close-on-exec."""
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


@contextmanager
def flocked(path: Path, kind: int = fcntl.LOCK_EX) -> Iterator[int]:
    """Hold a blocking flock of `kind` on `path`; yields the fd. Each call opens its own
    description, so two threads of one process exclude each other like two processes."""
    fd = open_lock(path)
    try:
        fcntl.flock(fd, kind)
        yield fd
    finally:
        os.close(fd)  # releases the lock


def register(directory: Path) -> tuple[int, str]:
    """(pid, token) of this process in `directory`, holding its alive lock from now on."""
    pid = os.getpid()
    with _GUARD:
        known = _ALIVE.get(str(directory))
        if known is not None and known[0] == pid:
            if (directory / f"alive-{pid}-{known[1]}.lock").exists():
                return known[0], known[1]
            os.close(known[2])  # removed under us (a tmp cleaner): register again
        token = secrets.token_hex(6)
        fd = open_lock(directory / f"alive-{pid}-{token}.lock")
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # new file: nobody else holds it
        _ALIVE[str(directory)] = (pid, token, fd)
        return pid, token


def alive(directory: Path, pid: int, token: str) -> bool:
    """Whether the process that registered (pid, token) in `directory` still lives; a dead
    one's alive file is removed."""
    path = directory / f"alive-{pid}-{token}.lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    path.unlink(missing_ok=True)
    return False


def _forget_after_fork() -> None:
    """A forked child is another process: it drops its copies of the parent's alive locks (or
    the parent's death would not release them) and registers anew when it needs to."""
    global _GUARD
    _GUARD = threading.Lock()  # another thread may have held it at the fork
    for _, _, fd in _ALIVE.values():
        try:
            os.close(fd)
        except OSError:
            pass
    _ALIVE.clear()


os.register_at_fork(after_in_child=_forget_after_fork)
