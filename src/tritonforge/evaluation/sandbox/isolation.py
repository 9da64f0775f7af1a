"""Process isolation of candidates: Linux namespaces, an unprivileged user, Landlock, rlimits,
a scrubbed environment.

Covers the child side (`enter_sandbox`, run in a freshly forked process before any candidate
code) and the shared `SandboxSpec`. Layers, strongest first:

- user namespace mapped to the caller (when the judge is not root), plus pid, net, mount and ipc
  namespaces: the candidate sees its own process tree only, has no network (not even loopback),
  a private tmpfs for /tmp (its scratch), /dev/shm and /var/tmp (the last two small), and a
  fresh /proc;
- never root: a root judge hands the worker to `nobody` with the GPU device nodes' groups
  (identity.py), in both modes; where `nobody` cannot reach the interpreter or a device node
  the worker refuses the candidate (`SandboxReport.refused`, a typed `Refusal` code);
- all capabilities dropped, no_new_privs set, securebits locked (exec cannot regain root);
- Landlock (landlock.py, where the kernel has it): writes only beneath scratch, no TCP, no
  signals or abstract sockets outside the worker's tree;
- not dumpable: the worker's /proc files belong to root, so other workers of the same user
  cannot read or write its memory (/proc/PID/mem), and neither can the worker itself;
- rlimits: CPU seconds, address space (CPU device only; CUDA reserves huge virtual ranges),
  file size, open files, processes, no core dumps;
- a minimal environment (no tokens or secrets leak in).

Where namespaces are unavailable it degrades to the rest and says so in
`SandboxReport.warnings`. Does not cover: the fork server, the per-worker cgroups and the
watchdog (zygote.py, cgroups.py, treewatch.py, judge/forkserver.py), seccomp (seccomp.py) or
in-process audits (audit.py). See docs/security.md for what this does not stop.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource
import signal
from dataclasses import asdict, dataclass, field
from typing import Any

from tritonforge.evaluation.sandbox import identity, landlock
from tritonforge.evaluation.sandbox.identity import NOBODY, Refusal

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_MOVE = 8192
MS_REC = 16384
MS_PRIVATE = 1 << 18
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_SECUREBITS = 28
PR_SET_NO_NEW_PRIVS = 38
SMALL_TMPFS_MB = 64  # /dev/shm and /var/tmp in the namespace: shared memory is memfd or nothing
__all__ = ["NOBODY", "SandboxReport", "SandboxSpec", "enter_sandbox"]

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


@dataclass
class SandboxSpec:
    """What the child should apply; JSON-serialisable (crosses the fork-server socket)."""

    isolation: str = "auto"  # auto | namespaces | rlimits
    device: str = "cpu"
    memory_mb: int = 16384
    cpu_seconds: int = 900
    max_processes: int = 512
    max_open_files: int = 1024
    max_file_mb: int = 2048
    scratch: str = ""  # rlimits mode: a private dir made by the judge; namespaces: inside tmpfs
    env: dict[str, str] = field(default_factory=dict)
    # GPU device nodes the worker opens (NVIDIA /dev/nvidia*, AMD /dev/kfd + /dev/dri/*), listed
    # by the judge (tritonforge.hardware.gpu_device_nodes)
    device_nodes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SandboxSpec:
        return cls(**d)


@dataclass
class SandboxReport:
    namespaces: bool = False
    user: str = ""
    scratch: str = ""
    warnings: list[str] = field(default_factory=list)
    refused: str = ""  # "<Refusal code>: why": the worker must not run the candidate at all
    private_tmpfs: list[str] = field(default_factory=list)  # masked by a tmpfs of its own


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _prctl(option: int, arg: int) -> int:
    return _libc.prctl(
        option, ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)
    )


def set_parent_death_signal() -> None:
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _mount(
    src: str | None, target: str, fstype: str | None, flags: int, data: str | None = None
) -> int:
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    return _libc.mount(enc(src), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data))


def _remount_readonly() -> list[str]:
    """Bind-remount every visible mount read-only (best effort; returns failures)."""
    failed = []
    flag_of = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC}
    with open("/proc/self/mountinfo") as f:
        rows = [line.split() for line in f]
    for row in rows:
        mountpoint, opts = row[4], row[5].split(",")
        if mountpoint.startswith(("/proc", "/sys", "/dev")):
            continue
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY
        for o in opts:
            flags |= flag_of.get(o, 0)
        if _mount(None, mountpoint, None, flags) != 0:
            failed.append(mountpoint)
    return failed


MASKED = ("/tmp", "/dev/shm", "/var/tmp")  # replaced by private tmpfs in the sandbox
SYS_OPEN_TREE, SYS_MOVE_MOUNT = 428, 429  # same number on every architecture (Linux >= 5.2)
OPEN_TREE_CLONE, AT_RECURSIVE, AT_FDCWD, MOVE_MOUNT_F_EMPTY_PATH = 1, 0x8000, -100, 4


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _clone_tree(path: str) -> int:
    """A detached copy of the mount tree at `path` (open_tree), to re-attach after masking."""
    fd = _libc.syscall(
        SYS_OPEN_TREE, AT_FDCWD, path.encode(), OPEN_TREE_CLONE | AT_RECURSIVE | os.O_CLOEXEC
    )
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"open_tree {path}: {os.strerror(err)}")
    return fd


def _attach(fd: int, target: str) -> None:
    os.makedirs(target, mode=0o755, exist_ok=True)
    _check(
        _libc.syscall(SYS_MOVE_MOUNT, fd, b"", AT_FDCWD, target.encode(), MOVE_MOUNT_F_EMPTY_PATH),
        f"move_mount {target}",
    )


def _mask(spec: SandboxSpec, report: SandboxReport, as_root: bool) -> None:
    """Private tmpfs over /tmp, /dev/shm, /var/tmp (and, as root, an empty tmpfs over any
    directory `nobody` cannot enter, e.g. /root), keeping the interpreter's own folders (venv,
    stdlib, sys.path entries such as a checkout under /tmp) visible by cloning their mount trees
    first and attaching the clones after masking."""
    masked = [m for m in MASKED if os.path.isdir(m)]
    needed: dict[str, str | None] = {}
    for p in identity.interpreter_paths():
        under_masked = any(_under(p, m) for m in masked)
        # under a masked dir the parents are recreated (0755) inside the new tmpfs: no extra mask
        blocked = identity.blocked_ancestor(p) if as_root and not under_masked else None
        if blocked or under_masked:
            needed[p] = blocked
    tops = [p for p in needed if not any(p != q and _under(p, q) for q in needed)]
    clones: list[tuple[str, int]] = []
    keep_open: set[str] = set()
    for p in tops:
        try:
            clones.append((p, _clone_tree(p)))
        except OSError as exc:  # old kernel: leave that masked dir as it is
            keep_open.update(m for m in masked if _under(p, m))
            report.warnings.append(
                f"{exc}; {p} stays visible and its masked parent is not replaced"
            )
    for target in masked:
        if target not in keep_open:
            mb = spec.max_file_mb if target == "/tmp" else min(spec.max_file_mb, SMALL_TMPFS_MB)
            size = f"size={mb}m,mode=1777"
            _check(
                _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, size), f"tmpfs on {target}"
            )
            report.private_tmpfs.append(target)
    for a in sorted({needed[p] for p, _ in clones if needed[p]}):
        _check(
            _mount("tmpfs", a, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755"), f"tmpfs on {a}"
        )
        report.warnings.append(f"hid {a} except the interpreter's folders")
    for p, fd in clones:
        try:
            _attach(fd, p)
        finally:
            os.close(fd)


def _enter_namespaces(spec: SandboxSpec, report: SandboxReport) -> None:
    """Enter new namespaces. As root no user namespace is needed: mounts are prepared as real
    root, then the worker becomes `nobody` (all capabilities lost). Otherwise a user namespace
    maps the caller (whose own /proc files must be writable: the process is made dumpable
    before, the fork server is not)."""
    as_root = os.getuid() == 0
    if as_root:
        _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC), "unshare")
    else:
        uid, gid = os.getuid(), os.getgid()
        _check(
            _libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC),
            "unshare",
        )
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"0 {uid} 1")
        _write("/proc/self/gid_map", f"0 {gid} 1")
    _check(_mount(None, "/", None, MS_REC | MS_PRIVATE), "make / private")
    bad = _remount_readonly()
    if bad:
        report.warnings.append(f"could not remount read-only: {', '.join(bad[:5])}")
    _mask(spec, report, as_root)
    report.namespaces = True
    report.user = (
        "nobody (uid 65534) in pid+net+mount+ipc namespaces, read-only filesystem"
        if as_root
        else f"uid {os.getuid()} mapped in user+pid+net+mount+ipc namespaces, read-only filesystem"
    )


def _drop_capabilities() -> None:
    # securebits: NOROOT | NOROOT_LOCKED | NO_SETUID_FIXUP | NO_SETUID_FIXUP_LOCKED | KEEP_CAPS_LOCKED
    _prctl(PR_SET_SECUREBITS, 0x2F)

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [
            ("effective", ctypes.c_uint32),
            ("permitted", ctypes.c_uint32),
            ("inheritable", ctypes.c_uint32),
        ]

    hdr = Header(0x20080522, 0)
    data = (Data * 2)()
    _libc.capset(ctypes.byref(hdr), ctypes.byref(data))


def apply_rlimits(spec: SandboxSpec) -> None:
    def lim(which: int, value: int) -> None:
        try:
            _soft, hard = resource.getrlimit(which)
            v = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(which, (v, v))
        except (ValueError, OSError):
            pass

    lim(resource.RLIMIT_CPU, spec.cpu_seconds)
    lim(resource.RLIMIT_FSIZE, spec.max_file_mb * 1024 * 1024)
    lim(resource.RLIMIT_NOFILE, spec.max_open_files)
    lim(resource.RLIMIT_NPROC, spec.max_processes)
    lim(resource.RLIMIT_CORE, 0)
    if spec.device == "cpu":
        lim(resource.RLIMIT_AS, spec.memory_mb * 1024 * 1024)


def _pid1_reaper(child: int) -> None:
    """Run as pid 1 of the new pid namespace: reap everything, exit like `child` did."""
    code = 1
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            code = 128 - code if code < 0 else code
            break
    os._exit(code)  # exiting pid 1 kills whatever else the candidate left in the namespace


def _into_pid_namespace() -> None:
    """Fork twice after unshare: an intermediate stays outside and mirrors the exit status,
    pid 1 of the new namespace reaps (and its exit kills whatever is left), and the caller
    returns as pid 2, the worker."""
    pid = os.fork()  # becomes pid 1 in the new namespace
    if pid:
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        os._exit(128 - code if code < 0 else code)
    set_parent_death_signal()
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    worker = os.fork()
    if worker:
        _pid1_reaper(worker)


def _drop_root(spec: SandboxSpec, report: SandboxReport) -> None:
    """A root judge's worker becomes `nobody` with the device nodes' groups, in both modes. What
    `nobody` cannot reach is a refusal, never a reason to stay root."""
    access = identity.device_access(spec.device_nodes if spec.device == "cuda" else [])
    blocked = None if report.namespaces else identity.unreachable_interpreter(access.groups)
    identity.become_nobody(access.groups)
    if not report.namespaces:
        report.user = "nobody (uid 65534), no namespaces"
    if access.groups:
        report.user += f", device groups {access.groups}"
    if access.skipped:
        report.warnings.append(
            f"`nobody` cannot read {', '.join(access.skipped[:4])}: MIG instances are unusable"
        )
    if access.unreachable:
        report.refused = identity.refusal(
            Refusal.DEVICE_UNREACHABLE,
            f"`nobody` cannot open {', '.join(access.unreachable[:4])} (neither through its "
            "group nor as anyone); make the GPU's device nodes group- or world-accessible",
        )
    elif blocked:
        report.refused = identity.refusal(
            Refusal.INTERPRETER_UNREACHABLE,
            f"the rlimits sandbox runs candidates as `nobody`, which cannot enter {blocked}; "
            "install the interpreter and packages where `nobody` can read them, or allow "
            "namespaces (sandbox = auto)",
        )


def _landlock(report: SandboxReport, scratch: str, gpu: bool) -> None:
    why = landlock.restrict(scratch, tuple(report.private_tmpfs), gpu=gpu)
    if not why:
        report.user += f"; {landlock.describe(landlock.abi())}"
    elif not report.namespaces:
        report.warnings.append(
            f"{why}: without namespaces, world-writable directories (/tmp, /var/tmp, /dev/shm) "
            "are writable by the candidate"
        )


def enter_sandbox(spec: SandboxSpec) -> SandboxReport:
    """Isolate the current (freshly forked) process; returns in the process that runs the worker
    (with namespaces, pid 2 of a new pid namespace: `_into_pid_namespace`)."""
    report = SandboxReport()
    set_parent_death_signal()
    _prctl(PR_SET_DUMPABLE, 1)  # our own /proc files (uid_map) are ours to write until the end
    as_root = os.getuid() == 0
    if spec.isolation in ("auto", "namespaces"):
        try:
            _enter_namespaces(spec, report)
        except OSError as exc:
            if spec.isolation == "namespaces":
                raise
            report.warnings.append(f"namespaces unavailable ({exc}); degraded to rlimits")
    if report.namespaces:
        _into_pid_namespace()
        scratch = "/tmp/scratch"
    else:
        report.user = f"uid {os.getuid()}, no namespaces"
        scratch = spec.scratch
    if as_root:
        _drop_root(spec, report)
    elif report.namespaces:
        _drop_capabilities()
    else:
        report.warnings.append(
            "no namespaces and not root: the candidate runs as the judge's own user"
        )
    set_parent_death_signal()  # cleared by the credential change
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    os.makedirs(scratch, exist_ok=True)
    home = os.path.join(scratch, "home")
    cache = os.path.join(scratch, "triton-cache")
    os.makedirs(home, exist_ok=True)
    os.makedirs(cache, exist_ok=True)
    env = dict(spec.env)
    env.update({"HOME": home, "TMPDIR": scratch, "TRITON_CACHE_DIR": cache})
    os.environ.clear()
    os.environ.update(env)
    os.chdir(scratch)
    os.umask(0o077)
    _landlock(report, scratch, spec.device == "cuda")
    apply_rlimits(spec)
    _prctl(PR_SET_DUMPABLE, 0)  # /proc/PID/{mem,environ,fd,maps,...}: root's, not this user's
    report.scratch = scratch
    return report
