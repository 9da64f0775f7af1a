"""The device's trusted timing process: references loaded side by side, timed like candidates.

Covers the worker ops of that process: `load` (op `ref_load`: run a problem's reference source,
which is trusted and comes from the judge, as a fresh module; build `Model` on the meta device
and give it the judge's weights (judge/timer_weights.py), or, where those cannot reproduce a
build, build it on the device with the judge's init inputs and seed, as the judge does; optionally `torch.compile` it; map the
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

from tritonforge.evaluation.sandbox.classify import is_device_oom
from tritonforge.evaluation.sandbox.devshare import DevShareError
from tritonforge.evaluation.sandbox.protocol import unpack, unpack_buffer


@dataclass
class Loaded:
    model: Any
    compiled: Any | None = None


def _module(source: str, key: str) -> types.ModuleType:
    mod = types.ModuleType(f"tf_timed_{hashlib.sha1(key.encode()).hexdigest()[:10]}")
    mod.__file__ = f"<reference {key}>"
    exec(compile(source, mod.__file__, "exec"), mod.__dict__)
    return mod


def _build(mod: types.ModuleType, init_inputs: list[Any], seed: int, device: str) -> Any:
    torch.manual_seed(seed)
    model = mod.Model(*init_inputs)
    return model.to(device) if isinstance(model, torch.nn.Module) else model


def _judges_weights(w: Any, spec: dict[str, Any], fd: int) -> list[torch.Tensor]:
    """The tensors of a `weights` field: views of the judge's shared device buffer (kept mapped
    as the weights), or private copies from its memfd. Closes `fd`."""
    if spec.get("shared"):
        from tritonforge.evaluation.sandbox.devshare import ImportedBuffer

        want = spec["shared"]
        buf = ImportedBuffer(fd, w.device, int(want["nbytes"]), int(want["size"]))
        return list(unpack_buffer(spec["desc"], buf.tensor(), True, copy=False))
    try:
        return list(unpack(spec["desc"], fd, keep_strides=True, device=w.device))
    finally:
        os.close(fd)


def from_weights(
    mod: types.ModuleType, init_inputs: list[Any], spec: dict[str, Any], tensors: list[Any]
) -> tuple[Any, str]:
    """`Model` built on the meta device (no initialisation work), then each parameter and
    buffer replaced by the judge's tensor of that name (tied names share one). Returns
    (model, "") or (None, why) when that would not reproduce a build: the constructor fails on
    the meta device, a name or shape differs, or a meta tensor is left."""
    try:
        with torch.device("meta"):
            model = mod.Model(*init_inputs)
    except Exception as exc:
        return None, f"Model() on the meta device: {type(exc).__name__}: {str(exc)[:200]}"
    if not isinstance(model, torch.nn.Module):
        return None, "Model() is not a torch.nn.Module"
    try:
        return _put_in_place(model, spec, tensors)
    except Exception as exc:  # e.g. a lazy module's uninitialised parameter on the meta device
        return None, f"placing the judge's weights: {type(exc).__name__}: {str(exc)[:200]}"


def _put_in_place(
    model: torch.nn.Module, spec: dict[str, Any], tensors: list[Any]
) -> tuple[Any, str]:
    made: dict[int, torch.Tensor] = {}
    for name, i, is_param in zip(spec["names"], spec["index"], spec["params"]):
        owner, _, leaf = str(name).rpartition(".")
        try:
            table = getattr(model.get_submodule(owner), "_parameters" if is_param else "_buffers")
        except AttributeError:
            return None, f"no submodule {owner!r}"
        old, new = table.get(leaf), tensors[int(i)]
        if old is None or old.shape != new.shape or old.dtype != new.dtype:
            return None, f"{name}: {None if old is None else tuple(old.shape)} here"
        if int(i) not in made:
            made[int(i)] = torch.nn.Parameter(new, old.requires_grad) if is_param else new
        table[leaf] = made[int(i)]
    left = meta_left(model)
    return (None, f"not among the judge's weights: {', '.join(left[:4])}") if left else (model, "")


def meta_left(model: torch.nn.Module) -> list[str]:
    """Names of tensors still on the meta device: parameters, buffers, plain attributes."""
    left = [n for n, t in (*model.named_parameters(), *model.named_buffers()) if t.is_meta]
    return left + attribute_tensors(model, lambda t: t.is_meta)


def attribute_tensors(model: torch.nn.Module, keep: Any = lambda t: True) -> list[str]:
    """Names of the module attributes (not its parameters, buffers or submodules) holding a
    tensor that `keep` accepts, directly or inside a list, tuple or dict."""
    found = []
    for prefix, m in model.named_modules():
        for attr, v in vars(m).items():
            if attr in ("_parameters", "_buffers", "_modules"):
                continue
            items = (
                v.values() if isinstance(v, dict) else v if isinstance(v, (list, tuple)) else [v]
            )
            if any(isinstance(x, torch.Tensor) and keep(x) for x in items):
                found.append(f"{prefix}.{attr}" if prefix else attr)
    return found


def _model(w: Any, msg: dict[str, Any], init_inputs: list[Any], fds: list[int]) -> tuple[Any, str]:
    """The reference model: from the judge's weights when they came (`fds[0]`) and fit, else
    built in full as the judge built it (seed, CPU initialisation, moved to the device). The
    second value says which: "judge", "built" with the reason the judge's could not be used,
    or "" when none came (a model without tensors, or one only a full build reproduces).
    Closes `fds`."""
    mod = _module(msg["source"], str(msg["key"]))
    spec = msg.get("weights")
    how = ""
    if isinstance(spec, dict) and fds:
        model, why = from_weights(mod, init_inputs, spec, _judges_weights(w, spec, fds.pop(0)))
        if model is not None:
            return model, "judge"
        how = f"built: {why}"
    return _build(mod, init_inputs, int(msg["init_seed"]), w.device), how


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
    """`ref_load`: fds are the init inputs' memfd, then the judge's weights (when `weights` is
    in the message: a shared device buffer or a memfd), then the timing case's inputs."""
    key = str(msg["key"])
    w.device = msg.get("device", "cpu")
    t0 = time.perf_counter()
    if w.device.startswith("cuda"):
        torch.empty(1, device=w.device)  # the context, before anything is timed
    cuda_init_s = time.perf_counter() - t0
    init_inputs = w._inputs({"inputs": msg["init_inputs"]}, fds[:1], objects=True)  # judge's values
    weight_fds = fds[1:2] if "weights" in msg else []
    case_fds = fds[1 + len(weight_fds) :]
    w.path = f"<reference {key}>"
    spent: dict[str, float] = {}  # seconds: building the model, mapping the inputs, first calls
    try:
        model, how = _model(w, msg, init_inputs, weight_fds)
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
            try:
                _first_calls(w, entry, inputs)
            except Exception as exc:
                if how != "judge" or is_device_oom(exc):
                    raise
                # a tensor the meta build missed (held deeper than a module's attributes):
                # the reference built in full, as the judge built it
                how = f"built: the first call with the judge's weights failed: {exc!r}"[:300]
                w.references.pop(key, None)
                entry = model = None  # the judge's views go before the full build
                model = _build(
                    _module(msg["source"], key), init_inputs, int(msg["init_seed"]), w.device
                )
                entry = w.references[key] = Loaded(
                    model, _compile(model) if msg.get("compile") else None
                )
                _first_calls(w, entry, inputs)
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
        for fd in [*weight_fds, *case_fds]:
            os.close(fd)
    w.reply({"ok": True, "cuda_init_s": cuda_init_s, "seconds": spent, "weights": how})


def _first_calls(w: Any, entry: Loaded, inputs: list[Any]) -> None:
    """Each model called once on the timing inputs (compiles happen here, not in a timed round);
    the first reference of the process also once under the audit's profiler."""
    with torch.no_grad():
        for fn in (entry.model, entry.compiled):
            if fn is not None:
                fn(*inputs)
        if not w.references_profiled:
            _profile_once(entry.model, inputs)  # the state a candidate's worker has
            w.references_profiled = True
    w._sync()


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
