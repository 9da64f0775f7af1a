"""In-sandbox audit: what the candidate's forward really ran, and what it tried to touch.

Runs inside the worker process, installed before the candidate is imported:

- launch recorder (audit_launch.py): every Triton launch logged, the buffers it changed found by
  before/after snapshots and credited to output provenance (lineage.py);
- dispatcher audit: a RecordFunction-level profiler (which `_DisableTorchDispatch` and dispatch
  modes cannot hide) records every aten op during forward; ops inside our launches (the
  interpreter's own copies) are excluded by a secret marker, except compute ops, which mean
  Python ran PyTorch inside a "kernel" (possible only under the CPU interpreter); the
  profiler's control functions are replaced by tripwires so the candidate cannot stop it;
- tripwires on host-escape methods (`Tensor.numpy/tolist/item/__dlpack__`, storage reads,
  `torch.save`) during forward, and on process control (`os._exit`, `os.abort`,
  `signal.raise_signal`) at any time;
- the PEP 578 audit hook and the import guard (audit_hook.py);
- tamper checks on the functions the evaluator relies on (timers, synchronize, events,
  allclose/equal, do_bench, the recorder itself);
- the forward scope: profiler, lineage dispatch mode and markers around one audited call, and
  the analysis of the profile into compute ops, glue ops and the custom-kernel share.

Does not cover: the static source rules (judge/checks.py), isolation (isolation.py), or judging (judge/).
This layer lives in the candidate's own process; docs/security.md says what that implies.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch

from tritonforge.evaluation.sandbox import audit_hook, audit_launch, lineage
from tritonforge.evaluation.sandbox.audit_state import STATE, AuditState, Launch
from tritonforge.evaluation.sandbox.audit_state import violation as _violation
from tritonforge.evaluation.sandbox.glue import classify_op

__all__ = ["STATE", "AuditState", "ForwardRecord", "Launch", "arm", "forward_scope", "preload"]

# the caching check's helpers, used by the worker through this module
poison = audit_launch.poison
stale = audit_launch.stale

# ---------------------------------------------------------------------------------------------
# Tripwires
# ---------------------------------------------------------------------------------------------


def _tripwire(owner: Any, attr: str, rule: str, always: bool = False) -> None:
    """Replace owner.attr by a wrapper that records `rule` when the candidate calls it directly
    (during forward), or at any time with the candidate on the stack when `always` (which also
    blocks the call)."""
    original = getattr(owner, attr)
    seen = [False]  # recording-only wires stop checking after their first hit (hot paths)

    what = f"{getattr(owner, '__name__', owner)}.{attr} called by the candidate"

    def wire(*args, **kwargs):
        if STATE.candidate_path and not STATE.in_launch:
            if always:
                if audit_hook.origin(audit_hook.caller_frame(1)).on_stack:
                    _violation(rule, what)
                    raise PermissionError(f"blocked by the evaluation sandbox: {attr} ({rule})")
            elif STATE.active and not seen[0]:
                if audit_hook.immediate_kind(audit_hook.caller_frame(1)) == "candidate":
                    _violation(rule, what)
                    if STATE.strict:  # hybrid tolerates host reads; strict stops them here
                        raise PermissionError(f"blocked in strict mode: {attr} ({rule})")
                    seen[0] = True
        return original(*args, **kwargs)

    setattr(owner, attr, wire)
    STATE.watched.append((owner, attr, wire))


def _install_tripwires() -> None:
    for attr in ("numpy", "tolist", "item", "__array__"):
        _tripwire(torch.Tensor, attr, "host_read")
    _tripwire(torch.Tensor, "__dlpack__", "host_read")  # numpy.from_dlpack(x): a host view
    storage_reads = ("tolist", "__getitem__", "__iter__", "_write_file", "_share_fd_cpu_")
    for attr in (*storage_reads, "_share_filename_cpu_"):
        if hasattr(torch.UntypedStorage, attr):
            _tripwire(torch.UntypedStorage, attr, "host_read")
    for owner, attr in ((torch, "save"), (torch, "to_dlpack"), (torch.utils.dlpack, "to_dlpack")):
        if hasattr(owner, attr):
            _tripwire(owner, attr, "host_read")
    _tripwire(torch, "compile", "generated_code", always=True)
    _tripwire(torch.jit, "script", "generated_code", always=True)
    _tripwire(torch.jit, "trace", "generated_code", always=True)
    for owner, attr in ((os, "_exit"), (os, "abort"), (signal, "raise_signal")):
        _tripwire(owner, attr, "process_control", always=True)
    import torch._C._autograd as ag

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
    import torch.autograd.profiler as ap

    targets |= {id(getattr(ap, n)) for n in dir(ap) if n.startswith(prefixes)}
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
        (torch.autograd.profiler, "profile"),
        (torch.profiler, "profile"),
        (lineage.Lineage, "__torch_dispatch__"),
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
    audit_launch.install()
    _install_tripwires()
    with lineage.Lineage():  # the first dispatch mode in a process costs ~2 s of lazy imports
        torch.zeros(2).clone()
    _PRELOADED = True


def arm(
    candidate_path: str, scratch: str, allow_spawn_from: tuple[str, ...], strict: bool = True
) -> None:
    """In the worker, before importing the candidate: set paths and add the audit hook."""
    preload()
    STATE.strict = strict
    STATE.candidate_path = candidate_path
    STATE.scratch = os.path.realpath(scratch)
    STATE.allow_spawn_from = allow_spawn_from
    sys.addaudithook(audit_hook.hook)


def guard_module(module_dict: dict[str, Any]) -> None:
    """Before the candidate's module executes: its own guarded `__import__`."""
    audit_hook.guard_module(module_dict)


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
    lineage: bool = False  # output provenance was tracked (lineage.provenance is meaningful)
    compute_log: list[tuple[str, bool, int]] | None = None  # see audit_state.AuditState


@contextmanager
def forward_scope(profile: bool, snapshot: bool, cuda: bool, cuda_activity: bool = False):
    """Run the candidate's forward under audit; fills the yielded dict with a ForwardRecord."""
    box: dict[str, Any] = {}
    STATE.launches = []
    STATE.snapshots = 0
    STATE.derived = {}
    STATE.compute_log = []
    STATE.profiling = profile
    threads_before = {t.ident for t in threading.enumerate()}
    prof = None
    if profile and cuda_activity:  # Kineto + CUPTI: device time per kernel (hybrid share)
        acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        prof = torch.profiler.profile(activities=acts, record_shapes=False)
        prof.__enter__()
    elif profile:  # the legacy RecordFunction profiler: same op coverage, ~20 ms cold vs ~2 s
        prof = torch.autograd.profiler.profile(use_kineto=False)
        prof.__enter__()
    marker = STATE.originals["record_function"](f"tf::forward::{STATE.token}")
    marker.__enter__()
    mode = lineage.Lineage() if snapshot else nullcontext()
    mode.__enter__()
    STATE.snapshot, STATE.active = snapshot, True
    try:
        yield box
    finally:
        STATE.active = STATE.snapshot = False
        try:
            mode.__exit__(None, None, None)
        except Exception as exc:  # the candidate popped our mode off the stack
            _violation("profiler_tamper", f"dispatch mode stack changed: {type(exc).__name__}")
        marker.__exit__(None, None, None)
        STATE.profiling = False
        if cuda:
            STATE.originals["cuda_sync"]()
        box["record"] = _finish(prof, cuda_activity, threads_before, snapshot)


def _finish(prof: Any, cuda_activity: bool, threads_before: set, tracked: bool) -> ForwardRecord:
    ops: dict[str, int] = {}
    glue: dict[str, int] = {}
    share = basis = None
    if prof is not None:
        try:
            prof.__exit__(None, None, None)
            events = prof.events() if cuda_activity else prof.function_events
            ops, glue, share, basis = _analyse(events, cuda_activity)
        except Exception as exc:
            _violation(
                "profiler_tamper", f"profiler results unavailable: {type(exc).__name__}: {exc}"
            )
    started = [t for t in threading.enumerate() if t.ident not in threads_before and t.is_alive()]
    if started:
        _violation("background_thread", f"{len(started)} thread(s) still running after forward")
    return ForwardRecord(
        list(STATE.launches),
        ops,
        glue,
        len(started),
        list(STATE.violations),
        share,
        basis,
        tracked,
        list(STATE.compute_log),
    )


def _in_launch_compute(launch_event) -> list[str]:
    """Compute ops executed under one of our launch markers: PyTorch run from a kernel body."""
    found, stack = [], list(launch_event.cpu_children)
    while stack:
        ev = stack.pop()
        if ev.name.startswith("aten::"):
            if classify_op(ev.name) != "glue":
                found.append(ev.name)
            continue
        stack.extend(ev.cpu_children)
    return found


def _analyse(events, cuda: bool) -> tuple[dict[str, int], dict[str, int], float | None, str | None]:
    fwd_name = f"tf::forward::{STATE.token}"
    launch_name = f"tf::launch::{STATE.token}"
    own_name = f"tf::audit::{STATE.token}"
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
        if ev.name == own_name:
            continue
        if ev.name == launch_name:
            custom_cpu += ev.cpu_time_total
            inside = _in_launch_compute(ev)
            if inside:
                _violation("python_in_kernel", f"PyTorch ops inside a kernel launch: {inside[:4]}")
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


# ---------------------------------------------------------------------------------------------
# Output facts
# ---------------------------------------------------------------------------------------------


def provenance(outputs: list[torch.Tensor], record: ForwardRecord) -> list[dict[str, Any]]:
    """Per output: launched on, written by a kernel (see lineage.py)."""
    return lineage.provenance(outputs, record.lineage)
