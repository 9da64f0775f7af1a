"""Properties of a problem, not of a candidate: whether it can be judged here at all, and whether
its reference is deterministic.

Covers: `missing_reason` (a library the reference imports is not installed) and
`cannot_run(problem, device, module, init_inputs)`, the one reason a problem cannot run on this
machine or None: a reason the loader recorded (`Problem.meta["cannot_run"]`, e.g. a level-4
model without an offline config), then, on the CPU, the memory it needs: the reference is built
and run once on the meta device (shapes only, no data, no time) to count weights, inputs and
outputs; the judge and the candidate's worker each hold them, so twice that must fit in the
memory available (on a GPU memory admission decides: admission.py, `resource_limit`;
reference.why_not asks it without a ReferenceStore). `determinism` runs the
reference a second time on its first case's inputs; `randomness` does that once per reference
and gives each case of a nondeterministic one the statistics of STAT_RUNS runs.
Does not cover: references that fail when built for real (reference.py raises ReferenceError).
"""

from __future__ import annotations

import ast
import importlib.util
import os
import types
from collections.abc import Callable
from typing import Any

import torch

from tritonforge.config.eval import DEFAULT_TOLERANCES
from tritonforge.evaluation.judge.admission import Footprint, gib
from tritonforge.evaluation.judge.compare import compare, output_bytes, output_stats
from tritonforge.evaluation.sandbox.protocol import flatten_tensors
from tritonforge.types import Problem, Status

STAT_RUNS = 6  # reference runs per case whose statistics judge a nondeterministic problem
USABLE_FRACTION = 0.8  # of the host memory available now, what one problem may need


def missing_reason(problem: Problem) -> str | None:
    """Why the reference cannot even be loaded here: top-level modules it imports that are not
    installed (checked before it is executed)."""
    try:
        tree = ast.parse(problem.reference_src)
    except SyntaxError:
        return None
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            roots.add(node.module.split(".")[0])
    missing = sorted(r for r in roots if importlib.util.find_spec(r) is None)
    if missing:
        return f"the reference imports {', '.join(missing)}, which is not installed here"
    return None


def footprint(module: types.ModuleType, init_inputs: list[Any]) -> Footprint | None:
    """Sizes of one forward on the meta device, or None when the reference cannot run there.
    Run it under rng.seeded: meta tensors draw from no generator, but a call naming a device
    does."""
    try:
        with torch.device("meta"), torch.no_grad():
            model = module.Model(*init_inputs)
            inputs = list(module.get_inputs())
            out = model(*inputs) if isinstance(model, torch.nn.Module) else None
    except Exception:
        return None
    if out is None or not all(t.is_meta for t in flatten_tensors(inputs)):
        return None  # get_inputs built real tensors: sized when they are drawn
    weights = sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))
    inputs_bytes = sum(t.numel() * t.element_size() for t in flatten_tensors(inputs))
    return Footprint(inputs_bytes, output_bytes(out), 0, weights)


def host_available() -> int:
    """Host memory one problem may use: a fraction of what is available now."""
    try:
        with open("/proc/meminfo") as f:
            info = {line.split(":")[0]: line.split()[1] for line in f if ":" in line}
        avail = int(info["MemAvailable"]) * 1024
    except (OSError, KeyError, ValueError, IndexError):
        avail = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return int(USABLE_FRACTION * avail)


def cannot_run(
    problem: Problem, device: str, module: types.ModuleType, init_inputs: list[Any]
) -> str | None:
    """The one reason `problem` cannot be judged on `device` here, or None (libraries the
    source imports are checked before it is loaded: `missing_reason`)."""
    reason = (problem.meta or {}).get("cannot_run")
    if reason:
        return str(reason)
    if device != "cpu":
        return None  # GPU: memory admission (admission.py) answers resource_limit
    fp = footprint(module, init_inputs)
    if fp is None:
        return None
    need = 2 * (fp.weights + fp.inputs + fp.outputs)  # the judge's copy and the worker's
    have = host_available()
    if need > have:
        return (
            f"does not fit: needs about {gib(need)} (weights {gib(fp.weights)}, inputs "
            f"{gib(fp.inputs)}, outputs {gib(fp.outputs)}, held by the judge and by the "
            f"candidate), {gib(have)} usable on cpu"
        )
    return None


def determinism(
    run: Callable[[list[Any]], Any], problem: Problem, inputs: list[Any], expected: Any
) -> str | None:
    """Run the reference a second time on the same inputs: None when it gives the same outputs
    (within the default fp32/fp16/bf16 tolerances), else why not. A reference whose outputs
    differ (dropout in training mode, torch.rand in forward, state kept across calls) is a
    property of the problem: such problems are judged by statistics (compare.compare_stats)."""
    if any(t.is_meta for t in flatten_tensors(expected)):
        return None  # no values to compare (the meta device stands in for a GPU in tests)
    again = run(inputs)
    status, mm, why = compare(
        expected,
        again,
        lambda d: DEFAULT_TOLERANCES.get(d, 1e-4),
        "match",
        problem.atol,
        problem.rtol,
    )
    if status is Status.CORRECT:
        return None
    worst = f" (max |diff| {mm.max_abs_diff:.3g})" if mm and mm.max_abs_diff is not None else ""
    return f"two runs of the reference on the same inputs differ: {why}{worst}"


def randomness(ref: Any, inputs: list[Any], expected: Any) -> list[list[tuple]] | None:
    """On the first case of `ref` (a reference.Reference): the determinism check; for every case
    of a nondeterministic reference, the statistics of STAT_RUNS runs on `inputs`."""
    if not ref.checked:
        ref.nondeterministic = determinism(ref.run, ref.problem, inputs, expected)
        ref.checked = True
    if not ref.nondeterministic:
        return None
    return [output_stats(expected), *(output_stats(ref.run(inputs)) for _ in range(STAT_RUNS - 1))]
