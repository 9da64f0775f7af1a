"""Bounds of the CPU interpreter's memory accesses: a kernel may touch only its own arguments.

Covers: stubs standing in for the raw `load`, `store`, `atomic_cas` and `atomic_rmw` of Triton's
interpreter (the only way an interpreted kernel reads or writes memory), and the hook's check
that every address a kernel touches (masked-off lanes excepted) lies inside the storage of one
of the tensors passed to the launch in progress (`STATE.ranges`, set by the launch recorder).
Without it, a kernel could turn a pointer argument into an integer, add an offset and read or
write any object of the process (the audit's state included) with no audit event; an access
outside a launch is refused the same way. Such an access is what an out-of-bounds bug does too,
so it is reported as `illegal_memory_access` (as on a GPU), not as a reward hack: the access is
refused either way. On a GPU kernels run on the device and this module installs nothing.
Does not cover: the launch recorder (audit_launch.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tritonforge.evaluation.sandbox import stubs
from tritonforge.evaluation.sandbox.audit_hook import Hook
from tritonforge.evaluation.sandbox.audit_state import STATE

# function name -> (index of the pointer array, index of the mask or None, index of the array
# whose itemsize is the access width)
_ACCESS = {
    "load": (0, 1, 2),
    "store": (0, 2, 1),
    "atomic_cas": (0, None, 1),
    "atomic_rmw": (1, 3, 2),
}
_ORIGINALS: list[tuple[Any, tuple[int, int | None, int]]] = []


def set_ranges(keys: list[tuple[int, int]]) -> None:
    """The storages (ptr, nbytes) a launch may touch; an empty list clears them."""
    if not keys:
        STATE.ranges = None
        return
    lo = np.array([p for p, _ in keys], dtype=np.uint64)
    hi = np.array([p + n for p, n in keys], dtype=np.uint64)
    STATE.ranges = (lo, hi)


def _outside(ptrs: Any, mask: Any, width: int) -> bool:
    p = np.asarray(ptrs, dtype=np.uint64).reshape(-1)
    if mask is not None:
        p = p[np.asarray(mask, dtype=bool).reshape(-1)] if np.ndim(mask) else (p if mask else p[:0])
    if p.size == 0:
        return False
    if STATE.ranges is None:
        return True
    lo, hi = STATE.ranges
    end = p + np.uint64(width)
    inside = (p[:, None] >= lo[None, :]) & (end[:, None] <= hi[None, :])
    return not bool(inside.any(axis=1).all())


def _memory(hook: Hook, args: tuple, frame: Any) -> None:
    key, call, box = args
    original, (pi, mi, wi) = _ORIGINALS[key]
    if hook.armed is not None or STATE.bounded:  # a candidate's worker, or the replayer
        width = int(getattr(call[wi], "itemsize", 1) or 1) if wi < len(call) else 1
        mask = call[mi] if mi is not None and mi < len(call) else None
        if _outside(call[pi], mask, width):
            raise RuntimeError(
                "illegal memory access: a kernel read or wrote memory outside the tensors passed "
                "to it (out-of-bounds offsets, or a missing mask)"
            )
    box.append(original)


def install(hook: Hook) -> None:
    """Stand stubs in for the interpreter's memory functions (CPU interpreter only)."""
    try:
        from triton._C.libtriton import interpreter as raw
    except ImportError:
        return
    hook.handlers["tritonforge.memory"] = _memory
    for name, spec in _ACCESS.items():
        if hasattr(raw, name):
            _ORIGINALS.append((getattr(raw, name), spec))
            stub = stubs.memory_entry(len(_ORIGINALS) - 1)
            setattr(raw, name, stub)
            STATE.watched.append((raw, name, stub))
