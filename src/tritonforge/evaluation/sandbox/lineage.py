"""Output provenance: which storages hold data written by a custom kernel during this forward.

Covers: the hook's side of `stubs.Lineage`, a TorchDispatchMode active during audited forwards:
per storage pointer, whether its current content came from a Triton kernel (the launch recorder
marks the buffers a launch changed) or was copied by allowed glue (clone, contiguous,
`.to(dtype)`, `copy_`) from such a storage; allocation and constant fills reset it; compute ops
never set it. `provenance(outputs)` turns that into per-output facts for decide.py. It also logs
each compute op in order (`STATE.compute_log`: whether all it read was kernel data, launches
before it), from which decide.py recognises a PyTorch epilogue after the kernels; storages
allocated uninitialised and not written since (`STATE.fresh`: audit_launch poisons them before a
snapshotted launch).

Why a dispatch mode is safe here even though a candidate can disable dispatch modes: this layer
only grants provenance, never hides anything; switching it off makes outputs look un-written and
the candidate is rejected. PyTorch compute is caught by the profiler audit, not by this mode.
Does not cover: the launch recorder (audit.py) or the decisions (decide.py).
"""

from __future__ import annotations

from typing import Any

import torch

from tritonforge.evaluation.sandbox import recipe
from tritonforge.evaluation.sandbox.audit_state import STATE
from tritonforge.evaluation.sandbox.glue import ALLOCATION, UNINITIALISED, classify_op
from tritonforge.evaluation.sandbox.sealed import CAP


def _tensors(value: Any, out: list[torch.Tensor]) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        out.append(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _tensors(v, out)
    elif isinstance(value, dict):
        for v in value.values():
            _tensors(v, out)
    return out


def _ptr(t: torch.Tensor) -> int:
    try:
        return CAP.storage_ptr(CAP.storage(t))
    except Exception:  # meta/sparse tensors have no plain storage
        return 0


MAX_COMPUTE_LOG = 64


def _record(func: Any, args: tuple, kwargs: dict, result: Any) -> bool:
    """Provenance of one op's writes; whether it wrote a storage (a view or a metadata query
    writes none)."""
    schema = func._schema
    written: set[int] = set()
    read: set[int] = set()
    big_reads: list[int] = []  # storages of the non-scalar tensors read (scalars are constants)
    for i, a in enumerate(schema.arguments):
        value = kwargs[a.name] if a.name in kwargs else (args[i] if i < len(args) else None)
        tensors = _tensors(value, [])
        ptrs = {_ptr(t) for t in tensors}
        if a.alias_info is not None and a.alias_info.is_write:
            written |= ptrs
        else:
            read |= ptrs
            big_reads += [_ptr(t) for t in tensors if CAP.numel(t) > 1]
    if classify_op(schema.name) == "compute" and len(STATE.compute_log) < MAX_COMPUTE_LOG:
        reads_kernel = bool(big_reads) and all(STATE.derived.get(p, False) for p in big_reads)
        STATE.compute_log.append((schema.name, reads_kernel, len(STATE.launches)))
    inputs = written | read
    written |= {p for p in (_ptr(t) for t in _tensors(result, [])) if p not in inputs}
    written.discard(0)
    read.discard(0)
    if not written:
        return False  # a view or a metadata query: no storage got new content
    if STATE.in_grid:  # inside a launch's snapshots: not the kernel's writes
        STATE.grid_written |= written
    name = schema.name
    base = name.split("::", 1)[-1]
    if base in UNINITIALISED:
        STATE.fresh |= written
    else:
        STATE.fresh -= written
    copies_kernel_data = (
        classify_op(name) == "glue"
        and base not in ALLOCATION
        and bool(read)
        and all(STATE.derived.get(p, False) for p in read)
    )
    for p in written:
        STATE.derived[p] = copies_kernel_data
    return True


def on_dispatch(hook: Any, args: tuple, frame: Any) -> None:
    """Handler of the `tritonforge.dispatch` event: one aten op the candidate ran."""
    func, fargs, kwargs, result = args
    if STATE.active and not STATE.in_launch:
        try:
            wrote = _record(func, fargs, kwargs, result)
        except Exception:  # provenance is best effort; a missing record means "not derived"
            wrote = True
        if wrote and recipe.ACTIVE and not STATE.tuning:
            recipe.ACTIVE[0].on_op(func.name(), fargs, kwargs, result)


def kernel_wrote(ptrs: list[int], snapshotted: bool) -> None:
    """After a launch: its changed buffers now hold kernel data. Without a snapshot, only buffers
    allocated during this forward are credited (never the inputs)."""
    for p in ptrs:
        if snapshotted or p in STATE.derived:
            STATE.derived[p] = True


def provenance(outputs: list[torch.Tensor], tracked: bool) -> list[dict[str, Any]]:
    """Per output: numel, whether a successful launch received its storage, whether its content
    came from a kernel (None when lineage was not tracked)."""
    facts = []
    for o in outputs:
        ptr = _ptr(o)
        passed = any(x.ok and any(p == ptr for p, _ in x.args) for x in STATE.launches)
        facts.append(
            {
                "numel": o.numel(),
                "launched_on": passed,
                "from_kernel": STATE.derived.get(ptr, False) if tracked else None,
            }
        )
    return facts
