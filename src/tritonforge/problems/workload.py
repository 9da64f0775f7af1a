"""How much work one forward of a problem is, and what that means on the CPU Triton interpreter.

Covers: `measure_workload(src)` (bytes of inputs, outputs and parameters and the FLOPs of one
forward, with the model built and run on the meta device: no memory, no compute),
`interpreter_seconds` (an order-of-magnitude time per call on the CPU interpreter) and
`cpu_warning` (the one-line warning eval-kernel prints when a reference is too large for the
interpreter, naming the way out: the problem's `cpu` size preset). Does not cover: scaling
sources (problems.scaling) or judging.

Rates (`INTERPRETER_BYTES_PER_S`, `INTERPRETER_FLOPS_PER_S`): measured 2026-12 with
`tritonforge eval-kernel --device cpu --json` (phase_seconds) on the 2-core CPU development
machine: the built-in relu solution (BLOCK_SIZE 1024) on 8M fp32 elements took about 13 s per
correctness call (64 MiB in + out, about 5 MB/s); matmul_square's solution at N=512 took about
1.7 s per call (about 1.5e8 FLOP/s). The interpreter's speed depends on each kernel's block
sizes (it pays per program instance), so an estimate is good to a factor of a few, no better.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

INTERPRETER_BYTES_PER_S = 5e6
INTERPRETER_FLOPS_PER_S = 1.5e8
WARN_AFTER_S = 60.0  # estimated interpreter time of all trials worth a warning


@dataclass(frozen=True)
class Workload:
    """One forward: bytes in (inputs), out (outputs), parameters, and FLOPs (matmul/conv)."""

    input_bytes: int
    output_bytes: int
    param_bytes: int
    flops: int

    @property
    def moved_bytes(self) -> int:
        return self.input_bytes + self.output_bytes + self.param_bytes


def _nbytes(x: Any) -> int:
    import torch

    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(_nbytes(v) for v in x)
    if isinstance(x, dict):
        return sum(_nbytes(v) for v in x.values())
    return 0


def run_on_meta(src: str) -> tuple[Any, Any, Any, int]:
    """(model, inputs, outputs, FLOPs) of one forward of reference `src` on the meta device:
    shapes and dtypes without memory or compute. Raises what the source raises."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    ns: dict[str, Any] = {"__name__": "kernelbench_problem"}
    exec(compile(src, "<problem>", "exec"), ns)
    with torch.device("meta"):
        model = ns["Model"](*ns["get_init_inputs"]())
        inputs = ns["get_inputs"]()
        counter = FlopCounterMode(display=False)
        with torch.no_grad(), counter:
            out = model(*inputs)
    return model, inputs, out, int(counter.get_total_flops())


def measure_workload(src: str) -> Workload:
    """Bytes and FLOPs of one forward of reference `src` (see run_on_meta)."""
    model, inputs, out, flops = run_on_meta(src)
    params = sum(_nbytes(t) for t in model.parameters()) + sum(_nbytes(b) for b in model.buffers())
    return Workload(_nbytes(inputs), _nbytes(out), params, flops)


def interpreter_seconds(work: Workload) -> float:
    """Order-of-magnitude seconds of one call on the CPU Triton interpreter."""
    return max(work.moved_bytes / INTERPRETER_BYTES_PER_S, work.flops / INTERPRETER_FLOPS_PER_S)


def _size(n: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def _duration(s: float) -> str:
    return f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.0f} min" if s >= 90 else f"{s:.0f} s"


def builtin_name(path: Path) -> str | None:
    """The built-in problem whose reference file `path` is, if any."""
    from tritonforge.problems.builtin import ROOT, load_builtin

    try:
        rel = path.resolve().relative_to(ROOT)
    except ValueError:
        return None
    for p in load_builtin("cpu"):
        if p.meta.get("file") == rel.as_posix():
            return p.name
    return None


def cpu_warning(
    work: Workload, trials: int, budgets: dict[str, float], reference: Path
) -> str | None:
    """A one-line warning when `trials` calls would take the interpreter long, else None."""
    per_call = interpreter_seconds(work)
    total = per_call * trials
    over = per_call > budgets["compile_s"] or per_call * (trials - 1) > budgets["correctness_s"]
    if total < WARN_AFTER_S and not over:
        return None
    name = builtin_name(reference)
    way_out = (
        f"use the built-in problem at its cpu size: `tritonforge problems show {name} --size cpu "
        f"> {name}_cpu.py` and judge against that file"
        if name
        else "shrink the reference's size constants (see `tritonforge problems scale`)"
    )
    limits = (
        f"budgets: compile {budgets['compile_s']:g} s, correctness {budgets['correctness_s']:g} s"
    )
    work_text = f"moves {_size(work.moved_bytes)}"
    rate = f"about {INTERPRETER_BYTES_PER_S / 1e6:g} MB/s"
    if work.flops / INTERPRETER_FLOPS_PER_S > work.moved_bytes / INTERPRETER_BYTES_PER_S:
        work_text = f"does {work.flops:.2g} FLOPs"
        rate = f"about {INTERPRETER_FLOPS_PER_S:.2g} FLOP/s"
    return (
        f"warning: one call of this reference {work_text}; the CPU Triton interpreter manages "
        f"{rate}, so {trials} trials would take about {_duration(total)} "
        f"({'beyond' if over else 'within'} the {limits}); {way_out}, or run on a GPU"
    )
