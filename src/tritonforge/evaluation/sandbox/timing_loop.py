"""The `time` op of a worker: the same code times candidates and references.

Covers: `time_op` (the op: which model, which inputs, the audit around each call, the reply),
`timing_inputs` (timing_inputs.py: the device copy of a timing case, made once per case and
model), and
`run_trials` (warmup, then per trial: L2 flush (persisting L2 lines reset first: l2_persist.py),
device-wide synchronize, the call between
two CUDA events and host timer reads, device-wide synchronize) under a clock of CLOCKS:
- `cuda_events` (default): the call is queued behind a *lead*, a device-side sleep on the current
  stream that every pool stream of the process (and the default stream) waits for, so the host's
  launch work (Python, Triton's launcher, our audit) overlaps the lead and the events see device
  time only. The lead (`Lead`) starts from the warmup calls' host enqueue time, then follows the
  trials' own (LEAD_FIT x their recent median: the device sits idle for whatever of the lead the
  host did not need, in every trial), and is doubled after a trial whose enqueue outlasted it
  (`exposed` trials: the call is host-bound, and its launch gaps count). A call whose enqueue
  grows with its lead waits for the device (a synchronize, a read of a device value): a lead
  cannot hide its gaps, so it gets the shortest. The sleep is in device clock cycles: the cycles
  per millisecond follow the highest rate the recent leads showed (the clock rises under load
  after the first calibration). The
  device time is floored by the host time after the lead ended, less this process's fixed
  latency (`host_overhead_ms`, calibrated once on an empty call), so work left on another stream
  still counts.
- `cuda_events_idle`: the same events around an idle stream (no lead): the device time then
  includes the host's launch latency of the call's first kernel, which varies between processes
  and with CPU load (the earlier default, kept for comparison).
- `host`: the host time around the device-wide synchronize (the only clock on the CPU).
Event, stream, sleep and timer functions, and the flush's `zero_`, are captured when this module
is imported, in the fork server, before any candidate code exists (the flush runs with torch
functions and Python dispatch disabled: sealed.guard). Events are recorded on a stream got from
C (`_here`), never through `torch.cuda.Event.record`'s own lookup of `torch.cuda.current_stream`
(module globals a candidate can rebind: it would run its own code between the lead and the
start event, where its device work counts as lead and is subtracted from the host time).
Python's cyclic garbage collector is off during calibration and trials (`_no_gc`): a
candidate's finalizer (`__del__` of a reference cycle) would otherwise run inside the loop, in
the lead or between trials, outside the timed call.
Every call, warmup or timed, on either side, is a light audited call (audit.begin_call, launches
counted and recorded outside the timer): for a candidate, each timed call's outputs must be
plain tensors and its launch signature goes back to the judge (`launch_mismatch` when it differs
from the profiled calls'); a reference's calls pass through the same steps, so both sides pay
the same per-call cost.
Runs in the worker (sandbox side). Does not cover: which inputs or model (worker.py), the
interleaving schedule and statistics (judge/gpu_timing.py, judge/timing.py).
"""

from __future__ import annotations

import gc
import os
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from tritonforge.evaluation.sandbox import audit, l2_persist, outputs, reference_host, sealed
from tritonforge.evaluation.sandbox.devshare import DevShareError
from tritonforge.evaluation.sandbox.protocol import CLOCKS, TRIAL_PARTS
from tritonforge.evaluation.sandbox.timing_inputs import timing_inputs
from tritonforge.types import Status

L2_FLUSH_BYTES = 256 * 1024 * 1024
CALIBRATION_TRIALS = 25
LEAD_MIN_MS = 0.05  # the shortest lead; also the lead of the empty calibration call
LEAD_MAX_MS = 10.0  # a call whose host work outlasts this is host-bound: its gaps count
LEAD_FACTOR = 3.0  # first lead = factor x the warmup calls' host enqueue time (+ the waits' own)
LEAD_FIT = (
    2.0  # later leads = factor x the recent median of the trials' enqueue (which has the waits)
)
LEAD_PAD_MS = 0.05  # ... plus this
LEAD_RECENT = 8  # trials (and lead rates) that the next lead is sized from
LEADS_KEPT = 4096  # per-key last leads a process keeps (`Lead`)
LEAD_RATE_MIN_MS = 0.2  # shorter leads do not update the sleep's rate (`_observed_rate`)
SLEEP_CALIBRATION_CYCLES = 2_000_000
MAX_POOL = 256  # bound on the streams of one priority's pool (c10 has 32)


_EVENT = torch.cuda.Event
_RESET_L2 = l2_persist.reset_persisting_l2
_ELAPSED = torch.cuda.Event.elapsed_time
# C functions only (CUDA builds; None on the CPU): nothing in them looks up a Python global
_EVENT_RECORD = getattr(torch._C._CudaEventBase, "record", None)  # (event, stream)
_EVENT_WAIT = getattr(torch._C._CudaEventBase, "wait", None)  # (event, stream)
_SLEEP = getattr(torch._C, "_cuda_sleep", None)
_CURRENT = getattr(torch._C, "_cuda_getCurrentStream", None)  # device -> (id, device, type)
_DEFAULT = getattr(torch._C, "_cuda_getDefaultStream", None)
_DEVICE = getattr(torch._C, "_cuda_getDevice", None)
_STREAM_BASE = torch._C._CudaStreamBase
_STREAM = torch.cuda.Stream
_GC_OFF, _GC_ON, _GC_ENABLED = gc.disable, gc.enable, gc.isenabled
_NO_GRAD = torch.no_grad
_PERF_NS = time.perf_counter_ns
_ZERO = sealed.CAP.zero_
_OVERHEAD: dict[bool, float] = {}
_CAL: dict[str, Any] = {}


def _nothing(*args: Any) -> None:
    return None


def _stream_of(ids: tuple[int, int, int]) -> Any:
    return _STREAM_BASE(stream_id=ids[0], device_index=ids[1], device_type=ids[2])


def _here() -> Any:
    """The current stream of the current device, from C."""
    return _stream_of(_CURRENT(_DEVICE()))


def _RECORD(event: Any) -> None:
    """Record `event` on the current stream (see the module docstring: no Python lookups)."""
    _EVENT_RECORD(event, _here())


@contextmanager
def _no_gc() -> Iterator[None]:
    """Cyclic GC off (and off again before every trial: `_one`), restored afterwards."""
    was = _GC_ENABLED()
    _GC_OFF()
    try:
        yield
    finally:
        if was:
            _GC_ON()


def host_overhead_ms(sync: Callable[[], None], lead: bool) -> float:
    """Median host-minus-device time of an empty timed region in this process (the latency of
    recording the events and synchronizing, with or without the lead), measured once."""
    if lead not in _OVERHEAD:
        gaps = []
        for _ in range(CALIBRATION_TRIALS):
            t = _one(_nothing, [], None, sync, True, LEAD_MIN_MS if lead else 0.0, _NO_AROUND)
            gaps.append(max(0.0, t.host - t.dev))
        _OVERHEAD[lead] = statistics.median(gaps)
    return _OVERHEAD[lead]


def _cycles_per_ms(sync: Callable[[], None]) -> float:
    """Device clock cycles of the sleep kernel per millisecond, measured once."""
    if "cycles" not in _CAL:
        rates = []
        for _ in range(3):
            a, b = _EVENT(enable_timing=True), _EVENT(enable_timing=True)
            sync()
            _RECORD(a)
            _SLEEP(SLEEP_CALIBRATION_CYCLES)
            _RECORD(b)
            sync()
            rates.append(SLEEP_CALIBRATION_CYCLES / max(_ELAPSED(a, b), 1e-3))
        _CAL["cycles"] = statistics.median(rates)
    return float(_CAL["cycles"])


def _streams() -> list[Any]:
    """Every stream of this process's pools (each priority) and the default stream: the ones
    that wait for the lead. Found once, by drawing from each pool until it comes round."""
    if "streams" not in _CAL:
        found: dict[int, Any] = {}
        prange = getattr(_STREAM, "priority_range", None)
        least, greatest = prange() if prange is not None else (0, -1)
        for prio in range(least, greatest - 1, -1):
            first = None
            for _ in range(MAX_POOL):
                s = _STREAM(priority=prio)
                if s.stream_id == first:
                    break
                first = s.stream_id if first is None else first
                found[s.stream_id] = s
        default = _stream_of(_DEFAULT(_DEVICE()))
        found[default.stream_id] = default
        _CAL["streams"] = list(found.values())
    return list(_CAL["streams"])


def _queue_behind_lead(lead_ms: float, start: Any) -> int:
    """The device sleeps `lead_ms`, then `start` is recorded; every stream waits for it
    (calibrated beforehand: `_prepare_lead`). Returns the cycles slept."""
    cycles = max(1, int(lead_ms * _CAL["cycles"]))
    _SLEEP(cycles)
    _RECORD(start)
    for s in _streams():
        _EVENT_WAIT(start, s)
    return cycles


def _observed_rate(cycles: int, lead_dev: float) -> None:
    """A lead of `cycles` took `lead_dev` device ms: the sleep's rate follows the highest of
    the recent leads' rates (a slower clock then makes a lead longer than asked, never
    shorter)."""
    if lead_dev < LEAD_RATE_MIN_MS:  # the launch's own latency would weigh in the rate
        return
    rates = _CAL.setdefault("rates", [])
    rates.append(cycles / lead_dev)
    del rates[:-LEAD_RECENT]
    _CAL["cycles"] = max(rates)


@dataclass(frozen=True)
class Trial:
    """One timed call: host ms (after the lead, if any), device ms (0.0 without events), and
    whether the host's enqueue of the call outlasted the lead."""

    host: float
    dev: float
    exposed: bool = False
    enqueue: float = 0.0  # host ms from before the lead's events to the call's return
    lead_dev: float = 0.0  # device ms the lead lasted


Around = tuple[Callable[[], None], Callable[[Any, bool], None]]
_NO_AROUND: Around = (_nothing, _nothing)


def _one(
    fn: Callable[..., Any],
    inputs: list[Any],
    flush: torch.Tensor | None,
    sync: Callable[[], None],
    events: bool,
    lead_ms: float,
    around: Around,
    reset: Callable[[], None] = _nothing,
) -> Trial:
    """One trial. With a lead, our own work before the call (the audit's begin) overlaps the
    lead too. `around[1]` gets the call's outputs after the timer (the output is released after
    that, outside the timed region, on both sides). `reset` runs first, before the flush and
    its synchronize (a replay's constants restored: not timed)."""
    _GC_OFF()  # and again after each call: a candidate may turn it back on (gc reached)
    reset()
    p0 = _PERF_NS()
    if flush is not None:
        _RESET_L2()  # persisting lines (an access-policy window) first: the flush evicts them
        with sealed.guard():
            _ZERO(flush)
    sync()
    p1 = _PERF_NS()
    start = end = led = None
    if events:
        start, end = _EVENT(enable_timing=True), _EVENT(enable_timing=True)
    s0 = _PERF_NS()
    cycles = 0
    if events and lead_ms:
        led = _EVENT(enable_timing=True)
        _RECORD(led)
        cycles = _queue_behind_lead(lead_ms, start)
        around[0]()
        p2 = _PERF_NS()
    else:
        around[0]()
        s0 = p2 = _PERF_NS()  # (no stamp inside the timed region)
        if events:
            _RECORD(start)
    out = fn(*inputs)
    t_ret = _PERF_NS()
    _GC_OFF()
    if events:
        _RECORD(end)
    sync()  # device-wide: work left on side streams is waited for
    t1 = _PERF_NS()
    around[1](out, True)
    _part(p0, p1, p2, t_ret, t1, _PERF_NS())
    if not events:
        return Trial((t1 - s0) / 1e6, 0.0)
    if led is None:
        return Trial((t1 - s0) / 1e6, _ELAPSED(start, end))
    lead_dev = _ELAPSED(led, start)
    _observed_rate(cycles, lead_dev)
    enqueue = (t_ret - s0) / 1e6
    host = (t1 - s0) / 1e6 - lead_dev
    return Trial(host, _ELAPSED(start, end), enqueue > lead_dev, enqueue, lead_dev)


_PARTS: dict[str, float] = {}  # host ms of the trials since `run_trials` began, by part


def _part(*marks: int) -> None:
    """Add one trial's host time to `_PARTS` (diagnostics): the flush and its synchronize, the
    events and the lead with our audit's begin, the call's enqueue, the wait for the device,
    our audit's end."""
    for name, a, b in zip(TRIAL_PARTS, marks, marks[1:]):
        _PARTS[name] = _PARTS.get(name, 0.0) + (b - a) / 1e6


@dataclass
class Timed:
    """Trial times (ms) under the clock actually used, host ms, the clock's name, the final and
    the first trial's lead (ms, 0 without one) and how many trials were host-bound (enqueue
    outlasted the lead)."""

    times: list[float]
    hosts: list[float]
    clock: str
    lead_ms: float = 0.0
    exposed: int = 0
    first_lead_ms: float = 0.0
    leads: dict[str, float] = field(default_factory=dict)  # sums (ms): asked, device, enqueue
    synced: bool = False  # the call's enqueue waited for the device (`Lead`)


MIN_TRIALS = 2  # timed calls per request, however long the call (the first of a timing is dropped)


def run_trials(
    fn: Callable[..., Any],
    inputs: list[Any],
    warmup: int,
    trials: int,
    clock: str,
    flush: torch.Tensor | None,
    sync: Callable[[], None],
    around: Around = _NO_AROUND,
    budget_ms: float = 0.0,
    lead_key: str | None = None,
    reset: Callable[[], None] | None = None,
) -> Timed:
    """Warmup calls, then the timed trials. `around` is called before and after each call,
    warmup or timed (`after(outputs, timed)`): the worker's audit of the call. With `budget_ms`
    > 0, warmup stops once it has taken that long (after at least two calls) and the trials are
    cut to what fits in it at the fastest warmup call's time (at least MIN_TRIALS). An exception
    ends the trials (the caller resets the audit's state). `lead_key` names what is timed
    (the same callable on the same inputs) so a later request starts at the lead this one ended
    with (`Lead`; None: from the warmup's estimate). `reset` runs before every call, warmup or
    timed, outside the timed region (a replay's state restored)."""
    c = CLOCKS.get(clock, CLOCKS["host"])
    events = c.events and torch.cuda.is_initialized()
    lead = events and c.lead and _SLEEP is not None and _EVENT_WAIT is not None
    name = clock if events and lead == c.lead else ("cuda_events_idle" if events else "host")
    with _no_gc():
        counts = (warmup, trials, budget_ms)
        return _run(fn, inputs, counts, name, lead, flush, sync, around, lead_key, reset)


def fitting(trials: int, budget_ms: float, call_ms: float) -> int:
    """How many of `trials` calls of `call_ms` fit in `budget_ms` (0: no budget), at least
    MIN_TRIALS (never more than asked)."""
    if budget_ms <= 0 or not 0 < call_ms < float("inf"):
        return trials
    return min(trials, max(MIN_TRIALS, int(budget_ms / call_ms)))


def _run(
    fn: Callable[..., Any],
    inputs: list[Any],
    counts: tuple[int, int, float],
    name: str,
    lead: bool,
    flush: torch.Tensor | None,
    sync: Callable[[], None],
    around: Around,
    lead_key: str | None = None,
    reset: Callable[[], None] | None = None,
) -> Timed:
    """`run_trials` under clock `name` (the one actually used), the collector off."""
    reset = reset or _nothing
    warmup, trials, budget_ms = counts
    events = name != "host"
    if lead:
        _prepare_lead(sync)
    overhead = host_overhead_ms(sync, lead) if events else 0.0
    _PARTS.clear()  # (after the calibration's own trials)
    out = Timed([], [], name)
    with _NO_GRAD():
        enqueue: list[float] = []
        spent, call_ms = 0.0, float("inf")
        for i in range(warmup):
            if reset is not _nothing:
                reset()
                sync()
            around[0]()
            t = _PERF_NS()
            result = fn(*inputs)
            enqueue.append((_PERF_NS() - t) / 1e6)
            _GC_OFF()
            around[1](result, False)
            if budget_ms > 0:  # each warmup call completes: the fastest sizes the trials
                sync()  # (the fastest: a first call may still compile or autotune)
                took = (_PERF_NS() - t) / 1e6
                spent, call_ms = spent + took, min(call_ms, took)
                if spent >= budget_ms and i >= 1:
                    break
        sync()
        trials = fitting(trials, budget_ms, call_ms if enqueue else 0.0)
        # the first warmup call compiles; later ones show the steady launch cost
        estimate = max(enqueue[1:] or enqueue or [0.0]) + _waits_ms() if lead else 0.0
        sizing = Lead(estimate, lead_key) if lead else None
        out.lead_ms = out.first_lead_ms = sizing.ms if sizing else 0.0
        for _ in range(trials):
            t = _one(fn, inputs, flush, sync, events, out.lead_ms, around, reset)
            out.hosts.append(t.host)
            out.times.append(max(t.dev, t.host - overhead) if events else t.host)
            out.exposed += t.exposed
            if sizing:
                for k, v in (
                    ("asked", out.lead_ms),
                    ("device", t.lead_dev),
                    ("enqueue", t.enqueue),
                ):
                    out.leads[k] = out.leads.get(k, 0.0) + v
                out.lead_ms = sizing.after(t)
                out.synced = sizing.synced
    return out


def _bounded(ms: float) -> float:
    return min(LEAD_MAX_MS, max(LEAD_MIN_MS, ms))


class Lead:
    """The lead of the next trial (ms). First the lead a previous request of the same `key`
    ended with (`_CAL["leads"]`: a request's single warmup call is no guide, its enqueue may pay
    for the allocator refilling a trimmed cache), else LEAD_FACTOR x the warmup's steady enqueue
    (with the streams' waits); then LEAD_FIT x the recent median of the enqueue (events, waits,
    our audit's begin and the call: `Trial.enqueue`) of the trials that fitted in their lead,
    plus LEAD_PAD_MS. An exposed trial doubles the lead (at least LEAD_FIT x its own enqueue), up
    to LEAD_MAX_MS; exposed at the maximum, the next lead is halved once (a probe). Two exposed
    trials in a row whose enqueue moved with the lead (by half the lead's change or more, the
    lead changed by a third or more) show a call that waits for the device inside its enqueue:
    the lead is then LEAD_MIN_MS for the rest of the request (`synced`: its gaps count however
    long the lead). A host-bound call's enqueue does not move with its lead."""

    def __init__(self, estimate_ms: float, key: str | None = None):
        known = _CAL.get("leads", {}).get(key) if key is not None else None
        self.key = key
        self.ms = known if known is not None else _bounded(LEAD_FACTOR * estimate_ms)
        self.fits: list[float] = []
        self.last: Trial | None = None
        self.synced = self.probed = False

    def after(self, t: Trial) -> float:
        last, self.last = self.last, t
        if self.synced:
            pass
        elif not t.exposed:
            self.fits = [*self.fits[1 - LEAD_RECENT :], t.enqueue]
            self.ms = _bounded(LEAD_FIT * statistics.median(self.fits) + LEAD_PAD_MS)
        elif last is not None and last.exposed and _moved_with_lead(last, t):
            self.synced, self.ms = True, LEAD_MIN_MS
        elif self.ms >= LEAD_MAX_MS and not self.probed:
            self.probed, self.ms = True, LEAD_MAX_MS / 2
        else:
            self.ms = _bounded(max(2 * self.ms, LEAD_FIT * t.enqueue))
        self._remember()
        return self.ms

    def _remember(self) -> None:
        if self.key is not None:
            leads = _CAL.setdefault("leads", {})
            if len(leads) >= LEADS_KEPT and self.key not in leads:
                leads.clear()
            leads[self.key] = self.ms


def _moved_with_lead(a: Trial, b: Trial) -> bool:
    """Whether the enqueue of two exposed trials moved with their leads (`Lead`)."""
    change = b.lead_dev - a.lead_dev
    if change == 0 or abs(change) < max(a.lead_dev, b.lead_dev) / 3:
        return False
    return (b.enqueue - a.enqueue) / change >= 0.5


def _prepare_lead(sync: Callable[[], None]) -> None:
    """Calibrate the sleep, find the streams and the cost of their waits, once per process,
    before any trial (none of it may run inside a timed region)."""
    _cycles_per_ms(sync)
    _waits_ms()
    sync()


def _waits_ms() -> float:
    """Host time of making every stream wait for an event (part of a queued trial's enqueue)."""
    if "waits_ms" not in _CAL:
        e = _EVENT()
        _RECORD(e)
        t = _PERF_NS()
        for s in _streams():
            _EVENT_WAIT(e, s)
        _CAL["waits_ms"] = (_PERF_NS() - t) / 1e6
    return float(_CAL["waits_ms"])


class Consistency:
    """A replay's timed calls against its first timed call (outside the timed region): the first
    call's outputs are kept and sent to the judge, which compares them with the reference; every
    later call's must match them within the judge's tolerance (`tol`: dtype name -> tolerance,
    atol scaled by the output's magnitude). So every timed call is checked, not a sample: a
    kernel that does less work once it is timed (a call counter, a clock) is found."""

    def __init__(self, spec: Any):
        tol = spec.get("tol") if isinstance(spec, dict) else None
        self.tol = {str(k): float(v) for k, v in tol.items()} if isinstance(tol, dict) else {}
        self.first: list[torch.Tensor] | None = None
        self.scales: list[float] = []
        self.desc: dict[str, Any] | None = None
        self.fds: list[int] = []
        self.diverged = 0

    def after(self, outs: list[torch.Tensor], out: Any) -> None:
        if self.first is None:
            self.first = [o.detach().clone() for o in outs]
            self.scales = [_rms_floor(o) for o in self.first]
            self.desc, self.fds = outputs.copy_out(out, None)
            return
        if len(outs) != len(self.first) or not all(
            self._close(a, b, scale) for a, b, scale in zip(outs, self.first, self.scales)
        ):
            self.diverged += 1

    def _close(self, a: torch.Tensor, b: torch.Tensor, scale: float) -> bool:
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if not a.is_floating_point():
            return bool(torch.equal(a, b))
        tol = self.tol.get(str(a.dtype).replace("torch.", ""), 1e-4)
        return bool(torch.allclose(a, b, rtol=tol, atol=tol * scale, equal_nan=True))

    def reply(self) -> dict[str, Any]:
        kept = [{"trial": 0, "outputs": self.desc}] if self.desc is not None else []
        return {"kept": kept, "diverged": self.diverged, "_fds": list(self.fds)}

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []


def _rms_floor(t: torch.Tensor) -> float:
    """max(1, rms of t): the atol scale of a comparison with t (as judge/compare.py scales)."""
    if not t.numel() or not t.is_floating_point():
        return 1.0
    return max(1.0, float(t.double().pow(2).mean().sqrt().nan_to_num(0.0)))


def time_op(w: Any, msg: dict[str, Any], fds: list[int]) -> None:
    """Timed trials of the worker's candidate, or (timing process) of a loaded reference `key`.
    The reply goes after a device-wide synchronize that follows the release of every object of
    the request (inputs, the last call's outputs: their finalizers are the candidate's code),
    with the collector off from there until the next request arrives (`w.resume_gc`,
    Worker.loop): device work queued after the reply would run during the other side's round,
    in the timing process (another context, time-sliced with this one), and be counted there."""
    if _GC_ENABLED():
        _GC_OFF()
        w.resume_gc = True
    reply = _timed(w, msg, fds)  # None: answered already (a failure)
    _GC_OFF()  # (a finalizer may have reached gc and turned it back on)
    if reply is not None:
        w._sync()
        out_fds = reply.pop("_fds", [])
        try:
            w.reply(reply, out_fds)
        finally:
            for fd in out_fds:
                os.close(fd)


def _timed(w: Any, msg: dict[str, Any], fds: list[int]) -> dict[str, Any] | None:
    """`time_op` up to its reply, which it returns; its inputs and outputs are gone on return."""
    key = str(msg.get("key") or "")
    fn = w.model if not key else reference_host.callable_of(w, key, msg)
    if fn is None:
        for fd in fds:
            os.close(fd)
        w.reply({"ok": False, "status": Status.INTERNAL_ERROR.value,
                 "message": f"nothing loaded under {key!r}"})  # fmt: skip
        return None
    try:
        inputs = timing_inputs(w, key, msg, fds)
    except DevShareError as exc:  # (a reference's inputs re-sent with the request)
        reference_host.refuse_shared(w, exc)
        return None
    if w.device.startswith("cuda") and w.flush is None:
        w.flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=w.device)
    launches: list[int] = []
    signatures: list[str] = []
    ptrs = outputs.input_ptrs(inputs)
    # a replay's timed calls: the first one's outputs go back to the judge, every later one's
    # are compared here with them (`Consistency`)
    same = Consistency(msg.get("consistency")) if getattr(w, "replay", False) and not key else None

    def before() -> None:
        audit.begin_call(ptrs)
        audit.STATE.launch_count = 0
        audit.STATE.active = audit.STATE.light = True

    def after(out: Any, timed: bool) -> None:
        audit.STATE.active = audit.STATE.light = False
        if not key:  # the candidate: plain tensors out, and the call's launch signature
            digest = outputs.call_digest(w._checked(out))[0]
            if timed:
                signatures.append(digest)
        if timed:
            if same is not None:
                same.after(w._checked(out), out)
            launches.append(audit.STATE.launch_count)

    t_loop = _PERF_NS()
    try:
        timed = run_trials(
            fn, inputs, int(msg.get("warmup", 3)), int(msg.get("trials", 10)),
            str(msg.get("clock", "host")), w.flush, w._sync, (before, after),
            float(msg.get("budget_ms") or 0.0),
            f"{key}|{msg.get('compiled')}|{msg.get('case')}",
            w.model.reset if getattr(w, "replay", False) and not key else None,
        )  # fmt: skip
    except BaseException as exc:
        if same is not None:
            same.close()
        audit.STATE.active = audit.STATE.light = False
        if isinstance(exc, KeyboardInterrupt):
            raise
        w.fail(exc, "timing")
        return None
    return {"ok": True, "times_ms": timed.times, "host_ms": timed.hosts, "clock": timed.clock,
            "lead_ms": timed.lead_ms, "first_lead_ms": timed.first_lead_ms,
            "exposed": timed.exposed, "leads_ms": timed.leads, "synced": timed.synced,
            "launches": launches, "signatures": signatures,
            "loop_ms": (_PERF_NS() - t_loop) / 1e6, "parts_ms": dict(_PARTS),
            "audit": w._audit_extra(),
            **(same.reply() if same is not None else {})}  # fmt: skip
