"""The device's trusted timing process: references loaded side by side, timed like candidates.

Covers the worker ops of that process: `load` (op `ref_load`: run a problem's reference source,
which is trusted and comes from the judge, as a fresh module; build `Model` on the device with
the judge's init inputs and seed, as the judge does; optionally `torch.compile` it; map the
timing case's inputs once and call each model once, so compilation and first-call work happen
here and not inside a timed round), `drop` (op `ref_drop`) and `callable_of` (the eager or
compiled model a `time` request names). The process also runs one call under the audit's
profiler once (the legacy RecordFunction profiler with shapes, as candidates' workers run their
correctness trials; no Kineto, no CUPTI on either side), so that whatever the profiler leaves in
a process is the same on both sides. The process is an ordinary worker forked by the device's
fork server into the candidates' sandbox: the same process kind, single-threaded, and the same
timing code (timing_loop.py), including the light audit of every call. The audit is not armed
and the process is not sealed (no candidate code runs here): the hook's stubs inherited from the
fork server hand back the originals. Nor is the seccomp thread block installed (seccomp.py): it
exists so that no candidate thread computes out of the audit's sight, and this process compiles
the torch.compile baseline of each new problem (Inductor, Triton), whose threads it must not
break.
Does not cover: when to load or evict (judge/ref_timer.py), the timing loop (timing_loop.py).
"""

from __future__ import annotations

import gc
import hashlib
import os
import time
import types
from dataclasses import dataclass
from typing import Any

import torch

from tritonforge.evaluation.sandbox.devshare import DevShareError


@dataclass
class Loaded:
    model: Any
    compiled: Any | None = None


def _build(source: str, key: str, init_inputs: list[Any], seed: int, device: str) -> Any:
    mod = types.ModuleType(f"tf_timed_{hashlib.sha1(key.encode()).hexdigest()[:10]}")
    mod.__file__ = f"<reference {key}>"
    exec(compile(source, mod.__file__, "exec"), mod.__dict__)
    torch.manual_seed(seed)
    model = mod.Model(*init_inputs)
    return model.to(device) if isinstance(model, torch.nn.Module) else model


def _compile(model: Any) -> Any:
    import torch._inductor.config as inductor_config

    inductor_config.compile_threads = 1  # no compile-worker pool inside the sandbox
    return torch.compile(model)


def _profile_once(model: Any, inputs: list[Any]) -> None:
    """One call under the profiler every candidate's worker runs its correctness trials with
    (sandbox/audit.py: legacy, shapes recorded in hybrid mode): whatever it leaves behind in a
    process is then the same on both sides of a timing."""
    with torch.autograd.profiler.profile(use_kineto=False, record_shapes=True) as prof:
        model(*inputs)
    prof.function_events  # noqa: B018 - parsed, as the audit does


def load(w: Any, msg: dict[str, Any], fds: list[int]) -> None:
    """`ref_load`: fds are the init inputs' memfd, then (optionally) the timing case's."""
    key = str(msg["key"])
    w.device = msg.get("device", "cpu")
    t0 = time.perf_counter()
    if w.device.startswith("cuda"):
        torch.empty(1, device=w.device)  # the context, before anything is timed
    cuda_init_s = time.perf_counter() - t0
    init_inputs = w._inputs({"inputs": msg["init_inputs"]}, fds[:1], objects=True)  # judge's values
    case_fds = fds[1:]
    w.path = f"<reference {key}>"
    spent: dict[str, float] = {}  # seconds: building the model, mapping the inputs, first calls
    try:
        model = _build(msg["source"], key, init_inputs, int(msg["init_seed"]), w.device)
        entry = Loaded(model, _compile(model) if msg.get("compile") else None)
        w.references[key] = entry
        spent["build"] = time.perf_counter() - t0 - cuda_init_s
        if "inputs" in msg:  # map the timing case once; first calls (and compiles) happen now
            given, case_fds = case_fds, []  # _timing_inputs closes them, even when it fails
            t = time.perf_counter()
            inputs = w._timing_inputs(key, msg, given)
            w._sync()
            spent["inputs"] = time.perf_counter() - t
            t = time.perf_counter()
            with torch.no_grad():
                for fn in (entry.model, entry.compiled):
                    if fn is not None:
                        fn(*inputs)
                if not w.references_profiled:
                    _profile_once(entry.model, inputs)  # the state a candidate's worker has
                    w.references_profiled = True
            w._sync()
            spent["calls"] = time.perf_counter() - t
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        w.references.pop(key, None)
        w.timing_inputs.pop(key, None)
        if isinstance(exc, DevShareError):
            refuse_shared(w, exc)
            return
        w.fail(exc, "reference")
        return
    finally:
        for fd in case_fds:
            os.close(fd)
    w.reply({"ok": True, "cuda_init_s": cuda_init_s, "seconds": spent})


def refuse_shared(w: Any, exc: DevShareError) -> None:
    """The reply to a request whose shared input buffer could not be mapped here: the judge
    sends the same request again with the inputs in a memfd (judge/ref_timer.py)."""
    w.reply({"ok": False, "shared_error": f"{type(exc).__name__}: {exc}"[:500]})


def drop(w: Any, msg: dict[str, Any], fds: list[int]) -> None:
    """`ref_drop`: forget a loaded reference and its inputs (only its inputs with
    `inputs_only`: others are coming), and return the memory."""
    key = str(msg.get("key", ""))
    if not msg.get("inputs_only"):
        w.references.pop(key, None)
    w.timing_inputs.pop(key, None)
    gc.collect()
    if w.device.startswith("cuda"):
        torch.cuda.empty_cache()
    w.reply({"ok": True})


def callable_of(w: Any, key: str, msg: dict[str, Any]) -> Any:
    """The model a `time` request names (eager, or compiled with `compiled`), or None."""
    entry = w.references.get(key)
    if entry is None:
        return None
    return entry.compiled if msg.get("compiled") else entry.model
