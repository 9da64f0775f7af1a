"""Launch recorder and autotune handling of the in-sandbox audit, plus the caching check's
poisoning of a first call's outputs.

Covers: wrapping Triton's launch entry points (compiled `JITFunction.run` and the interpreter's)
to log every kernel launch (name, tensor arguments), snapshot the argument buffers of the first
SNAPSHOT_LAUNCHES launches of a trial before/after to see which ones a launch changed, credit
those to output lineage (lineage.py), and mark the launch in the profile with a secret marker;
@triton.autotune benchmarking in light mode with our own benchmark (no aten compute, works under
the CPU interpreter); `poison`/`stale` for the repeated call of the caching check.
Does not cover: tripwires, the audit hook, the forward scope (audit.py, audit_hook.py).
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from typing import Any

import torch

from tritonforge.evaluation.sandbox import lineage
from tritonforge.evaluation.sandbox.audit_state import STATE, Launch

SNAPSHOT_LAUNCHES = 64  # per trial: launches whose argument buffers are diffed before/after
POISON = 0xFF  # byte written over a first call's outputs before a repeated call

# ---------------------------------------------------------------------------------------------
# Launch recorder
# ---------------------------------------------------------------------------------------------


def _tensor_args(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    out = []
    for a in list(args) + list(kwargs.values()):
        base = getattr(a, "base", a)  # triton TensorWrapper
        if isinstance(base, torch.Tensor):
            out.append(base)
        elif isinstance(a, (tuple, list)):
            out.extend(_tensor_args(tuple(a), {}))
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


def _own_work():
    """Profiler marker around the audit's own ops (snapshots), which the analysis skips."""
    if not STATE.profiling:
        return nullcontext()
    return STATE.originals["record_function"](f"tf::audit::{STATE.token}")


def _marked(original: Any, fn: Any, args: tuple, kwargs: dict) -> Any:
    """Run the launch inside the secret profiler marker (our snapshots stay outside it)."""
    if not STATE.profiling:
        return original(fn, *args, **kwargs)
    with STATE.originals["record_function"](f"tf::launch::{STATE.token}"):
        return original(fn, *args, **kwargs)


def _wrap_run(cls: type, label: str) -> None:
    original = cls.run

    def run(self, *args, **kwargs):
        if kwargs.get("warmup"):
            return original(self, *args, **kwargs)
        STATE.launch_count += 1
        if STATE.light:
            if STATE.tuning and STATE.active:  # autotune runs write the real output buffers
                ptrs = [_storage_key(t)[0] for t in _tensor_args(args, kwargs)]
                lineage.kernel_wrote(ptrs, False)
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
        try:
            with _own_work():
                snaps = _snapshot(tensors) if snap else None
            result = _marked(original, self, args, kwargs)
            if snaps is not None:
                with _own_work():
                    if tensors and tensors[0].device.type == "cuda":
                        STATE.originals["cuda_sync"]()
                    rec.changed = _changed(tensors, snaps)
            if STATE.active:
                written = rec.changed if rec.changed is not None else [p for p, _ in rec.args]
                lineage.kernel_wrote(written, rec.changed is not None)
            rec.ok = True
            return result
        finally:
            STATE.in_launch -= 1

    cls.run = run
    STATE.watched.append((cls, "run", run))


AUTOTUNE_REPS = 10


def _event_bench(kernel_call: Any, quantiles: Any = None) -> Any:
    """Autotuner benchmark with CUDA events and Python statistics: no aten compute ops (which
    strict mode would count against the candidate), whatever Triton version is installed."""
    sync = STATE.originals["cuda_sync"]
    kernel_call()
    sync()
    times = []
    for _ in range(AUTOTUNE_REPS):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        kernel_call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    picked = [times[min(len(times) - 1, int(q * len(times)))] for q in (quantiles or (0.5,))]
    return picked if quantiles else picked[0]


def _interpreter_bench(kernel_call: Any, quantiles: Any = None) -> Any:
    """Under the CPU interpreter there is no benchmarker: run the config once (equal times: the
    first config wins)."""
    kernel_call()
    return [1.0] * len(quantiles) if quantiles else 1.0


def _quiet_autotune() -> None:
    """@triton.autotune benchmarks every config inside the candidate's first forward: time them
    with our own benchmark (the interpreter has none: "0 active drivers") and in light mode
    (launches counted, not recorded: benchmark runs neither credit outputs nor get snapshots).
    Config pre-hooks and everything else stay visible to the profiler audit."""
    from functools import cached_property

    from triton.runtime import autotuner

    cls = autotuner.Autotuner
    bench = _interpreter_bench if os.environ.get("TRITON_INTERPRET") == "1" else _event_bench
    if isinstance(cls.__dict__.get("do_bench"), cached_property):
        cls.do_bench = property(lambda self: self._do_bench or bench)
    original = cls.__dict__.get("_bench")
    if original is None:
        return

    def _bench(self, *args, **kwargs):
        light, tuning = STATE.light, STATE.tuning
        STATE.light = STATE.tuning = True
        try:
            return original(self, *args, **kwargs)
        finally:
            STATE.light, STATE.tuning = light, tuning

    cls._bench = _bench
    STATE.watched.append((cls, "_bench", _bench))


def install() -> None:
    from triton.runtime import jit

    _wrap_run(jit.JITFunction, "jit")
    try:
        from triton.runtime import interpreter

        _wrap_run(interpreter.InterpretedFunction, "interpreted")
    except ImportError:
        pass
    _quiet_autotune()


# ---------------------------------------------------------------------------------------------
# Caching check: poison the outputs of a first call
# ---------------------------------------------------------------------------------------------


def _overlaps_any(t: torch.Tensor, others: list[torch.Tensor]) -> bool:
    ptr = t.untyped_storage().data_ptr()
    return any(o.untyped_storage().data_ptr() == ptr for o in others)


def poison(outputs: list[torch.Tensor], inputs: list[torch.Tensor]) -> set[int]:
    """Overwrite the storages of a first call's outputs (not the inputs') with POISON bytes, so a
    second call cannot hand them back as fresh results. Returns the poisoned storage ptrs."""
    done: set[int] = set()
    for o in outputs:
        try:
            ptr = o.untyped_storage().data_ptr()
            if ptr in done or not o.untyped_storage().nbytes() or _overlaps_any(o, inputs):
                continue
            if o.dtype is torch.bool:
                continue  # 0xFF is not a valid bool
            _bytes_of(o).fill_(POISON)
            done.add(ptr)
        except Exception:  # an exotic tensor: not poisoned, the other checks still apply
            continue
    return done


def stale(outputs: list[torch.Tensor], poisoned: set[int]) -> list[int]:
    """Outputs of the repeated call that are a poisoned storage whose bytes are still poison."""
    out = []
    for i, o in enumerate(outputs):
        try:
            if o.untyped_storage().data_ptr() in poisoned and o.numel():
                if bool((_bytes_of(o) == POISON).all()):
                    out.append(i)
        except Exception:
            continue
    return out
