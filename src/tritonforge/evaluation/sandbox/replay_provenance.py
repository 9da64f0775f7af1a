"""Which output elements the replayed kernels wrote: strict mode's provenance, per element.

Covers: `provenance(model, inputs)`, one extra run of a ReplayModel (trusted replayer) whose
outputs are not compared, only traced: every byte of every storage the call makes or writes
carries two marks, *written in this call* and *kernel data*. An allocation or an op writes
bytes that are not kernel data, unless the op is a copy (contiguous, clone, `copy_`, a cast) of
elements that all are; before each launch, the bytes of its storages that were written in this
call but are not kernel data are filled with a poison byte, and the bytes the launch changes
become kernel data. An output element is credited when any of its bytes is kernel data. So a
kernel must itself write every element of every output: glue may move kernel data, never stand
in for it (a glue copy of the input with one word a kernel rewrote, which a storage-level mark
credits whole, is `output_not_from_kernel`). Poisoning makes a write of the bytes a block held
visible; a kernel whose every write of an element happens to equal the poison in all its bytes
is credited by a second run with another poison. Bytes of constants the call never wrote keep
their contents and are never credited, except those of a constant an output lives in (a
buffer the model keeps across calls), which are poisoned like the call's own.
Does not cover: running a recipe (replay_model.py), the judge's rule (judge/replay.py).
"""

from __future__ import annotations

from typing import Any

import torch

from tritonforge.evaluation.sandbox.glue import base_name
from tritonforge.evaluation.sandbox.protocol import DTYPES
from tritonforge.evaluation.sandbox.recipe_format import Launch, Op, View, flatten
from tritonforge.evaluation.sandbox.replay_model import COPIES as _COPIES
from tritonforge.evaluation.sandbox.replay_model import write_names, write_positions

POISONS = (0xFF, 0x5A)


class _Marks:
    """Per storage id: bool masks over its bytes (written in this call, kernel data)."""

    def __init__(self) -> None:
        self.written: dict[int, torch.Tensor] = {}
        self.kernel: dict[int, torch.Tensor] = {}

    def of(self, sid: int, nbytes: int, device: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if sid not in self.written or self.written[sid].numel() != nbytes:
            self.written[sid] = torch.zeros(nbytes, dtype=torch.bool, device=device)
            self.kernel[sid] = torch.zeros(nbytes, dtype=torch.bool, device=device)
        return self.written[sid], self.kernel[sid]


def _bytes(mask: torch.Tensor, v: View) -> torch.Tensor:
    """A [*shape, itemsize] view of a storage's byte mask (index 0: the storage's first byte,
    as a view's offset counts) covering the elements of view `v`."""
    item = DTYPES[v.dtype].itemsize
    shape = (*v.shape, item)
    strides = (*(s * item for s in v.strides), 1)
    return torch.as_strided(mask, shape, strides, v.offset)


def provenance(model: Any, inputs: list[Any], poison: int = POISONS[0]) -> list[bool]:
    """Per output tensor of the recipe: whether every element holds kernel data."""
    ins = [t for v in inputs for t in _tensors(v)]
    model.reset()
    st: dict[int, torch.Tensor] = dict(model.live)
    marks = _Marks()
    for v in flatten(model.recipe.outputs):  # an output kept in a constant (a buffer reused
        if isinstance(v, View) and v.kind == "st" and v.index in st:  # across calls): its
            marks.of(v.index, st[v.index].numel(), st[v.index].device)[0][:] = True  # bytes too
    for step in model.recipe.steps:
        if isinstance(step, Launch):
            _launch(model, step, st, ins, marks, poison)
        else:
            _op(model, step, st, ins, marks)
    flags = []
    for v in flatten(model.recipe.outputs):
        if not isinstance(v, View):
            continue
        if v.kind != "st" or v.index not in marks.kernel:
            flags.append(_empty(v))
            continue
        kernel = _bytes(marks.kernel[v.index], v)
        flags.append(bool(kernel.any(dim=-1).all()) if kernel.numel() else True)
    return flags


def _empty(v: View) -> bool:
    return any(n == 0 for n in v.shape)


def _storages(step: Launch) -> list[View]:
    out = []
    for x in [*step.args, *(v for _, v in step.kwargs)]:
        for leaf in flatten(x):
            base = getattr(leaf, "base", leaf)
            if isinstance(base, View) and base.kind == "st":
                out.append(base)
    return out


def _launch(model: Any, step: Launch, st: dict, ins: list, marks: _Marks, poison: int) -> None:
    sids = sorted({v.index for v in _storages(step)})
    before = {}
    for s in sids:
        written, kernel = marks.of(s, st[s].numel(), st[s].device)
        st[s][written & ~kernel] = poison  # glue's bytes: the kernel must write them itself
        before[s] = st[s].clone()
    args = [model._value(v, st, ins) for v in step.args]
    kwargs = {k: model._value(v, st, ins) for k, v in step.kwargs}
    model.kernels[step.kernel][tuple(step.grid)](*args, **kwargs)
    if model.device_name != "cpu":
        torch.cuda.synchronize()
    for s in sids:
        changed = before[s] != st[s]
        written, kernel = marks.written[s], marks.kernel[s]
        written |= changed
        kernel |= changed


def _op(model: Any, step: Op, st: dict, ins: list, marks: _Marks) -> None:
    """Run the op; its written bytes become kernel data only for a copy of kernel data."""
    op = model.ops[step.name]
    positions, names = write_positions(op), write_names(op)
    reads: list[View] = []
    writes: list[View] = []
    for i, x in enumerate(step.args):
        into = writes if i in positions else reads
        into += [v for v in flatten(x) if isinstance(v, View)]
    for k, x in step.kwargs:
        into = writes if k in names else reads
        into += [v for v in flatten(x) if isinstance(v, View)]
    carries = (
        base_name(step.name) in _COPIES
        and bool(reads)
        and all(_is_kernel(v, st, marks) for v in reads)
    )
    args = [model._value(v, st, ins) for v in step.args]
    kwargs = {k: model._value(v, st, ins) for k, v in step.kwargs}
    made = model._bind(step.out, op(*args, **kwargs), st)
    for s in made:  # a storage the op made: written as a whole, kernel data at most in its view
        written, kernel = marks.of(s, st[s].numel(), st[s].device)
        written[:] = True
        kernel[:] = False
    results = [v for v in flatten(step.out) if isinstance(v, View)]
    for v in [*writes, *results]:
        if v.kind != "st":
            continue
        written, kernel = marks.of(v.index, st[v.index].numel(), st[v.index].device)
        _bytes(written, v)[...] = True
        _bytes(kernel, v)[...] = carries


def _is_kernel(v: View, st: dict, marks: _Marks) -> bool:
    """Every element of the view holds kernel data (an element: any of its bytes)."""
    if v.kind != "st" or v.index not in marks.kernel:
        return False
    elems = _bytes(marks.kernel[v.index], v).any(dim=-1)
    return bool(elems.all()) if elems.numel() else True


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if type(value) in (list, tuple):
        return [t for v in value for t in _tensors(v)]
    return []
