"""In-sandbox audit: what the candidate's forward really ran, and what it tried to touch.

Runs inside the worker process, installed before the candidate is imported:

- launch recorder: wraps Triton's launch entry points (compiled and interpreter) to log every
  kernel launch (name, tensor arguments) and, during correctness trials, which argument buffers
  the launch changed;
- dispatcher audit: `torch.profiler` (RecordFunction level, which `_DisableTorchDispatch` and
  dispatch modes cannot hide) records every aten op during forward; ops inside our launches (the
  interpreter's own copies) are excluded by a secret marker; the profiler's control functions are
  replaced by tripwires so the candidate cannot stop or restart it unnoticed;
- tripwires on host-escape methods (`Tensor.numpy/tolist/item/cpu`, `torch.from_numpy`, ...)
  during forward;
- a PEP 578 audit hook (cannot be removed) that blocks, for candidate code, network, process
  spawning, signals, native code (ctypes), frame/gc introspection, dynamic code, and writes
  outside the scratch dir; each block is also recorded as a violation, so catching the
  exception does not hide it;
- tamper checks on the functions the evaluator relies on (timers, synchronize, events,
  allclose/equal, do_bench, the recorder itself).

Does not cover: the static source rules (checks.py), isolation (sandbox.py), or judging (judge.py).
This layer lives in the candidate's own process; docs/security.md says what that implies.
"""

from __future__ import annotations

import os
import secrets
import sys
import sysconfig
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from tritonforge.evaluation.glue import classify_op

SNAPSHOT_LAUNCHES = 64  # per trial: launches whose argument buffers are diffed before/after
_STDLIB = (sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"])


@dataclass
class Launch:
    name: str
    args: list[tuple[int, int]]  # (storage data_ptr, storage nbytes) of tensor arguments
    changed: list[int] | None = None  # storage ptrs whose bytes changed (None: not snapshotted)
    ok: bool = False


@dataclass
class AuditState:
    token: str = field(default_factory=lambda: secrets.token_hex(8))
    candidate_path: str = ""
    scratch: str = ""
    allow_spawn_from: tuple[str, ...] = ("triton",)
    active: bool = False  # inside a forward call of a correctness or timing trial
    snapshot: bool = False  # diff argument buffers around launches
    light: bool = False  # timing: only count launches
    profiling: bool = False
    launch_count: int = 0
    snapshots: int = 0
    in_launch: int = 0
    hook_busy: bool = False
    launches: list[Launch] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    originals: dict[str, Any] = field(default_factory=dict)
    watched: list[tuple[Any, str, Any]] = field(default_factory=list)


STATE = AuditState()


def _violation(rule: str, detail: str) -> None:
    msg = f"{rule}: {detail}"
    if msg not in STATE.violations and len(STATE.violations) < 50:
        STATE.violations.append(msg)


# ---------------------------------------------------------------------------------------------
# Where a call comes from
# ---------------------------------------------------------------------------------------------


def _caller(depth: int):
    """The Python frame `depth` levels above the caller (sys._getframe audits itself)."""
    busy, STATE.hook_busy = STATE.hook_busy, True
    try:
        return sys._getframe(depth + 1)
    except ValueError:
        return None
    finally:
        STATE.hook_busy = busy


def _is_stdlib(filename: str) -> bool:
    return filename.startswith("<frozen") or (
        filename.startswith(_STDLIB) and "site-packages" not in filename
    )


def _kind(filename: str) -> str:
    if filename == STATE.candidate_path:
        return "candidate"
    if _is_stdlib(filename):
        return "stdlib"
    return "triton" if f"{os.sep}triton{os.sep}" in filename else "library"


def origin(frame) -> tuple[bool, str, str]:
    """For the frame that triggered an event: (candidate on the stack, immediate kind, nearest
    non-stdlib kind). Kinds: candidate | stdlib | triton | library | none."""
    if not STATE.candidate_path or frame is None:
        return False, "none", "none"
    busy, STATE.hook_busy = STATE.hook_busy, True  # f_code/f_back reads raise audit events too
    try:
        immediate = _kind(frame.f_code.co_filename)
        nearest, f = "none", frame
        while f is not None:
            k = _kind(f.f_code.co_filename)
            if nearest == "none" and k != "stdlib":
                nearest = k
            if k == "candidate":
                return True, immediate, nearest
            f = f.f_back
        return False, immediate, nearest
    finally:
        STATE.hook_busy = busy


# ---------------------------------------------------------------------------------------------
# PEP 578 audit hook
# ---------------------------------------------------------------------------------------------

_NETWORK = {
    "socket.__new__",
    "socket.connect",
    "socket.bind",
    "socket.sendto",
    "socket.getaddrinfo",
    "socket.sendmsg",
}
_SPAWN = {
    "subprocess.Popen",
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.fork",
    "os.forkpty",
    "pty.spawn",
    "os.startfile",
}
_SIGNAL = {"os.kill", "os.killpg", "signal.pthread_kill"}
_NATIVE = {
    "ctypes.dlopen",
    "ctypes.dlsym",
    "ctypes.cdata",
    "ctypes.call_function",
    "ctypes.addressof",
    "ctypes.string_at",
    "ctypes.wstring_at",
    "ctypes.cdata/buffer",
}
_INTROSPECT = {
    "gc.get_objects",
    "gc.get_referrers",
    "gc.get_referents",
    "sys._getframe",
    "sys._current_frames",
    "sys.settrace",
    "sys.setprofile",
    "sys._getframemodulename",
    "code.__new__",
    "function.__new__",
    "marshal.loads",
    "sys.addaudithook",
    "cpython._PySys_ClearAuditHooks",
}
_RESTRICTED_ATTRS = {
    "f_back",
    "f_globals",
    "f_locals",
    "f_code",
    "f_builtins",
    "tb_frame",
    "gi_frame",
    "cr_frame",
    "ag_frame",
    "gi_code",
    "__code__",
    "__globals__",
}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


def _writes(mode: Any, flags: Any) -> bool:
    if isinstance(mode, str) and any(c in mode for c in "wax+"):
        return True
    return isinstance(flags, int) and bool(flags & _WRITE_FLAGS)


def _rule_for(event: str, args: tuple) -> str | None:
    if event in _NETWORK:
        return "network"
    if event in _SPAWN:
        return "process_spawn"
    if event in _SIGNAL:
        return "signal_process"
    if event.startswith("ctypes."):
        return "native_code"
    if event in _INTROSPECT:
        return "introspection"
    if event == "object.__getattr__" and len(args) > 1 and args[1] in _RESTRICTED_ATTRS:
        return "introspection"
    if event in ("exec", "compile"):
        return "dynamic_code"
    if event == "open":
        return "filesystem"
    if event == "import" and args and str(args[0]).split(".")[0] in _FORBIDDEN_IMPORTS:
        return "forbidden_import"
    return None


def _allowed(rule: str, event: str, args: tuple, immediate: str, nearest: str) -> bool:
    """Whether an event raised while candidate code is on the stack is still fine."""
    if rule in ("introspection", "dynamic_code"):
        # only direct use by the candidate: stdlib helpers (namedtuple, dataclasses, typing)
        # and libraries use frames and exec internally
        return immediate != "candidate"
    if rule == "filesystem":
        path = str(args[0]) if args else ""
        writes = _writes(args[1] if len(args) > 1 else None, args[2] if len(args) > 2 else None)
        bad = path.startswith("/proc") or (writes and not _inside_scratch(path))
        return nearest != "candidate" or not bad
    if rule == "forbidden_import":
        return nearest != "candidate"
    if rule == "process_spawn":
        return nearest in STATE.allow_spawn_from  # Triton running ptxas / a C compiler
    if rule == "native_code":
        return nearest in ("triton", "library")  # torch/triton loading their own libraries
    return False  # network, signals: never on behalf of the candidate


def _hook(event: str, args: tuple) -> None:
    if STATE.hook_busy or not STATE.candidate_path:
        return
    rule = _rule_for(event, args)
    if rule is None:
        return
    on_stack, immediate, nearest = origin(_caller(1))
    if not on_stack or _allowed(rule, event, args, immediate, nearest):
        return
    _violation(rule, f"{event} {_short_args(args)}")
    raise PermissionError(f"blocked by the evaluation sandbox: {event} ({rule})")


_FORBIDDEN_IMPORTS = {
    "ctypes",
    "cffi",
    "subprocess",
    "_posixsubprocess",
    "socket",
    "_socket",
    "ssl",
    "multiprocessing",
    "pty",
    "urllib",
    "http",
    "requests",
    "httpx",
    "asyncio",
}


def _inside_scratch(path: str) -> bool:
    if not STATE.scratch:
        return False
    try:
        real = os.path.realpath(path if os.path.isabs(path) else os.path.join(os.getcwd(), path))
    except (OSError, ValueError):
        return False
    return real == STATE.scratch or real.startswith(STATE.scratch.rstrip(os.sep) + os.sep)


def _short_args(args: tuple) -> str:
    try:
        return repr(args)[:120]
    except Exception:
        return "<args>"


# ---------------------------------------------------------------------------------------------
# Launch recorder
# ---------------------------------------------------------------------------------------------


def _tensor_args(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    out = []
    for a in list(args) + list(kwargs.values()):
        base = getattr(a, "base", a)  # triton TensorWrapper
        if isinstance(base, torch.Tensor):
            out.append(base)
    return out


def _storage_key(t: torch.Tensor) -> tuple[int, int]:
    s = t.untyped_storage()
    return (s.data_ptr(), s.nbytes())


def _bytes_of(t: torch.Tensor) -> torch.Tensor:
    """A uint8 view of the tensor's whole storage."""
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())


def _snapshot(tensors: list[torch.Tensor]) -> dict[int, torch.Tensor]:
    snaps = {}
    for t in tensors:
        ptr, nbytes = _storage_key(t)
        if ptr not in snaps and nbytes:
            snaps[ptr] = _bytes_of(t).clone()
    return snaps


def _changed(tensors: list[torch.Tensor], snaps: dict[int, torch.Tensor]) -> list[int]:
    out = []
    for t in tensors:
        ptr, _ = _storage_key(t)
        before = snaps.pop(ptr, None)
        if before is not None:
            now = _bytes_of(t)
            if not STATE.originals["torch.equal"](before, now):
                out.append(ptr)
    return out


def _wrap_run(cls: type, label: str) -> None:
    original = cls.run

    def run(self, *args, **kwargs):
        if kwargs.get("warmup"):
            return original(self, *args, **kwargs)
        STATE.launch_count += 1
        if STATE.light:
            STATE.in_launch += 1
            try:
                return original(self, *args, **kwargs)
            finally:
                STATE.in_launch -= 1
        name = getattr(getattr(self, "fn", None), "__name__", None) or getattr(
            self, "__name__", label
        )
        tensors = _tensor_args(args, kwargs)
        rec = Launch(name=str(name), args=[_storage_key(t) for t in tensors])
        if len(STATE.launches) < 100_000:
            STATE.launches.append(rec)
        snap = STATE.snapshot and STATE.snapshots < SNAPSHOT_LAUNCHES
        STATE.snapshots += 1 if snap else 0
        STATE.in_launch += 1
        marker = (
            STATE.originals["record_function"](f"tf::launch::{STATE.token}")
            if STATE.profiling
            else None
        )
        if marker is not None:
            marker.__enter__()
        try:
            snaps = _snapshot(tensors) if snap else None
            result = original(self, *args, **kwargs)
            if snaps is not None:
                if tensors and tensors[0].device.type == "cuda":
                    STATE.originals["cuda_sync"]()
                rec.changed = _changed(tensors, snaps)
            rec.ok = True
            return result
        finally:
            if marker is not None:
                marker.__exit__(None, None, None)
            STATE.in_launch -= 1

    run._tf_original = original  # type: ignore[attr-defined]
    cls.run = run
    STATE.watched.append((cls, "run", run))


def _install_launch_recorder() -> None:
    from triton.runtime import jit

    _wrap_run(jit.JITFunction, "jit")
    try:
        from triton.runtime import interpreter

        _wrap_run(interpreter.InterpretedFunction, "interpreted")
    except ImportError:
        pass


# ---------------------------------------------------------------------------------------------
# Tripwires
# ---------------------------------------------------------------------------------------------


def _tripwire(owner: Any, attr: str, rule: str, always: bool = False) -> None:
    """Replace owner.attr by a wrapper that records `rule` when the candidate calls it directly
    (during forward, or at any time when `always`; `always` also blocks the call)."""
    original = getattr(owner, attr)

    def wire(*args, **kwargs):
        if (STATE.active or always) and not STATE.in_launch and STATE.candidate_path:
            on_stack, immediate, _ = origin(_caller(1))
            if on_stack and (always or immediate == "candidate"):
                _violation(
                    rule, f"{getattr(owner, '__name__', owner)}.{attr} called by the candidate"
                )
                if always:
                    raise PermissionError(f"blocked by the evaluation sandbox: {attr} ({rule})")
        return original(*args, **kwargs)

    setattr(owner, attr, wire)
    STATE.watched.append((owner, attr, wire))


def _install_tripwires() -> None:
    for attr in ("numpy", "tolist", "item", "__array__"):
        _tripwire(torch.Tensor, attr, "host_read")
    for attr in ("tolist", "__getitem__", "__iter__"):
        if hasattr(torch.UntypedStorage, attr):
            _tripwire(torch.UntypedStorage, attr, "host_read")
    _tripwire(torch, "compile", "generated_code", always=True)
    _tripwire(torch.jit, "script", "generated_code", always=True)
    _tripwire(torch.jit, "trace", "generated_code", always=True)
    import torch._C._autograd as ag

    prefixes = (
        "_enable_profiler",
        "_disable_profiler",
        "_prepare_profiler",
        "_clear_callbacks",
        "_enable_record_function",
        "_kineto_step",
    )
    targets = {id(getattr(ag, n)) for n in dir(ag) if n.startswith(prefixes)}
    for mod in [
        m for name, m in list(sys.modules.items()) if name.startswith("torch") and m is not None
    ]:
        for attr, value in list(getattr(mod, "__dict__", {}).items()):
            if id(value) in targets and callable(value):
                _tripwire(mod, attr, "profiler_tamper", always=True)


# ---------------------------------------------------------------------------------------------
# Capture and tamper checks
# ---------------------------------------------------------------------------------------------


def _capture() -> None:
    o = STATE.originals
    o["torch.equal"] = torch.equal
    o["record_function"] = torch.autograd.profiler.record_function
    o["perf_counter_ns"] = time.perf_counter_ns
    o["cuda_sync"] = (
        torch._C._cuda_synchronize if hasattr(torch._C, "_cuda_synchronize") else (lambda: None)
    )
    import triton.testing

    for mod, attr in [
        (torch, "allclose"),
        (torch, "equal"),
        (torch, "isclose"),
        (torch.testing, "assert_close"),
        (time, "time"),
        (time, "perf_counter"),
        (time, "perf_counter_ns"),
        (time, "monotonic"),
        (time, "sleep"),
        (torch.cuda, "synchronize"),
        (torch.cuda, "Event"),
        (torch.cuda, "Stream"),
        (triton.testing, "do_bench"),
        (torch.autograd.profiler, "record_function"),
        (torch.profiler, "profile"),
    ]:
        STATE.watched.append((mod, attr, getattr(mod, attr)))
    for attr in ("record", "elapsed_time", "synchronize", "query", "wait"):
        if attr in torch.cuda.Event.__dict__:
            STATE.watched.append((torch.cuda.Event, attr, torch.cuda.Event.__dict__[attr]))


def tamper_check() -> None:
    """Record a violation for every watched function that is no longer the original."""
    for owner, attr, expected in STATE.watched:
        current = (
            owner.__dict__.get(attr) if isinstance(owner, type) else getattr(owner, attr, None)
        )
        if current is not expected:
            _violation("judge_tamper", f"{getattr(owner, '__name__', owner)}.{attr} was replaced")
    if sys.gettrace() is not None or sys.getprofile() is not None:
        _violation("judge_tamper", "a trace/profile function was installed")


_PRELOADED = False


def preload() -> None:
    """Install wrappers once in the fork server (inherited by every worker)."""
    global _PRELOADED
    if _PRELOADED:
        return
    _capture()
    _install_launch_recorder()
    _install_tripwires()
    _PRELOADED = True


def arm(candidate_path: str, scratch: str, allow_spawn_from: tuple[str, ...]) -> None:
    """In the worker, before importing the candidate: set paths and add the audit hook."""
    preload()
    STATE.candidate_path = candidate_path
    STATE.scratch = os.path.realpath(scratch)
    STATE.allow_spawn_from = allow_spawn_from
    sys.addaudithook(_hook)


# ---------------------------------------------------------------------------------------------
# Forward scope and analysis
# ---------------------------------------------------------------------------------------------


@dataclass
class ForwardRecord:
    launches: list[Launch]
    ops: dict[str, int]
    glue: dict[str, int]
    threads_started: int
    violations: list[str]
    custom_share: float | None = None
    share_basis: str | None = None


@contextmanager
def forward_scope(profile: bool, snapshot: bool, cuda: bool):
    """Run the candidate's forward under audit; fills the yielded dict with a ForwardRecord."""
    box: dict[str, Any] = {}
    STATE.launches = []
    STATE.snapshots = 0
    STATE.profiling = profile
    threads_before = {t.ident for t in threading.enumerate()}
    prof = None
    if profile:
        acts = [torch.profiler.ProfilerActivity.CPU]
        if cuda:
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        prof = torch.profiler.profile(activities=acts, record_shapes=False)
        prof.__enter__()
    marker = STATE.originals["record_function"](f"tf::forward::{STATE.token}")
    marker.__enter__()
    STATE.snapshot, STATE.active = snapshot, True
    try:
        yield box
    finally:
        STATE.active = STATE.snapshot = False
        marker.__exit__(None, None, None)
        STATE.profiling = False
        if cuda:
            STATE.originals["cuda_sync"]()
        ops: dict[str, int] = {}
        glue: dict[str, int] = {}
        share = basis = None
        if prof is not None:
            try:
                prof.__exit__(None, None, None)
                ops, glue, share, basis = _analyse(prof.events(), cuda)
            except Exception as exc:
                _violation(
                    "profiler_tamper", f"profiler results unavailable: {type(exc).__name__}: {exc}"
                )
        started = [
            t for t in threading.enumerate() if t.ident not in threads_before and t.is_alive()
        ]
        if started:
            _violation("background_thread", f"{len(started)} thread(s) still running after forward")
        box["record"] = ForwardRecord(
            list(STATE.launches), ops, glue, len(started), list(STATE.violations), share, basis
        )


def _analyse(events, cuda: bool) -> tuple[dict[str, int], dict[str, int], float | None, str | None]:
    fwd_name = f"tf::forward::{STATE.token}"
    launch_name = f"tf::launch::{STATE.token}"
    roots = [e for e in events if e.name == fwd_name]
    if len(roots) != 1:
        _violation(
            "profiler_tamper", f"expected one forward marker in the profile, found {len(roots)}"
        )
        return {}, {}, None, None
    ops: dict[str, int] = {}
    glue: dict[str, int] = {}
    custom_cpu = 0.0
    compute_cpu = 0.0
    stack = list(roots[0].cpu_children)
    while stack:
        ev = stack.pop()
        if ev.name == launch_name:
            custom_cpu += ev.cpu_time_total
            continue
        if ev.name.startswith("aten::"):
            kind = classify_op(ev.name)
            bucket = glue if kind == "glue" else ops
            bucket[ev.name] = bucket.get(ev.name, 0) + 1
            if kind != "glue":
                compute_cpu += ev.cpu_time_total
            continue  # an op's children are its implementation
        stack.extend(ev.cpu_children)
    share, basis = None, None
    if cuda:
        share, basis = _cuda_share(events, roots[0])
    if share is None and (custom_cpu + compute_cpu) > 0:
        share, basis = custom_cpu / (custom_cpu + compute_cpu), "cpu_time"
    return ops, glue, share, basis


def _cuda_share(events, root) -> tuple[float | None, str | None]:
    """Share of device time in kernels launched by our recorder (Triton) vs. everything else."""
    names = {launch.name for launch in STATE.launches}
    custom = other = 0.0
    for ev in events:
        dt = getattr(ev, "device_time_total", 0.0) or 0.0
        if (
            getattr(ev, "device_type", None) is None
            or str(ev.device_type).endswith("CPU")
            or dt <= 0
        ):
            continue
        if any(n and n in ev.name for n in names):
            custom += dt
        else:
            other += dt
    if custom + other <= 0:
        return None, None
    return custom / (custom + other), "cuda_time"
