"""Launch recorder of the in-sandbox audit (the hook's side of the launch stubs), launch
signatures, autotune handling, and the caching check's poisoning of a first call's outputs.

Covers: the handlers of the `tritonforge.launch/launched` events raised by the stubs that stand in
for Triton's launch entry points (compiled `JITFunction.run` and the interpreter's): every launch
is logged (name, tensor arguments), the argument buffers of the first SNAPSHOT_LAUNCHES launches
of a trial are snapshotted before/after to see which ones it changed (those allocated
uninitialised in the call poisoned first: `_poison_fresh`), those are credited to
output lineage (lineage.py), and the launch runs inside a secret profiler marker; arguments a
Triton kernel cannot take (Python functions, modules) are `python_in_kernel`; each launch adds
an entry to the call's signature (kernel, grid, scalar arguments, which arguments are the call's
inputs or outputs), which the judge compares across calls; @triton.autotune benchmarking in light
mode with our own benchmark; `poison`/`stale` for the repeated call of the caching check.
Snapshots run with torch functions disabled and the Python dispatch keys excluded (sealed.py),
so no tensor subclass or mode of the candidate runs inside our own marker.
Does not cover: tripwires, the audit hook, the forward scope (audit_hook.py, audit.py).
"""

from __future__ import annotations

import os
import types
from typing import Any

import torch

from tritonforge.evaluation.sandbox import audit_memory, lineage, recipe, sealed, stubs
from tritonforge.evaluation.sandbox.audit_hook import Hook, Trip
from tritonforge.evaluation.sandbox.audit_state import STATE, Launch, violation

SNAPSHOT_LAUNCHES = 64  # per trial: launches whose argument buffers are diffed before/after
POISON = 0xFF  # byte written over a first call's outputs before a repeated call
_RUNS: list[Any] = []  # originals of the launch entry points, by stub key
_BENCHES: list[Any] = []  # originals of Autotuner._bench (and CachingAutotuner's benchmarks)
# originals of the Inductor runtime's CompileResult._gen_launcher_code
_LAUNCHER_CODE: list[Any] = []
_RUNNERS: dict[int, tuple[int, str]] = {}  # runner key -> (first kernel argument, kernel name)
_TRUSTED_RUNNERS: dict[str, Any] = {}  # what a genuine runner is, taken before the candidate ran
# runner key -> its kernel's launch state when the launcher was built
_FROZEN: dict[int, tuple] = {}
_TB = torch._C.TensorBase
_INTERPRETER = [False]  # set at install: launches run as Python under the CPU interpreter
_KERNEL_TYPES = ("JITFunction", "InterpretedFunction", "Autotuner", "Heuristics")
_LAUNCH_KWARGS = {"grid", "warmup", "num_warps", "num_stages", "num_ctas", "maxnreg"}

# ---------------------------------------------------------------------------------------------
# Arguments
# ---------------------------------------------------------------------------------------------


def _tensor_args(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    out = []
    for a in list(args) + list(kwargs.values()):
        t = type(a)
        if t.__name__ in ("TensorWrapper", "TensorDescriptor") and t.__module__.startswith(
            "triton"
        ):
            a = a.base
            t = type(a)
        if issubclass(t, torch.Tensor):
            out.append(a)
        elif t is tuple or t is list:
            out.extend(_tensor_args(tuple(a), {}))
    return out


def storage_key(t: torch.Tensor) -> tuple[int, int]:
    s = sealed.CAP.storage(t)
    return (sealed.CAP.storage_ptr(s), sealed.CAP.storage_nbytes(s))


def _python_args(args: tuple, kwargs: dict) -> list[str]:
    """Arguments a compiled kernel could not take: plain Python functions, classes, modules
    (under the interpreter they would run as Python inside the kernel body)."""
    found = []
    values = list(args) + [v for k, v in kwargs.items() if k not in _LAUNCH_KWARGS]
    for a in values:
        if type(a).__name__ == "constexpr" and type(a).__module__.startswith("triton"):
            a = a.value
        t = type(a)
        if t.__name__ in _KERNEL_TYPES and t.__module__.startswith("triton"):
            continue
        if isinstance(a, (types.FunctionType, types.BuiltinFunctionType, types.MethodType)):
            found.append(f"function {getattr(a, '__name__', '?')}")
        elif isinstance(a, (types.ModuleType, type)):
            found.append(f"{t.__name__} {getattr(a, '__name__', '?')}")
    return found


def _scalar(a: Any) -> str:
    t = type(a)
    if t is bool or t is int or t is str or a is None:
        return repr(a)[:40]
    if t.__name__ == "constexpr":
        return _scalar(a.value)
    if t is float:
        return "f"
    if t.__name__ == "dtype":
        return str(a)
    return ""


def raw_entry(fn: Any, args: tuple, kwargs: dict) -> tuple[str, str, str, tuple[int, ...]]:
    """(kernel, grid, scalar arguments, data ptrs of tensor arguments) of one launch."""
    if type(fn) is str:  # a runner's launch (the kernel's name)
        name = fn
    else:
        name = getattr(getattr(fn, "fn", None), "__name__", None) or type(fn).__name__
    grid = kwargs.get("grid")
    if type(grid) is _Grid:  # a callable grid: the grid it returned for this launch
        grid = grid.last
    if type(grid) in (tuple, list) and all(type(g) is int for g in grid):
        grid_s = repr(tuple(grid))
    else:
        grid_s = "callable" if callable(grid) else type(grid).__name__
    scalars = (
        ",".join(_scalar(a) for a in args)
        + ";"
        + ",".join(
            f"{k}={_scalar(v)}" for k, v in sorted(kwargs.items()) if k not in ("grid", "warmup")
        )
    )
    with sealed.guard():
        ptrs = tuple(_TB.data_ptr(t) for t in _tensor_args(args, kwargs))
    return str(name), grid_s, scalars, ptrs


def signature(raws: list[tuple], input_ptrs: dict[int, int], output_ptrs: list[int]) -> list[str]:
    """One string per launch: kernel|grid|scalars|roles, a role per tensor argument: in<i> (the
    call's input i), out<k> (its output k), or - (anything else: workspace, weights, a cache),
    matched by data pointer (inputs can be views of one shared buffer)."""
    outs = {p: k for k, p in enumerate(output_ptrs)}
    entries = []
    for raw in raws:
        name, grid, scalars, ptrs = raw if len(raw) == 4 else raw_entry(*raw)
        roles = []
        for p in ptrs:
            if p in input_ptrs:
                roles.append(f"in{input_ptrs[p]}")
            elif p in outs:
                roles.append(f"out{outs[p]}")
            else:
                roles.append("-")
        entries.append(f"{name}|{grid}|{scalars}|{','.join(roles)}")
    return entries


# ---------------------------------------------------------------------------------------------
# Launch recorder (hook handlers)
# ---------------------------------------------------------------------------------------------


def _snapshot(tensors: list[torch.Tensor]) -> dict[int, torch.Tensor]:
    snaps = {}
    for t in tensors:
        ptr, nbytes = storage_key(t)
        if ptr not in snaps and nbytes:
            snaps[ptr] = sealed.CAP.clone(sealed.bytes_of(t))
    return snaps


def _poison_fresh(tensors: list[torch.Tensor]) -> None:
    """Fill the arguments allocated uninitialised in this call and not written since
    (`STATE.fresh`) with POISON bytes before the snapshot: a kernel that writes one is then
    seen to change it even when it writes the bytes the block already held (on a GPU the
    caching allocator hands the caching check's second call the first call's freed workspace,
    with the first call's results in it), and a kernel that never writes it leaves poison.
    Device buffers only, and not with the CUDA C++ backend: host code writes CPU tensors unseen
    by the dispatcher (numpy through an array interface, tolerated in hybrid mode), and the
    backend's library calls write device buffers unseen, so an empty buffer may already hold
    their results."""
    armed = STATE.armed
    if armed is None or "library" in armed.allow_spawn_from:
        return
    for t in tensors:
        ptr, nbytes = storage_key(t)
        if (
            ptr in STATE.fresh
            and nbytes
            and _TB.device.__get__(t).type == "cuda"
            and _TB.dtype.__get__(t) is not torch.bool
        ):
            sealed.CAP.fill_(sealed.bytes_of(t), POISON)
            STATE.fresh.discard(ptr)


def _changed(tensors: list[torch.Tensor], snaps: dict[int, torch.Tensor]) -> list[int]:
    out = []
    for t in tensors:
        ptr, _ = storage_key(t)
        before = snaps.pop(ptr, None)
        if before is not None and not sealed.CAP.equal(before, sealed.bytes_of(t)):
            out.append(ptr)
    return out


class _Grid:
    """A candidate's callable grid. Triton calls it inside the launch entry, where the tripwires
    and the lineage are off (`STATE.in_launch`: Triton's own work there is not the candidate's);
    it runs with them on, as the candidate's own code it is, and the grid it returned signs the
    launch (`raw_entry`: a grid that differs when the call is not observed is
    `launch_mismatch`)."""

    __slots__ = ("fn", "last")

    def __init__(self, fn: Any):
        self.fn, self.last = fn, None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        depth, STATE.in_launch = STATE.in_launch, 0
        STATE.in_grid += 1
        try:
            out = self.fn(*args, **kwargs)
        finally:
            STATE.in_launch = depth
            STATE.in_grid -= 1
        self.last = out
        return out


def _launch(hook: Hook, args: tuple, frame: Any) -> None:
    key, fn, a, kw, box = args
    box.append(_RUNS[key])
    grid = kw.get("grid")
    if callable(grid) and type(grid) is not _Grid:  # (the stub calls the entry with `kw`)
        kw["grid"] = _Grid(grid)
    if kw.get("warmup"):
        return
    STATE.launch_count += 1
    if _INTERPRETER[0]:  # the interpreter's raw memory access is bounded to these buffers
        with sealed.guard():
            audit_memory.set_ranges([storage_key(t) for t in _tensor_args(a, kw)])
    if STATE.light:
        if STATE.tuning and STATE.active:
            # A benchmark launch is not snapshotted: it credits only buffers allocated empty
            # in the call and not written since (anything else, e.g. an output made by glue,
            # would be credited to a kernel that may write nothing), and leaves them marked
            # empty, so a snapshotted launch still poisons them first (device buffers).
            with sealed.guard():
                ptrs = [storage_key(t)[0] for t in _tensor_args(a, kw)]
            lineage.kernel_wrote([p for p in ptrs if p in STATE.fresh], False)
        elif STATE.active:  # signed once the call is over (outside the timer)
            STATE.raw.append((fn, a, kw))
        if STATE.snapshot or _INTERPRETER[0]:  # the interpreter's own copies: not the candidate's
            STATE.in_launch += 1
            box.append(None)
        return
    found = _python_args(a, kw) if hook.armed is not None else []
    if found:
        violation("python_in_kernel", f"a kernel was launched with Python objects: {found[:3]}")
        raise PermissionError("blocked by the evaluation sandbox: Python objects as kernel args")
    if recipe.ACTIVE and not STATE.tuning:  # before the kernel runs: constants as they are
        recipe.ACTIVE[0].on_launch(fn, a, kw)
    entry = raw_entry(fn, a, kw)
    tensors = _tensor_args(a, kw)
    STATE.grid_written = set()
    with sealed.guard():
        rec = Launch(name=entry[0], args=[storage_key(t) for t in tensors])
    if STATE.active:  # signed after the call: a callable grid is evaluated in the launch
        STATE.raw.append((fn, a, kw))
    if len(STATE.launches) < 100_000:
        STATE.launches.append(rec)
    snap = STATE.snapshot and STATE.snapshots < SNAPSHOT_LAUNCHES
    STATE.snapshots += 1 if snap else 0
    snaps = None
    if snap:
        with sealed.own_work(), sealed.guard():
            _poison_fresh(tensors)
            snaps = _snapshot(tensors)
    with sealed.guard():
        STATE.fresh -= {storage_key(t)[0] for t in tensors}
    marker = sealed.marker("launch") if STATE.profiling else None
    STATE.in_launch += 1
    box.append((rec, tensors, snaps, marker))


def _launched(hook: Hook, args: tuple, frame: Any) -> None:
    _key, box, ok = args
    STATE.in_launch -= 1
    if not STATE.in_launch:
        audit_memory.set_ranges([])
    if box[1] is None:  # a light launch
        return
    rec, tensors, snaps, marker = box[1]
    if recipe.ACTIVE:
        recipe.ACTIVE[0].launched(ok)
    if marker is not None:
        sealed.marker_exit(marker)
    if not ok:
        return
    if snaps is not None:
        with sealed.own_work(), sealed.guard():
            if tensors and _TB.device.__get__(tensors[0]).type == "cuda":
                STATE.originals["cuda_sync"]()
            rec.changed = _changed(tensors, snaps)
    if STATE.active:
        written = rec.changed if rec.changed is not None else [p for p, _ in rec.args]
        # what the candidate's grid wrote between the snapshots is not the kernel's
        written = [p for p in written if p not in STATE.grid_written]
        lineage.kernel_wrote(written, rec.changed is not None)
    rec.ok = True


# ---------------------------------------------------------------------------------------------
# Inductor's launchers (KernelBook/KernelLLM output decorated with triton_heuristics)
# ---------------------------------------------------------------------------------------------


def _runner_lead(runner_args: list[str]) -> int | None:
    """Index of the first kernel argument in a launcher's runner call: (grid_0, grid_1, grid_2,
    stream, *kernel args) for the static CUDA launcher; None for any other layout."""
    if list(runner_args[:4]) != ["grid_0", "grid_1", "grid_2", "stream"]:
        return None
    return 4


_STATIC_FIELDS = ("function", "num_warps", "shared", "arg_tys", "has_global_scratch",
                  "has_profile_scratch")  # fmt: skip
# launcher code from strings of inductor_meta beyond the plain grid expressions
_CODE_KEYS = ("fixed_grid", "precomputed_grids", "extra_launcher_args")
_GRID_TYPES = ("Grid1D", "Grid2D", "Grid3D", "Grid2DWithYZOverflow", "BatchMatmulGrid3D",
               "CooperativeReductionGrid", "SplitScanGrid", "MixOrderReductionGrid")  # fmt: skip


def _launch_state(kernel: Any) -> tuple:
    """What the static launcher's `run` reads from its kernel to launch: the CUfunction, its
    launch shape and argument types, and the module whose `_launch_kernel` it calls."""
    impl = kernel.__dict__.get("C_impl", _TRUSTED_RUNNERS.get("static_impl"))
    fields = tuple(kernel.__dict__.get(f) for f in _STATIC_FIELDS)
    return (
        *fields,
        impl,
        getattr(impl, "_launch_kernel", None),
        type(kernel).__dict__.get("C_impl"),
    )


_EXACT = (int, str, bool, types.BuiltinFunctionType, types.MethodDescriptorType)


def _same(a: Any, b: Any) -> bool:
    """`a` is `b`, or both are equal values of exact built-in types (no subclass: its
    comparison would be the candidate's code; a C function looked up again may be a new but
    equal object)."""
    return a is b or (type(a) is type(b) and type(a) in _EXACT and a == b)


def _genuine_runner(result: Any, scope: dict) -> bool:
    """The runner in `scope` is the static CUDA launcher's `run` bound to the kernel that
    `result` (a StaticTritonCompileResult) holds, launching through torch's own C launcher.
    Triton's own launcher (`CudaLauncher`) is not taken: its `launch` is a plain attribute
    whose genuine values vary by Triton version, so its launches stay unrecorded."""
    t, runner = _TRUSTED_RUNNERS, scope.get("runner")
    kernel = getattr(result, "kernel", None)
    if type(result) is not t.get("static_result") or type(kernel) is not t.get("static_kernel"):
        return False
    state = _launch_state(kernel)
    return (
        type(runner) is types.MethodType
        and runner.__self__ is kernel
        and runner.__func__ is t.get("static_run")
        and state[-3:]
        == (t.get("static_impl"), t.get("static_launch"), t.get("static_impl_property"))
    )


def _plain_meta(result: Any) -> str | None:
    """Why `result`'s metadata is not what Inductor prints (None when it is): plain dicts (a
    subclass would see the autotuner's lookups, e.g. the profiler-only ones), a grid type of
    the plain grid expressions (`GridExpr.from_meta` takes any name of the module), no code
    strings (a fixed or precomputed grid, extra launcher arguments) and integer block sizes:
    the launcher compiles these into its code, with the real builtins, past the static
    rules."""
    meta, tmeta = getattr(result, "inductor_meta", None), getattr(result, "compile_meta", None)
    if type(meta) is not dict or (tmeta is not None and type(tmeta) is not dict):
        return "inductor_meta/triton_meta of a type other than dict"
    grid = meta.get("grid_type")
    if type(grid) is not str or grid not in _GRID_TYPES or any(k in meta for k in _CODE_KEYS):
        return f"an Inductor launcher grid from code strings (grid_type {grid!r:.60})"
    kwargs = getattr(getattr(result, "config", None), "kwargs", None)
    if type(kwargs) is not dict or any(type(v) not in (int, bool) for v in kwargs.values()):
        return "an Inductor config whose block sizes are not integers (they become launcher code)"
    return None


def _launcher(hook: Hook, args: tuple, frame: Any) -> None:
    """An Inductor launcher is being built. Metadata that would compile code strings into it
    is refused (`generated_code`). A genuine static runner is swapped for a `runner_entry`
    and its launch state frozen; any other runner is left as it was: its launches go
    unrecorded, so its outputs are not credited to a kernel (the pessimistic side)."""
    key, result, scope, runner_args, box = args
    why = _plain_meta(result)
    if why is not None and hook.armed is not None:
        violation("generated_code", why)
        raise PermissionError(f"blocked by the evaluation sandbox: {why}")
    box.append(_LAUNCHER_CODE[key])
    lead = _runner_lead(runner_args)
    if lead is None or type(scope) is not dict or not _genuine_runner(result, scope):
        return
    runner = scope["runner"]
    name = result.inductor_meta.get("kernel_name")
    rkey = len(_RUNS)
    _RUNS.append(runner)
    _RUNNERS[rkey] = (lead, name if type(name) is str else "inductor_kernel")
    _FROZEN[rkey] = _launch_state(runner.__self__)
    scope["runner"] = stubs.runner_entry(rkey)


def _runner(hook: Hook, args: tuple, frame: Any) -> None:
    """A launch through an Inductor launcher: recorded as a launch (kernel arguments after the
    runner's own, grid from its first three), then the runner runs outside the launch window
    (its code is reachable from the candidate's objects: audited like the candidate's), once
    what it launches is checked to be what it was built with (function, launch shape,
    argument types, torch's C launcher): else `judge_tamper`."""
    key, rargs, box = args
    lead, name = _RUNNERS[key]
    now, frozen = _launch_state(_RUNS[key].__self__), _FROZEN[key]
    if not all(_same(a, b) for a, b in zip(now, frozen, strict=True)):
        violation("judge_tamper", f"the launch of the compiled kernel {name} was changed")
        raise PermissionError("blocked by the evaluation sandbox: a compiled launch was changed")
    _launch(hook, (key, name, tuple(rargs[lead:]), {"grid": tuple(rargs[:3])}, box), frame)
    if len(box) > 1:
        STATE.in_launch -= 1


def _ran(hook: Hook, args: tuple, frame: Any) -> None:
    STATE.in_launch += 1
    _launched(hook, args, frame)


def _replace(owner: Any, attr: str, original: Any, table: list[Any], stub_of: Any) -> None:
    """`owner.attr` becomes the stub `stub_of(key)`, `original` kept in `table` at `key`, and the
    stub is watched for replacement."""
    table.append(original)
    stub = stub_of(len(table) - 1)
    setattr(owner, attr, stub)
    STATE.watched.append((owner, attr, stub))


def install_inductor() -> None:
    """Once the worker imported the Inductor runtime for a candidate, before arming: launchers
    built from now on record their launches (`_launcher`), and CachingAutotuner's config
    benchmarks run in light mode like @triton.autotune's (crediting only buffers allocated
    empty: `_launch`). What a genuine runner is, is taken here, before any candidate ran."""
    from torch._inductor.runtime import triton_heuristics as th

    if _LAUNCHER_CODE or "_gen_launcher_code" not in th.CompileResult.__dict__:
        return
    t = _TRUSTED_RUNNERS
    t["static_result"] = getattr(th, "StaticTritonCompileResult", None)
    try:
        from torch._inductor.runtime import static_triton_launcher as stl

        cls = stl.StaticallyLaunchedCudaKernel
        t["static_kernel"], t["static_run"] = cls, cls.run
        t["static_impl_property"] = cls.__dict__["C_impl"]
        t["static_impl"] = torch._C._StaticCudaLauncher
        t["static_launch"] = torch._C._StaticCudaLauncher._launch_kernel
    except (ImportError, AttributeError, KeyError):
        t.pop("static_result", None)  # no static launch is taken for genuine without them
    code = th.CompileResult.__dict__["_gen_launcher_code"]
    _replace(th.CompileResult, "_gen_launcher_code", code, _LAUNCHER_CODE, stubs.launcher_entry)
    original = th.CachingAutotuner.__dict__.get("benchmark_all_configs")
    if original is not None:
        _replace(
            th.CachingAutotuner, "benchmark_all_configs", original, _BENCHES, stubs.bench_entry
        )


def _tune(hook: Hook, args: tuple, frame: Any) -> None:
    key, box = args
    box.extend((_BENCHES[key], (STATE.light, STATE.tuning)))
    STATE.light = STATE.tuning = True


def _tuned(hook: Hook, args: tuple, frame: Any) -> None:
    _key, box = args
    if len(box) > 1:
        STATE.light, STATE.tuning = box[1]


# ---------------------------------------------------------------------------------------------
# Autotune benchmarks
# ---------------------------------------------------------------------------------------------

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


def _quiet_autotune(hook: Hook) -> None:
    """@triton.autotune benchmarks every config inside the candidate's first forward: time them
    with our own benchmark (the interpreter has none: "0 active drivers") and in light mode
    (launches counted, not recorded: benchmark runs neither credit outputs nor get snapshots).
    Config pre-hooks and everything else stay visible to the profiler audit."""
    from functools import cached_property

    from triton.runtime import autotuner

    cls = autotuner.Autotuner
    bench = _interpreter_bench if _INTERPRETER[0] else _event_bench
    if isinstance(cls.__dict__.get("do_bench"), cached_property):
        key = hook.add_trip(Trip(bench, "judge_tamper", "Autotuner.do_bench", False))
        cls.do_bench = stubs.bench_property(key)
    original = cls.__dict__.get("_bench")
    if original is None:
        return
    _replace(cls, "_bench", original, _BENCHES, stubs.bench_entry)


def install(hook: Hook) -> None:
    from triton.runtime import jit

    _INTERPRETER[0] = os.environ.get("TRITON_INTERPRET") == "1"
    hook.handlers.update(
        {
            "tritonforge.launch": _launch,
            "tritonforge.launched": _launched,
            "tritonforge.tune": _tune,
            "tritonforge.tuned": _tuned,
            "tritonforge.launcher": _launcher,
            "tritonforge.runner": _runner,
            "tritonforge.ran": _ran,
        }
    )
    classes = [jit.JITFunction]
    try:
        from triton.runtime import interpreter

        classes.append(interpreter.InterpretedFunction)
    except ImportError:
        pass
    for cls in classes:
        _replace(cls, "run", cls.run, _RUNS, stubs.launch_entry)
    _quiet_autotune(hook)


# ---------------------------------------------------------------------------------------------
# Caching check: poison the outputs of a first call
# ---------------------------------------------------------------------------------------------


def poison(outputs: list[torch.Tensor], inputs: list[torch.Tensor]) -> set[int]:
    """Overwrite the storages of a first call's outputs (not the inputs') with POISON bytes, so a
    second call cannot hand them back as fresh results. Returns the poisoned storage ptrs.
    `outputs` are exact torch.Tensor objects (sealed.output_tree checked them)."""
    done: set[int] = set()
    with sealed.guard():
        in_ptrs = {storage_key(t)[0] for t in inputs}
        for o in outputs:
            ptr, nbytes = storage_key(o)
            if ptr in done or not nbytes or ptr in in_ptrs or _TB.dtype.__get__(o) is torch.bool:
                continue  # 0xFF is not a valid bool
            sealed.CAP.fill_(sealed.bytes_of(o), POISON)
            done.add(ptr)
    return done


def stale(outputs: list[torch.Tensor], poisoned: set[int]) -> list[int]:
    """Outputs of the repeated call that are a poisoned storage whose bytes are still poison."""
    out = []
    with sealed.guard():
        for i, o in enumerate(outputs):
            if storage_key(o)[0] in poisoned and _TB.numel(o):
                if sealed.CAP.all_equal(sealed.bytes_of(o), POISON):
                    out.append(i)
    return out
