"""Landlock for the worker: writes only beneath its scratch dir, no TCP, no signals or abstract
unix sockets outside its own process tree. Holds without namespaces and without root.

Covers: `abi()` (the kernel's Landlock ABI, 0 when there is none) and `restrict(scratch)`, run by
isolation.enter_sandbox in the worker once its scratch dir exists and `no_new_privs` is set. The
domain it creates is inherited by everything the worker starts and cannot be lifted:

- filesystem (ABI 1+): every right that changes the filesystem (write to a file, truncate
  (ABI 3), make or remove files, directories, links, sockets, FIFOs and device nodes, link or
  rename across directories (ABI 2)) is granted beneath the scratch dir only (with namespaces
  also beneath the sandbox's private tmpfs mounts, /tmp, /dev/shm, /var/tmp, whose writes
  reach nothing outside it: libraries that ignore TMPDIR or make POSIX semaphores keep
  working); beneath `/dev`,
  writing to existing files stays (`/dev/null`, the GPU's device nodes) but nothing is created
  or removed there (`/dev/shm` included). GPU workers may write existing files anywhere their
  permissions allow (the NVIDIA driver needs it to initialise CUDA; with namespaces the
  filesystem is read-only anyway). Reads and execution are not restricted (the user's
  file permissions decide). Already open descriptors (the judge's channel, stdout/stderr, memfds)
  keep working;
- network (ABI 4+): TCP `bind` and `connect` refused (seccomp refuses new sockets anyway);
- scopes (ABI 6+): no signal to a process outside the domain (`kill`, `pidfd_send_signal`,
  ...: the fork server, the judge, other workers) and no `connect` to an abstract unix socket
  made outside it. Landlock also keeps `ptrace` (and /proc/PID/mem) off processes outside the
  domain from ABI 1.

The rlimits sandbox has no mount or network namespace, so this is what keeps the candidate out
of world-writable directories (/tmp, /var/tmp, /dev/shm) and other users' sockets there; with
namespaces it is a second wall. Where the kernel has no Landlock, `restrict` returns why, and the
caller reports it as a sandbox warning.
Does not cover: the seccomp filter (seccomp.py), users and namespaces (isolation.py).
"""

from __future__ import annotations

import ctypes
import os

SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446  # every architecture
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1

FS_WRITE_FILE = 1 << 1
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1

_WRITES_V1 = (
    FS_WRITE_FILE
    | FS_REMOVE_DIR
    | FS_REMOVE_FILE
    | FS_MAKE_CHAR
    | FS_MAKE_DIR
    | FS_MAKE_REG
    | FS_MAKE_SOCK
    | FS_MAKE_FIFO
    | FS_MAKE_BLOCK
    | FS_MAKE_SYM
)

_libc = ctypes.CDLL(None, use_errno=True)


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def abi() -> int:
    """The kernel's Landlock ABI version (0: not available or disabled)."""
    v = _libc.syscall(SYS_CREATE_RULESET, None, ctypes.c_size_t(0), CREATE_RULESET_VERSION)
    return max(0, int(v))


def _handled(version: int) -> tuple[int, int, int, int]:
    """(handled fs rights, their size in the attribute struct, net rights, scopes) of `version`."""
    fs = _WRITES_V1 | (FS_REFER if version >= 2 else 0) | (FS_TRUNCATE if version >= 3 else 0)
    net = NET_BIND_TCP | NET_CONNECT_TCP if version >= 4 else 0
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if version >= 6 else 0
    size = 8 if version < 4 else 16 if version < 6 else 24
    return fs, size, net, scoped


def _add_beneath(ruleset: int, path: str, access: int) -> None:
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        rule = _PathBeneath(access, fd)
        if _libc.syscall(SYS_ADD_RULE, ruleset, RULE_PATH_BENEATH, ctypes.byref(rule), 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"landlock rule for {path}: {os.strerror(err)}")
    finally:
        os.close(fd)


def restrict(scratch: str, private: tuple[str, ...] = (), gpu: bool = False) -> str:
    """Restrict this process (and all it starts) as the module docstring says; `private`: more
    folders writable like scratch (the namespace's own tmpfs mounts); `gpu`: existing files may
    be opened for writing anywhere the user's permissions allow (NVIDIA's driver does so while
    CUDA initialises, somewhere no single top-level folder of the H200 image holds: with writes
    of existing files handled, cudaGetDeviceCount fails with error 304; found by bisecting the
    rules there). Making, removing or renaming files stays confined. Returns "" when done, else
    why not (no Landlock here, or the kernel refused)."""
    version = abi()
    if version < 1:
        return "Landlock is not available in this kernel"
    fs, size, net, scoped = _handled(version)
    attr = _RulesetAttr(fs, net, scoped)
    ruleset = _libc.syscall(SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0)
    if ruleset < 0:
        return f"Landlock ruleset refused: {os.strerror(ctypes.get_errno())}"
    try:
        for path in (scratch, *private):
            _add_beneath(ruleset, path, fs)
        if gpu:
            _add_beneath(ruleset, "/", FS_WRITE_FILE | (fs & FS_TRUNCATE))
        elif os.path.isdir("/dev"):
            _add_beneath(ruleset, "/dev", FS_WRITE_FILE | (fs & FS_TRUNCATE))
        if _libc.syscall(SYS_RESTRICT_SELF, ruleset, 0) != 0:
            return f"Landlock restrict_self refused: {os.strerror(ctypes.get_errno())}"
    except OSError as exc:
        return str(exc)
    finally:
        os.close(ruleset)
    return ""


def describe(version: int) -> str:
    """What the Landlock domain of `version` covers, for the sandbox report."""
    parts = ["writes only beneath scratch"]
    if version >= 4:
        parts.append("no TCP")
    if version >= 6:
        parts.append("no signals or abstract sockets outside the worker")
    return f"Landlock ABI {version}: " + ", ".join(parts)
