"""Kernel-enforced limits of a worker after start-up: a seccomp filter the candidate cannot lift.

Covers: `install()` (called by the worker once CUDA, the profiler and the shared buffers are set
up, right before the candidate is imported) and `policy_bpf` (the BPF program, built for
x86_64 or aarch64). The filter refuses, for this process and everything it starts:

- new threads: `clone` with CLONE_THREAD fails with EAGAIN (Python: "can't start new thread"),
  `clone3` fails with ENOSYS so glibc falls back to `clone` (whose flags a filter can read).
  New processes (`fork`, `vfork`, `clone` without CLONE_THREAD) stay possible: Triton's compiler
  runs ptxas and the C compiler, and the audit hook judges who spawns what;
- `mknod`/`mknodat` (FIFOs, device nodes) with EPERM;
- kernel interfaces no candidate needs and that bypass other layers: `io_uring_setup` (file
  operations the filter could not see), `openat2`, `open_by_handle_at`, `name_to_handle_at`,
  `ptrace`, `process_vm_readv/writev`, `userfaultfd`, `bpf`, `perf_event_open`, `unshare`,
  `setns`, `mount`, `umount2`, `pivot_root`, `chroot`, with EPERM;
- any other ABI of the same kernel (i386 or x32 calls from a 64-bit process): the process is
  killed, since the numbers above would not apply.

Why threads are refused here, not audited: the profiler audit, the output lineage and the
tripwires follow one thread; a thread made by the candidate would compute out of their sight.
Refusing `clone(CLONE_THREAD)` after start-up covers every way to make one (threading, _thread,
concurrent.futures, a C library), needs no list of Python routes, and the threads torch, CUDA and
Triton need exist before the filter is installed (see docs/security.md).
Does not cover: the namespaces and rlimits (isolation.py) or anything decided in Python.
"""

from __future__ import annotations

import ctypes
import errno
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
_OFF_NR, _OFF_ARCH, _OFF_ARG0 = 0, 4, 16  # struct seccomp_data

# audit arch, clone, clone3, then the refused syscalls (EPERM)
_ARCHES: dict[str, dict[str, object]] = {
    "x86_64": {
        "audit": 0xC000003E,
        "clone": 56,
        "clone3": 435,
        "x32_bit": 0x40000000,
        "eperm": {
            "mknod": 133,
            "mknodat": 259,
            "io_uring_setup": 425,
            "openat2": 437,
            "open_by_handle_at": 304,
            "name_to_handle_at": 303,
            "ptrace": 101,
            "process_vm_readv": 310,
            "process_vm_writev": 311,
            "userfaultfd": 323,
            "bpf": 321,
            "perf_event_open": 298,
            "unshare": 272,
            "setns": 308,
            "mount": 165,
            "umount2": 166,
            "pivot_root": 155,
            "chroot": 161,
        },
    },
    "aarch64": {
        "audit": 0xC00000B7,
        "clone": 220,
        "clone3": 435,
        "x32_bit": None,
        "eperm": {
            "mknodat": 33,
            "io_uring_setup": 425,
            "openat2": 437,
            "open_by_handle_at": 265,
            "name_to_handle_at": 264,
            "ptrace": 117,
            "process_vm_readv": 270,
            "process_vm_writev": 271,
            "userfaultfd": 282,
            "bpf": 280,
            "perf_event_open": 241,
            "unshare": 97,
            "setns": 268,
            "mount": 40,
            "umount2": 39,
            "pivot_root": 41,
            "chroot": 51,
        },
    },
}


def _ins(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def policy_bpf(machine: str) -> list[bytes] | None:
    """The filter for `machine` (platform.machine()), or None when it is not supported."""
    arch = _ARCHES.get(machine)
    if arch is None:
        return None
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
        _ins(_LD_W_ABS, 0, 0, _OFF_ARG0),  # clone's flags (low 32 bits) on both ABIs
        _ins(_JSET, 0, 1, CLONE_THREAD),
        _ins(_RET, 0, 0, _ERRNO | errno.EAGAIN),
        _ins(_RET, 0, 0, _ALLOW),
        _ins(_JEQ, 0, 1, int(arch["clone3"])),  # type: ignore[arg-type]
        _ins(_RET, 0, 0, _ERRNO | errno.ENOSYS),
    ]
    for nr in eperm:
        prog += [_ins(_JEQ, 0, 1, nr), _ins(_RET, 0, 0, _ERRNO | errno.EPERM)]
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
