"""The `time` op of a worker: the same code times candidates and references.

Covers: `time_op` (the op: which model, which inputs, the audit around each call, the reply),
`timing_inputs` (the device copy of a timing case, made once per memfd and model), and
`run_trials` (warmup, then per trial: L2 flush, device-wide synchronize, the call between
two CUDA events and two host timer reads, device-wide synchronize) and the clocks it reports:
`cuda_events` = the device time between the events, floored by the host time less this
process's fixed synchronize latency (`host_overhead_ms`, calibrated once on an empty call), so
work the call left on another stream still counts; `host` = the host time around the
device-wide synchronize (the only clock on the CPU). Event and timer functions, and the flush's
`zero_`, are captured when this module is imported, in the fork server, before any candidate
code exists (the flush runs with torch functions and Python dispatch disabled: sealed.guard).
Every call, warmup or timed, on either side, is a light audited call (audit.begin_call, launches
counted and recorded outside the timer): for a candidate, each timed call's outputs must be
plain tensors and its launch signature goes back to the judge (`launch_mismatch` when it differs
from the profiled calls'); a reference's calls pass through the same steps, so both sides pay
the same per-call cost.
Runs in the worker (sandbox side). Does not cover: which inputs or model (worker.py), the
interleaving schedule and statistics (judge/gpu_timing.py, judge/timing.py).
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from tritonforge.evaluation.sandbox import audit, outputs, reference_host, sealed
from tritonforge.types import Status

L2_FLUSH_BYTES = 256 * 1024 * 1024
CALIBRATION_TRIALS = 25

_EVENT = torch.cuda.Event
_RECORD = torch.cuda.Event.record
_ELAPSED = torch.cuda.Event.elapsed_time
_PERF_NS = time.perf_counter_ns
_ZERO = sealed.CAP.zero_
_OVERHEAD: dict[str, float] = {}


def _nothing(*args: Any) -> None:
    return None


def host_overhead_ms(sync: Callable[[], None]) -> float:
    """Median host-minus-device time of an empty timed region in this process (the latency of
    recording two events and synchronizing), measured once."""
    if "cuda" not in _OVERHEAD:
        gaps = []
        for _ in range(CALIBRATION_TRIALS):
            host, dev = _one(_nothing, [], None, sync, True, (_nothing, _nothing))
            gaps.append(max(0.0, host - dev))
        _OVERHEAD["cuda"] = statistics.median(gaps)
    return _OVERHEAD["cuda"]


Around = tuple[Callable[[], None], Callable[[Any, bool], None]]


def _one(
    fn: Callable[..., Any],
    inputs: list[Any],
    flush: torch.Tensor | None,
    sync: Callable[[], None],
    events: bool,
    around: Around,
) -> tuple[float, float]:
    """One trial: (host ms, device ms or 0.0). `around[1]` gets the call's outputs after the
    timer (the output is released after that, outside the timed region, on both sides)."""
    if flush is not None:
        with sealed.guard():
            _ZERO(flush)
    sync()
    if events:
        start, end = _EVENT(enable_timing=True), _EVENT(enable_timing=True)
    around[0]()
    if events:
        _RECORD(start)
    t0 = _PERF_NS()
    out = fn(*inputs)
    if events:
        _RECORD(end)
    sync()  # device-wide: work left on side streams is waited for
    t1 = _PERF_NS()
    around[1](out, True)
    return (t1 - t0) / 1e6, (_ELAPSED(start, end) if events else 0.0)


def run_trials(
    fn: Callable[..., Any],
    inputs: list[Any],
    warmup: int,
    trials: int,
    clock: str,
    flush: torch.Tensor | None,
    sync: Callable[[], None],
    around: Around = (_nothing, _nothing),
) -> tuple[list[float], list[float], str]:
    """(times in ms under the clock actually used, host ms, that clock's name). `around` is
    called before and after each call, warmup or timed (`after(outputs, timed)`): the worker's
    audit of the call. An exception ends the trials (the caller resets the audit's state)."""
    events = clock == "cuda_events" and torch.cuda.is_initialized()
    overhead = host_overhead_ms(sync) if events else 0.0
    times, hosts = [], []
    with torch.no_grad():
        for _ in range(warmup):
            around[0]()
            around[1](fn(*inputs), False)
        sync()
        for _ in range(trials):
            host, dev = _one(fn, inputs, flush, sync, events, around)
            hosts.append(host)
            times.append(max(dev, host - overhead) if events else host)
    return times, hosts, "cuda_events" if events else "host"


def time_op(w: Any, msg: dict[str, Any], fds: list[int]) -> None:
    """Timed trials of the worker's candidate, or (timing process) of a loaded reference `key`."""
    key = str(msg.get("key") or "")
    fn = w.model if not key else reference_host.callable_of(w, key, msg)
    if fn is None:
        for fd in fds:
            os.close(fd)
        w.reply({"ok": False, "status": Status.INTERNAL_ERROR.value,
                 "message": f"nothing loaded under {key!r}"})  # fmt: skip
        return
    inputs = timing_inputs(w, key, msg, fds)
    if w.device.startswith("cuda") and w.flush is None:
        w.flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=w.device)
    launches: list[int] = []
    signatures: list[str] = []
    ptrs = outputs.input_ptrs(inputs)

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
            launches.append(audit.STATE.launch_count)

    try:
        times, hosts, clock = run_trials(
            fn, inputs, int(msg.get("warmup", 3)), int(msg.get("trials", 10)),
            str(msg.get("clock", "host")), w.flush, w._sync, (before, after),
        )  # fmt: skip
    except BaseException as exc:
        audit.STATE.active = audit.STATE.light = False
        if isinstance(exc, KeyboardInterrupt):
            raise
        w.fail(exc, "timing")
        return
    w.reply({"ok": True, "times_ms": times, "host_ms": hosts, "clock": clock,
             "launches": launches, "signatures": signatures,
             "audit": w._audit_extra()})  # fmt: skip


def timing_inputs(w: Any, key: str, msg: dict[str, Any], fds: list[int]) -> list[Any]:
    """Every timing round sends the same case (the same memfd, dup'ed): reuse the device copy
    made for model `key` ("" = the candidate). The cache key names the memfd itself, not only
    the tensors' geometry. Closes `fds`."""
    ident = f"{os.fstat(fds[0]).st_ino}:{json.dumps(msg['inputs'], sort_keys=True)}" if fds else ""
    held = w.timing_inputs.get(key)
    if ident and held is not None and held[0] == ident:
        for fd in fds:
            os.close(fd)
        return held[1]
    w.timing_inputs.pop(key, None)  # the old copy goes before the new one is made
    inputs = w._inputs(msg, fds)  # views of the shared buffer when there are no fds
    if ident:
        w.timing_inputs[key] = (ident, inputs)
    return inputs
