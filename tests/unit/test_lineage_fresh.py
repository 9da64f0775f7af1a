"""Which storages count as allocated uninitialised and unwritten in a forward call
(`STATE.fresh`, lineage.py), the ones a snapshotted launch poisons first (audit_launch): an
`empty*` allocation adds its storage, any other write (a copy into it, an `out=` op, a fill)
takes it out, a view adds nothing, and `zeros` is not fresh (its content is defined). Poisoning
itself needs a CUDA device (tests/gpu: the legit corpus' l25 and the field kernels' epilogues);
on the CPU `_poison_fresh` leaves buffers alone (host code may have written them unseen)."""

from __future__ import annotations

import torch

from tritonforge.evaluation.sandbox import audit, audit_launch, lineage
from tritonforge.evaluation.sandbox.audit_state import STATE, Armed

aten = torch.ops.aten


def _ptr(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _op(func, *args, **kwargs):
    result = func(*args, **kwargs)
    lineage._record(func, args, kwargs, result)
    return result


def test_empty_storages_are_fresh_until_written() -> None:
    audit.begin_call({})
    x = torch.randn(8, 8)
    work = _op(aten.empty_like.default, x)
    other = _op(aten.empty.memory_format, [8, 8])
    zeros = _op(aten.zeros.default, [4, 4])
    assert STATE.fresh == {_ptr(work), _ptr(other)}
    _op(aten.view.default, work, [64])  # a view writes nothing
    assert _ptr(work) in STATE.fresh
    _op(aten.copy_.default, work, x)  # written by a copy: no longer fresh
    _op(aten.add.out, x, x, out=other)  # an out= op writes too
    assert STATE.fresh == set() and _ptr(zeros) not in STATE.fresh
    audit.begin_call({})  # a new call starts with none
    assert STATE.fresh == set()


def test_cpu_buffers_are_not_poisoned(monkeypatch) -> None:
    monkeypatch.setattr(STATE, "armed", Armed("c.py", "/tmp"))
    audit.begin_call({})
    x = torch.randn(64)
    work = _op(aten.empty_like.default, x)
    work.copy_(x)  # as numpy through an array interface would: unseen by the dispatcher
    audit_launch._poison_fresh([work])
    assert torch.equal(work, x)
