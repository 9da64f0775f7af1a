"""Whether a problem can be judged here at all, before its reference is built for real.

Covers: `cannot_run(problem, device, module)`: the one reason a problem cannot run on this
machine, or None. In order: a reason the loader recorded (`Problem.meta["cannot_run"]`, e.g. a
level-4 model without an offline config), a library the reference imports that is not
installed, and the memory it needs: the reference is built and run once on the meta device
(shapes only, no data, no time) to count parameters, buffers, inputs and outputs; the judge and
the candidate's worker each hold them, so twice that must fit in the memory this device has.
A reference the meta device cannot run (data-dependent shapes) is not sized here: building it
for real then fails, or not, on its own. Does not cover: concurrent admission of several
evaluations on one GPU (the scheduler), or references that fail when built for real
(reference.py turns those into a ReferenceError too).
"""

from __future__ import annotations

import ast
import importlib.util
import os
import types
from dataclasses import dataclass
from typing import Any

import torch

from tritonforge.evaluation.sandbox.protocol import flatten_tensors
from tritonforge.types import Problem

GIB = float(1 << 30)
# of the device's memory, what one problem may need (the rest: the judge, the worker's runtime)
USABLE_FRACTION = 0.8


@dataclass
class Footprint:
    params: int  # bytes of parameters and buffers
    inputs: int
    outputs: int

    @property
    def total(self) -> int:
        """The judge and the worker each hold the model, the inputs and the outputs."""
        return 2 * (self.params + self.inputs + self.outputs)

    def describe(self) -> str:
        return (
            f"parameters {self.params / GIB:.2f} GiB, inputs {self.inputs / GIB:.2f} GiB, "
            f"outputs {self.outputs / GIB:.2f} GiB, held by the judge and by the candidate"
        )


def missing_imports(src: str) -> list[str]:
    """Top-level modules a source imports that are not installed here."""
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return []
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            roots.add(node.module.split(".")[0])
    return sorted(r for r in roots if importlib.util.find_spec(r) is None)


def _nbytes(value: Any) -> int:
    return sum(t.numel() * t.element_size() for t in flatten_tensors(value))


def footprint(module: types.ModuleType, init_inputs: list[Any]) -> Footprint | None:
    """Sizes of one forward on the meta device, or None when the reference cannot run there.
    The caller holds the RNG lock (get_inputs and Model() draw from the global RNG)."""
    try:
        with torch.device("meta"), torch.no_grad():
            model = module.Model(*init_inputs)
            inputs = list(module.get_inputs())
            out = model(*inputs) if isinstance(model, torch.nn.Module) else None
    except Exception:
        return None
    if out is None or not all(t.is_meta for t in flatten_tensors(inputs)):
        return None  # get_inputs built real tensors: sized when they are drawn
    params = sum(_nbytes(t) for t in (*model.parameters(), *model.buffers()))
    return Footprint(params, _nbytes(inputs), _nbytes(out))


def available_bytes(device: str) -> int:
    """Memory one problem may use on `device`: a fraction of the GPU's memory, or of the host
    memory available now."""
    if device.startswith("cuda"):
        total = torch.cuda.get_device_properties(torch.device(device)).total_memory
        return int(USABLE_FRACTION * total)
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
    source imports are checked before it is loaded: `missing_imports`)."""
    reason = (problem.meta or {}).get("cannot_run")
    if reason:
        return str(reason)
    fp = footprint(module, init_inputs)
    if fp is None:
        return None
    have = available_bytes(device)
    if fp.total > have:
        return (
            f"does not fit: needs about {fp.total / GIB:.1f} GiB ({fp.describe()}), "
            f"{have / GIB:.1f} GiB usable on {device}"
        )
    return None
