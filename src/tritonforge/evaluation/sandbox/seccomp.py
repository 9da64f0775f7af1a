"""Kernel-enforced limits of a worker after start-up: a seccomp filter the candidate cannot lift.

Covers: `install()` (called by the worker once CUDA, the profiler and the shared buffers are set
up, right before the candidate is imported) and `policy_bpf` (the BPF program, built for
x86_64 or aarch64). The filter refuses, for this process and everything it starts:

- new threads: `clone` with CLONE_THREAD fails with EAGAIN (Python: "can't start new thread"),
  `clone3` fails with ENOSYS so glibc falls back to `clone` (whose flags a filter can read).
  New processes (`fork`, `vfork`, `clone` without CLONE_THREAD) stay possible: Triton's compiler
  runs ptxas and the C compiler, and the audit hook judges who spawns what;
- new sockets: `socket()` of every family fails with EPERM (`socketpair` stays: it connects the
  process only to itself). The worker's channel to the judge exists before the filter. Without a
  network namespace (the rlimits sandbox) this is what keeps the candidate off the network:
  TCP/UDP to loopback or anywhere, abstract unix sockets (named per network namespace, with no
  file permission at all: X11, D-Bus, container runtimes), netlink, vsock, packet and AF_ALG;
  one rule with no family exceptions is simpler to trust than a family allowlist;
- signals to any process but itself: `kill`, `tkill`, `rt_sigqueueinfo` whose pid (low 32 bits,
  what the kernel reads), and `tgkill`, `rt_tgsigqueueinfo` whose thread group, is not the pid
  the worker had when the filter was installed, fail with EPERM (so do negative pids, 0 and -1:
  process groups and "everyone"); `pidfd_open`, `pidfd_send_signal` and `pidfd_getfd` fail with
  EPERM. The fork server and the judge are then unkillable from the worker even where they run
  as the same user; the worker's children (which inherit the filter with the worker's pid) can
  signal nobody, not even themselves;
- other processes' scheduling and limits: `prlimit64`, `sched_setaffinity`, `sched_setparam`,
  `sched_setscheduler`, `sched_setattr`, `migrate_pages`, `move_pages` on a pid other than 0 or
  the worker's own, and `setpriority`/`ioprio_set` on anything but itself (who 0 or its pid),
  EPERM: workers of one user could otherwise slow each other's timings;
- System V IPC and POSIX message queues (`shmget`, `shmat`, `shmctl`, `msg*`, `sem*`,
  `mq_open`), EPERM: their objects outlive the process and, without an ipc namespace, are the
  host's (a memory hoard no process holds, or another program's segment by a guessed id);
- `mknod`/`mknodat` (FIFOs, device nodes) with EPERM;
- kernel interfaces no candidate needs and that bypass other layers: `io_uring_setup` (file
  operations the filter could not see), `openat2`, `open_by_handle_at`, `name_to_handle_at`,
  `ptrace`, `process_vm_readv/writev`, `process_madvise`, `kcmp`, `userfaultfd`, `bpf`,
  `perf_event_open`, `unshare`, `setns`, `mount`, `umount2`, `pivot_root`, `chroot`, with EPERM;
- any other ABI of the same kernel (i386 or x32 calls from a 64-bit process): the process is
  killed, since the numbers above would not apply.

Why threads are refused here, not audited: the profiler audit, the output lineage and the
tripwires follow one thread; a thread made by the candidate would compute out of their sight.
Refusing `clone(CLONE_THREAD)` after start-up covers every way to make one (threading, _thread,
concurrent.futures, a C library), needs no list of Python routes, and the threads torch, CUDA and
Triton need exist before the filter is installed (see docs/security.md).
Does not cover: the namespaces, users, Landlock and rlimits (isolation.py, landlock.py), the
per-worker cgroups (cgroups.py) or anything decided in Python.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
CLONE_THREAD = 0x00010000

_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JSET = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_JGE = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_RET = 0x06  # BPF_RET | BPF_K
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
_KILL_PROCESS = 0x80000000
_OFF_NR, _OFF_ARCH = 0, 4  # struct seccomp_data
_EPERM = _ERRNO | errno.EPERM


def _arg_low(i: int) -> int:
    """Offset of the low 32 bits of argument `i` (little-endian on both ABIs)."""
    return 16 + 8 * i


# Refused outright (EPERM), per architecture.
_EPERM_X86_64 = {
    "mknod": 133, "mknodat": 259, "io_uring_setup": 425, "openat2": 437,
    "open_by_handle_at": 304, "name_to_handle_at": 303, "ptrace": 101,
    "process_vm_readv": 310, "process_vm_writev": 311, "process_madvise": 440, "kcmp": 312,
    "userfaultfd": 323, "bpf": 321, "perf_event_open": 298, "unshare": 272, "setns": 308,
    "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161,
    "socket": 41, "pidfd_open": 434, "pidfd_send_signal": 424, "pidfd_getfd": 438,
    "shmget": 29, "shmat": 30, "shmctl": 31, "semget": 64, "semop": 65, "semctl": 66,
    "semtimedop": 220, "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71, "mq_open": 240,
}  # fmt: skip
_EPERM_AARCH64 = {
    "mknodat": 33, "io_uring_setup": 425, "openat2": 437, "open_by_handle_at": 265,
    "name_to_handle_at": 264, "ptrace": 117, "process_vm_readv": 270,
    "process_vm_writev": 271, "process_madvise": 440, "kcmp": 272, "userfaultfd": 282,
    "bpf": 280, "perf_event_open": 241, "unshare": 97, "setns": 268, "mount": 40,
    "umount2": 39, "pivot_root": 41, "chroot": 51,
    "socket": 198, "pidfd_open": 434, "pidfd_send_signal": 424, "pidfd_getfd": 438,
    "shmget": 194, "shmat": 196, "shmctl": 195, "semget": 190, "semop": 193, "semctl": 191,
    "semtimedop": 192, "msgget": 186, "msgsnd": 189, "msgrcv": 188, "msgctl": 187,
    "mq_open": 180,
}  # fmt: skip
# Allowed only when argument `arg` is the worker's own pid (signals: "self" only) ...
_SELF_ONLY = {
    "x86_64": {"kill": (62, 0), "tkill": (200, 0), "tgkill": (234, 0),
               "rt_sigqueueinfo": (129, 0), "rt_tgsigqueueinfo": (297, 0)},
    "aarch64": {"kill": (129, 0), "tkill": (130, 0), "tgkill": (131, 0),
                "rt_sigqueueinfo": (138, 0), "rt_tgsigqueueinfo": (240, 0)},
}  # fmt: skip
# ... or 0 ("the calling process") as well
_SELF_OR_ZERO = {
    "x86_64": {"prlimit64": (302, 0), "sched_setaffinity": (203, 0),
               "sched_setparam": (142, 0), "sched_setscheduler": (144, 0),
               "sched_setattr": (314, 0), "migrate_pages": (256, 0), "move_pages": (279, 0),
               "setpriority": (141, 1), "ioprio_set": (251, 1)},
    "aarch64": {"prlimit64": (261, 0), "sched_setaffinity": (122, 0),
                "sched_setparam": (118, 0), "sched_setscheduler": (119, 0),
                "sched_setattr": (274, 0), "migrate_pages": (238, 0), "move_pages": (239, 0),
                "setpriority": (140, 1), "ioprio_set": (30, 1)},
}  # fmt: skip
# setpriority/ioprio_set: `which` (argument 0) must also name a process, not a group or a user
_WHICH_PROCESS = {"setpriority": 0, "ioprio_set": 1}  # PRIO_PROCESS, IOPRIO_WHO_PROCESS

_ARCHES: dict[str, dict[str, object]] = {
    "x86_64": {
        "audit": 0xC000003E,
        "clone": 56,
        "clone3": 435,
        "x32_bit": 0x40000000,
        "eperm": _EPERM_X86_64,
    },
    "aarch64": {
        "audit": 0xC00000B7,
        "clone": 220,
        "clone3": 435,
        "x32_bit": None,
        "eperm": _EPERM_AARCH64,
    },
}


def _ins(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def _pid_rule(nr: int, arg: int, own_pid: int, zero_ok: bool, which: int | None) -> list[bytes]:
    """Allow syscall `nr` only when argument `arg` is `own_pid` (or 0 when `zero_ok`) and, with
    `which`, argument 0 equals it; else EPERM. Leaves the syscall number in A when `nr` differs."""
    body = []
    if which is not None:
        body += [
            _ins(_LD_W_ABS, 0, 0, _arg_low(0)),
            _ins(_JEQ, 1, 0, which),
            _ins(_RET, 0, 0, _EPERM),
        ]
    body.append(_ins(_LD_W_ABS, 0, 0, _arg_low(arg)))
    if zero_ok:
        body += [_ins(_JEQ, 2, 0, 0)]  # to ALLOW
    body += [
        _ins(_JEQ, 1, 0, own_pid & 0xFFFFFFFF),
        _ins(_RET, 0, 0, _EPERM),
        _ins(_RET, 0, 0, _ALLOW),
    ]
    return [_ins(_JEQ, 0, len(body), nr), *body]


def policy_bpf(machine: str, own_pid: int | None = None) -> list[bytes] | None:
    """The filter for `machine` (platform.machine()), or None when it is not supported.
    `own_pid`: the only pid signals may target (default: this process's)."""
    arch = _ARCHES.get(machine)
    if arch is None:
        return None
    pid = os.getpid() if own_pid is None else own_pid
    eperm = sorted(arch["eperm"].values())  # type: ignore[union-attr]
    prog = [
        _ins(_LD_W_ABS, 0, 0, _OFF_ARCH),
        _ins(_JEQ, 1, 0, int(arch["audit"])),  # type: ignore[arg-type]
        _ins(_RET, 0, 0, _KILL_PROCESS),
        _ins(_LD_W_ABS, 0, 0, _OFF_NR),
    ]
    if arch["x32_bit"] is not None:
        prog += [_ins(_JGE, 0, 1, int(arch["x32_bit"])), _ins(_RET, 0, 0, _KILL_PROCESS)]  # type: ignore[arg-type]
    prog += [
        _ins(_JEQ, 0, 4, int(arch["clone"])),  # type: ignore[arg-type]
        _ins(_LD_W_ABS, 0, 0, _arg_low(0)),  # clone's flags (low 32 bits) on both ABIs
        _ins(_JSET, 0, 1, CLONE_THREAD),
        _ins(_RET, 0, 0, _ERRNO | errno.EAGAIN),
        _ins(_RET, 0, 0, _ALLOW),
        _ins(_JEQ, 0, 1, int(arch["clone3"])),  # type: ignore[arg-type]
        _ins(_RET, 0, 0, _ERRNO | errno.ENOSYS),
    ]
    for nr in eperm:
        prog += [_ins(_JEQ, 0, 1, nr), _ins(_RET, 0, 0, _EPERM)]
    for table, zero_ok in ((_SELF_ONLY, False), (_SELF_OR_ZERO, True)):
        for name, (nr, arg) in sorted(table[machine].items()):
            prog += _pid_rule(nr, arg, pid, zero_ok, _WHICH_PROCESS.get(name))
    prog.append(_ins(_RET, 0, 0, _ALLOW))
    return prog


class _Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install() -> str:
    """Install the filter in this process (irrevocable). Returns "" on success, else why not
    (reported as a sandbox warning; the in-process audit still applies)."""
    prog = policy_bpf(platform.machine())
    if prog is None:
        return f"seccomp filter not available on {platform.machine()}: threads are not refused"
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(b"".join(prog))
    fprog = _Prog(len(prog), ctypes.cast(buf, ctypes.c_void_p))
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return f"no_new_privs failed ({errno.errorcode.get(ctypes.get_errno(), '?')})"
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        err = errno.errorcode.get(ctypes.get_errno(), "?")
        return f"seccomp filter refused by the kernel ({err}): threads are not refused"
    return ""
