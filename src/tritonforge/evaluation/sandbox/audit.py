"""In-sandbox audit: what the candidate's forward really ran, and what it tried to touch.

Runs inside the worker process; installed in the fork server, armed before the candidate is
imported, sealed (sealed.py) before its first line runs:

- the audit hook (audit_hook.py) with every stub (stubs.py) it serves: the only audit code the
  candidate can reach is the stubs, and a stub holds neither state nor an original function;
- launch recorder (audit_launch.py): every Triton launch logged with its signature, the buffers
  it changed credited to output provenance (lineage.py), the launch marked in the profile;
- dispatcher audit: a RecordFunction-level profiler (which `_DisableTorchDispatch` and dispatch
  modes cannot hide) records every aten op during forward; our own work carries a marker named
  with a secret token fresh for every forward (audit_profile.py reads the profile); the
  profiler's control functions are tripwires;
- tripwires on host-escape methods (`Tensor.numpy/tolist/item/__dlpack__`, storage reads,
  `torch.save`, and `data_ptr` on the CPU, where an address is a host view) during forward, on
  process control, `torch.compile`, thread starts and `mkfifo`/`mknod` at any time;
- tamper checks on the functions the evaluator relies on (timers, synchronize, events,
  allclose/equal, do_bench), on every stub (still installed, closure unchanged) and on the mode
  stacks (a TorchFunctionMode left active would run after the audit).
Does not cover: the static source rules (judge/checks.py), isolation (isolation.py, seccomp.py),
or judging (judge/). docs/security.md says what living in the candidate's process implies.
"""

from __future__ import annotations

import builtins
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from tritonforge.evaluation.sandbox import (
    audit_launch,
    audit_memory,
    audit_profile,
    lineage,
    sealed,
    stubs,
)
from tritonforge.evaluation.sandbox.audit_hook import Hook, Trip
from tritonforge.evaluation.sandbox.audit_state import STATE, Armed, AuditState, Launch
from tritonforge.evaluation.sandbox.audit_state import violation as _violation
from tritonforge.evaluation.sandbox.glue import glue_digest

__all__ = ["STATE", "AuditState", "ForwardRecord", "Launch", "arm", "forward_scope", "preload"]

# the caching check's helpers, used by the worker through this module
poison = audit_launch.poison
stale = audit_launch.stale
violation = _violation

_HOOK: Hook | None = None  # dropped once armed: nothing reachable refers to the hook
_SYS_AUDIT = sys.audit
_STUB_FACTORIES = {
    k: stubs.__dict__[k]
    for k in (
        "tripwire",
        "launch_entry",
        "launcher_entry",
        "runner_entry",
        "bench_entry",
        "os_open",
        "guarded_import",
        "load_entry",
        "Lineage",
    )
}
_len_tf_stack = torch._C._len_torch_function_stack
_pop_tf_stack = torch._C._pop_torch_function_stack
_len_dispatch_stack = torch._C._len_torch_dispatch_stack

# ---------------------------------------------------------------------------------------------
# Tripwires
# ---------------------------------------------------------------------------------------------


def _tripwire(owner: Any, attr: str, rule: str, always: bool = False) -> None:
    """Stand a stub in for owner.attr; the hook records `rule` when the candidate calls it
    directly (during forward), or at any time with the candidate on the stack when `always`
    (which also blocks the call)."""
    what = f"{getattr(owner, '__name__', owner)}.{attr} called by the candidate"
    key = _HOOK.add_trip(Trip(getattr(owner, attr), rule, what, always))
    _install(owner, attr, stubs.tripwire(key))


def _install(owner: Any, attr: str, stub: Any) -> None:
    setattr(owner, attr, stub)
    STATE.watched.append((owner, attr, stub))
    cells = tuple(c.cell_contents for c in (stub.__closure__ or ()))
    STATE.cells.append((stub, cells, stub.__code__, stub.__defaults__))


def _profiler_controls() -> list[tuple[Any, str]]:
    import torch._C._autograd as ag
    import torch.autograd.profiler as ap

    prefixes = (
        "_enable_profiler",
        "_disable_profiler",
        "_prepare_profiler",
        "_clear_callbacks",
        "_enable_record_function",
        "_kineto_step",
        "_set_is_profiler_enabled",
    )
    targets = {id(getattr(ag, n)) for n in dir(ag) if n.startswith(prefixes)}
    targets |= {id(getattr(ap, n)) for n in dir(ap) if n.startswith(prefixes)}
    found = []
    for mod in [m for n, m in list(sys.modules.items()) if n.startswith("torch") and m]:
        for attr, value in list(getattr(mod, "__dict__", {}).items()):
            if id(value) in targets and callable(value):
                found.append((mod, attr))
    return found


def _install_tripwires(cpu: bool) -> None:
    for attr in ("numpy", "tolist", "item", "__array__", "__dlpack__"):
        _tripwire(torch.Tensor, attr, "host_read")
    if cpu:  # on the CPU an address is a host view (numpy's array interface, foreign buffers)
        _tripwire(torch.Tensor, "data_ptr", "host_read")
        _tripwire(torch.UntypedStorage, "data_ptr", "host_read")
    storage_reads = ("tolist", "__getitem__", "__iter__", "_write_file", "_share_fd_cpu_")
    for attr in (*storage_reads, "_share_filename_cpu_"):
        if hasattr(torch.UntypedStorage, attr):
            _tripwire(torch.UntypedStorage, attr, "host_read")
    for owner, attr in ((torch, "save"), (torch, "to_dlpack"), (torch.utils.dlpack, "to_dlpack")):
        if hasattr(owner, attr):
            _tripwire(owner, attr, "host_read")
    for owner, attr in ((torch, "compile"), (torch.jit, "script"), (torch.jit, "trace")):
        _tripwire(owner, attr, "generated_code", always=True)
    for owner, attr in ((os, "_exit"), (os, "abort"), (signal, "raise_signal")):
        _tripwire(owner, attr, "process_control", always=True)
    for owner, attr in ((os, "mkfifo"), (os, "mknod")):  # refused by seccomp; named here
        if hasattr(owner, attr):
            _tripwire(owner, attr, "filesystem", always=True)
    import _thread

    for owner, attr in ((_thread, "start_new_thread"), (threading, "_start_new_thread")):
        if hasattr(owner, attr):  # Python 3.11 raises no audit event for a new thread
            _tripwire(owner, attr, "background_thread", always=True)
    for owner, attr in _profiler_controls():
        _tripwire(owner, attr, "profiler_tamper", always=True)
    _install(os, "open", stubs.os_open(0))
    _signal_handlers()
    _module_loads()
    _fresh_allocations()


def _signal_handlers() -> None:
    """Installing a signal handler (Python has no audit event for it) with the candidate on the
    stack: a handler runs its code at any moment, also inside a launch window. Every binding of
    the functions in a loaded module is replaced (`from signal import signal` included)."""
    import _signal

    for attr in ("signal", "setitimer", "set_wakeup_fd", "siginterrupt"):
        original = getattr(_signal, attr, None)
        if original is None:
            continue
        owners = [m for m in list(sys.modules.values()) if _binds(m, attr, original)]
        what = f"signal.{attr} called by the candidate"
        key = _HOOK.add_trip(Trip(original, "signal_handler", what, True, in_launch=True))
        for owner in owners:
            _install(owner, attr, stubs.tripwire(key))


def _binds(module: Any, attr: str, value: Any) -> bool:
    ns = getattr(module, "__dict__", None)
    return isinstance(ns, dict) and ns.get(attr) is value


def _module_loads() -> None:
    """Every new module load passes the import allowlist (import_guard.py)."""
    import _frozen_importlib as bootstrap

    original = bootstrap._find_and_load
    key = _HOOK.add_trip(Trip(original, "", "module loads", False))
    _install(bootstrap, "_find_and_load", stubs.load_entry(key))


def _allocates_fresh(original: Any) -> Any:
    """`original` (an allocation helper below the dispatcher), its buffer counted as allocated
    uninitialised in the call (STATE.fresh), as lineage counts torch.empty's."""

    def alloc(*args: Any, **kwargs: Any) -> Any:
        t = original(*args, **kwargs)
        if STATE.active and not STATE.in_launch and type(t) is torch.Tensor:
            with sealed.guard():
                STATE.fresh.add(audit_launch.storage_key(t)[0])
        return t

    return alloc


def _fresh_allocations() -> None:
    """Inductor's buffer helpers (`_empty_strided_cuda`, which KernelBook output calls for
    every buffer) allocate below the dispatcher, where lineage does not see them: their buffers
    are poisoned before a kernel's snapshot like torch.empty's (otherwise a buffer an autotuner
    benchmark already wrote, or a repeated call's recycled block, looks unchanged by the
    kernel that writes it). A tripwire that never trips: calling them is allowed."""
    guards = getattr(getattr(torch._C, "_dynamo", None), "guards", None)
    for name in ("_empty_strided_cuda", "_empty_strided_cpu"):
        original = getattr(guards, name, None)
        if original is not None:
            key = _HOOK.add_trip(Trip(_allocates_fresh(original), "", name, False))
            _install(guards, name, stubs.tripwire(key))


# ---------------------------------------------------------------------------------------------
# Capture and tamper checks
# ---------------------------------------------------------------------------------------------


def _capture() -> None:
    o = STATE.originals
    o["perf_counter_ns"] = time.perf_counter_ns
    sync = getattr(torch._C, "_cuda_synchronize", None)
    o["cuda_sync"] = sync if sync is not None else (lambda: None)
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
        # what torch.cuda.Event.record/wait look up at call time (timing_loop no longer does)
        (torch.cuda, "current_stream"),
        (torch.cuda, "default_stream"),
        (torch.cuda, "_lazy_init"),
        (torch.cuda, "_get_device_index"),
        (torch.cuda, "is_initialized"),
        (triton.testing, "do_bench"),
        (torch.autograd.profiler, "record_function"),
        (torch.autograd.profiler, "profile"),
        (torch.profiler, "profile"),
    ]:
        STATE.watched.append((mod, attr, getattr(mod, attr)))
    for attr in ("record", "elapsed_time", "synchronize", "query", "wait"):
        if attr in torch.cuda.Event.__dict__:
            STATE.watched.append((torch.cuda.Event, attr, torch.cuda.Event.__dict__[attr]))


def tamper_check() -> None:
    """Record a violation for every watched function that is no longer the original, every stub
    whose closure, code or defaults changed, and an installed trace/profile function."""
    for owner, attr, expected in STATE.watched:
        current = (
            owner.__dict__.get(attr) if isinstance(owner, type) else getattr(owner, attr, None)
        )
        if current is not expected:
            _violation("judge_tamper", f"{getattr(owner, '__name__', owner)}.{attr} was replaced")
    for stub, cells, code, defaults in STATE.cells:
        now = tuple(c.cell_contents for c in (stub.__closure__ or ()))
        if now != cells or stub.__code__ is not code or stub.__defaults__ is not defaults:
            _violation("judge_tamper", f"the evaluator's stub {stub.__name__} was rewritten")
    namespace = stubs.__dict__
    if namespace.get("_audit") is not _SYS_AUDIT or any(
        namespace.get(k) is not v for k, v in _STUB_FACTORIES.items()
    ):
        _violation("judge_tamper", "the evaluator's stubs were rebound")
    for cls, snapshot in STATE.classes:
        changed = _patched(cls, snapshot)
        if changed:
            _violation("judge_tamper", f"{cls.__name__} was patched ({', '.join(changed[:4])})")
    if sys.gettrace() is not None or sys.getprofile() is not None:
        _violation("judge_tamper", "a trace/profile function was installed")


_MISSING = object()


def _patched(cls: type, snapshot: dict[str, Any]) -> list[str]:
    """Names of `cls` changed since its snapshot: an attribute replaced or removed, or a new one
    that is a dunder or shadows a base class's (`T.detach = f` over the C `TensorBase.detach`).
    A new plain name that no base has changes nothing the evaluator calls: transformers adds
    `nn.Module.smart_apply` the first time it initialises a model's weights (a level-4 candidate
    builds its Hugging Face model in `__init__`)."""
    now = cls.__dict__
    inherited = {n for base in cls.__mro__[1:] for n in vars(base)}
    changed = [k for k, v in snapshot.items() if now.get(k, _MISSING) is not v]
    changed += [k for k in now if k not in snapshot and (k.startswith("__") or k in inherited)]
    return sorted(changed)


def integrity() -> dict[str, Any]:
    """What the judge compares with the load reply and its own copies (decide.check_integrity)."""
    return {"armed": STATE.armed.fingerprint() if STATE.armed else "", "glue": glue_digest()}


_PRELOADED = False


def preload(cpu: bool) -> None:
    """Install the hook, the stubs and the wrappers once in the fork server (inherited by every
    worker)."""
    global _PRELOADED, _HOOK
    if _PRELOADED:
        return
    _HOOK = Hook(stubs.STUB_CODES)
    _HOOK.handlers["tritonforge.dispatch"] = lineage.on_dispatch
    sys.addaudithook(_HOOK)
    _capture()
    audit_launch.install(_HOOK)
    if cpu:
        audit_memory.install(_HOOK)
    _install_tripwires(cpu)
    with stubs.Lineage():  # the first dispatch mode in a process costs ~2 s of lazy imports
        torch.zeros(2).clone()
    # classes whose methods the evaluator calls on the candidate's objects: any patch (also a
    # new attribute shadowing a C method, e.g. `T = torch.Tensor; T.detach = f`) is tampering
    # (`_patched`: a new plain name no base class has is not)
    for cls in (torch.Tensor, torch.UntypedStorage, torch.nn.Module):
        STATE.classes.append((cls, dict(cls.__dict__)))
    _PRELOADED = True


def arm(
    candidate_path: str,
    scratch: str,
    allow_spawn_from: tuple[str, ...],
    strict: bool = True,
    backend: str = "triton",
) -> None:
    """In the worker, before importing the candidate: arm the hook once, then drop it."""
    global _HOOK
    real = os.path.realpath(scratch)
    armed = Armed(candidate_path, real, tuple(allow_spawn_from), strict, backend)
    _HOOK.arm(armed)
    STATE.armed = armed
    _HOOK = None


def guard_module(module_dict: dict[str, Any]) -> None:
    """Before the candidate's module executes: its own guarded `__import__`."""
    own = dict(builtins.__dict__)
    own["__import__"] = stubs.guarded_import(0)
    module_dict["__builtins__"] = own


# ---------------------------------------------------------------------------------------------
# Forward scope
# ---------------------------------------------------------------------------------------------


@dataclass
class ForwardRecord:
    launches: list[Launch]
    ops: dict[str, int]
    glue: dict[str, int]
    threads_started: int
    violations: list[str]
    shapes: list[list[Any]] | None = None  # compute ops with input shapes (hybrid work share)
    lineage: bool = False  # output provenance was tracked (lineage.provenance is meaningful)
    signature: list[str] | None = None  # filled by the worker once the outputs are known
    compute_log: list[tuple[str, bool, int]] | None = None  # see audit_state.AuditState


def begin_call(input_ptrs: dict[int, int]) -> None:
    """Start one forward call (audited or light): fresh launch records, signature and compute
    log."""
    STATE.launches = []
    STATE.raw = []
    STATE.snapshots = 0
    STATE.derived = {}
    STATE.fresh = set()
    STATE.compute_log = []
    STATE.input_ptrs = input_ptrs


def call_signature(output_ptrs: list[int]) -> list[str]:
    return audit_launch.signature(STATE.raw, STATE.input_ptrs, output_ptrs)


@contextmanager
def light_scope():
    """An unprofiled call (caching check's first call, timed calls): launches counted and
    their signature recorded, tripwires armed."""
    STATE.active = STATE.light = True
    try:
        yield
    finally:
        STATE.active = STATE.light = False


@contextmanager
def forward_scope(profile: bool, snapshot: bool, cuda: bool, shapes: bool = False):
    """Run the candidate's forward under audit; fills the yielded dict with a ForwardRecord.
    Whatever the body does after forward returns (copying the outputs out) is audited too."""
    box: dict[str, Any] = {}
    token = sealed.new_token()
    STATE.profiling = profile
    threads_before = {t.ident for t in threading.enumerate()}
    tf_depth, dispatch_depth = _len_tf_stack(), _len_dispatch_stack()
    prof = None
    if profile:  # the legacy RecordFunction profiler: all aten ops, ~20 ms cold (Kineto ~2 s)
        prof = torch.autograd.profiler.profile(use_kineto=False, record_shapes=shapes)
        prof.__enter__()
    marker = sealed.marker("forward")
    mode = stubs.Lineage() if snapshot else None
    if mode is not None:
        mode.__enter__()
    STATE.snapshot, STATE.active = snapshot, True
    try:
        yield box
    finally:
        STATE.active = STATE.snapshot = False
        _close_modes(mode, tf_depth, dispatch_depth)
        sealed.marker_exit(marker)
        STATE.profiling = False
        if cuda:
            STATE.originals["cuda_sync"]()
        box["record"] = _finish(prof, token, threads_before, snapshot)


def _close_modes(mode: Any, tf_depth: int, dispatch_depth: int) -> None:
    if _len_tf_stack() > tf_depth:
        _violation("judge_tamper", "forward left a TorchFunctionMode active (it would run later)")
        while _len_tf_stack() > tf_depth:
            _pop_tf_stack()
    if mode is not None:
        try:
            mode.__exit__(None, None, None)
        except Exception as exc:  # the candidate popped our mode off the stack
            _violation("profiler_tamper", f"dispatch mode stack changed: {type(exc).__name__}")
    if _len_dispatch_stack() > dispatch_depth:
        _violation("judge_tamper", "forward left a dispatch mode active (it would run later)")


def _finish(prof: Any, token: str, threads_before: set, tracked: bool) -> ForwardRecord:
    p = audit_profile.Profile(roots=1)
    if prof is not None:
        try:
            prof.__exit__(None, None, None)
            p = audit_profile.analyse(prof.function_events, token)
        except Exception as exc:
            _violation("profiler_tamper", f"profiler results unavailable: {type(exc).__name__}")
        if p.roots != 1:
            _violation(
                "profiler_tamper", f"expected one forward marker in the profile, found {p.roots}"
            )
        if p.in_launch:
            _violation("python_in_kernel", f"PyTorch ops inside a kernel launch: {p.in_launch[:4]}")
    started = [t for t in threading.enumerate() if t.ident not in threads_before and t.is_alive()]
    if started:
        _violation("background_thread", f"{len(started)} thread(s) still running after forward")
    return ForwardRecord(
        list(STATE.launches),
        p.ops,
        p.glue,
        len(started),
        list(STATE.violations),
        p.shapes,
        tracked,
        compute_log=list(STATE.compute_log),
    )


def provenance(outputs: list[torch.Tensor], record: ForwardRecord) -> list[dict[str, Any]]:
    """Per output: launched on, written by a kernel (see lineage.py)."""
    with sealed.guard():
        return lineage.provenance(outputs, record.lineage)
