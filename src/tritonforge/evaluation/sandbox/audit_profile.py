"""Reading one audited forward's profile: which aten ops the candidate ran, with what shapes.

Covers: `analyse(events, token)` over the events of the profiler that ran around one forward
(the legacy RecordFunction profiler on every device; Kineto-style lists work too): the forward
marker is matched among CPU-side events only (a Kineto profile on CUDA repeats a user marker
once per GPU stream annotation, which made honest candidates look like profiler tampering), one
such marker must exist; under it every top-level aten op is counted as compute or glue (an op's
children are its implementation), our own snapshot marker is skipped, and compute ops found
inside one of our launch markers mean Python ran PyTorch inside a kernel. Compute ops are also
reported with their input shapes and dtypes, aggregated, so the judge can estimate the work
PyTorch did (judge/work.py): the hybrid share is work, not time.
Does not cover: starting the profiler (audit.py) or deciding anything (judge/decide.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tritonforge.evaluation.sandbox.glue import classify_op

MAX_SHAPE_KEYS = 256  # distinct (op, shapes) entries reported per forward


@dataclass
class Profile:
    ops: dict[str, int] = field(default_factory=dict)  # compute op -> count
    glue: dict[str, int] = field(default_factory=dict)  # glue op -> count
    # [op, input shapes, input dtypes, count] per distinct compute op signature
    shapes: list[list[Any]] = field(default_factory=list)
    in_launch: list[str] = field(default_factory=list)  # compute ops under a launch marker
    roots: int = 0  # forward markers found on the CPU side


def _on_cpu(ev: Any) -> bool:
    """A CPU-side event (GPU stream annotations of a user marker repeat its name)."""
    dt = getattr(ev, "device_type", None)
    return dt is None or str(dt).endswith("CPU")


def forward_roots(events: list[Any], token: str) -> list[Any]:
    name = f"tf::forward::{token}"
    return [e for e in events if e.name == name and _on_cpu(e)]


def _in_launch_compute(launch_event: Any) -> list[str]:
    found, stack = [], list(launch_event.cpu_children)
    while stack:
        ev = stack.pop()
        if ev.name.startswith("aten::"):
            if classify_op(ev.name) != "glue":
                found.append(ev.name)
            continue
        stack.extend(ev.cpu_children)
    return found


def _dims(x: Any) -> list[Any]:
    return [list(s) if isinstance(s, (list, tuple)) else [] for s in (x or [])]


def analyse(events: list[Any], token: str) -> Profile:
    """The Profile of one forward (see the module docstring); `roots != 1` means tampering."""
    roots = forward_roots(events, token)
    prof = Profile(roots=len(roots))
    if len(roots) != 1:
        return prof
    launch_name, own_name = f"tf::launch::{token}", f"tf::audit::{token}"
    keyed: dict[str, list[Any]] = {}
    stack = list(roots[0].cpu_children)
    while stack:
        ev = stack.pop()
        if ev.name == own_name:
            continue
        if ev.name == launch_name:
            prof.in_launch += _in_launch_compute(ev)
            continue
        if ev.name.startswith("aten::"):
            glue = classify_op(ev.name) == "glue"
            bucket = prof.glue if glue else prof.ops
            bucket[ev.name] = bucket.get(ev.name, 0) + 1
            if not glue:
                shapes = _dims(getattr(ev, "input_shapes", None))
                dtypes = [str(d) for d in (getattr(ev, "input_dtypes", None) or [])]
                key = f"{ev.name}{shapes}{dtypes}"
                if key in keyed:
                    keyed[key][3] += 1
                elif len(keyed) < MAX_SHAPE_KEYS:
                    keyed[key] = [ev.name, shapes, dtypes, 1]
            continue  # an op's children are its implementation
        stack.extend(ev.cpu_children)
    prof.shapes = list(keyed.values())
    return prof
