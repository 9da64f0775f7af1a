"""A correctness call's outputs and inputs, read by the worker with no candidate code running.

Covers: `copy_out` (inside the audited scope: the outputs, already checked to be plain tensors by
sealed.output_tree, are written into the judge's shared output buffer or a fresh memfd, with
torch's own functions captured before the candidate was imported and no Python-level override
active), and after the scope `facts` (inputs changed in place, outputs aliasing an input,
broadcast outputs, provenance, stale outputs of the caching check, the call's launch
signature) and `input_ptrs`. Everything here runs under sealed.guard().
Does not cover: the protocol's layout (protocol.py) or the decisions (judge/decide.py).
"""

from __future__ import annotations

from typing import Any

import torch

from tritonforge.evaluation.sandbox import audit, sealed
from tritonforge.evaluation.sandbox.audit_launch import storage_key
from tritonforge.evaluation.sandbox.captured import sha256
from tritonforge.evaluation.sandbox.protocol import flatten_tensors, pack, pack_into

_TB = torch._C.TensorBase
MAX_SIGNATURE_LINES = 32  # of a call's launch signature, sent for the judge's messages


def copy_out(out: Any, shared_out: torch.Tensor | None) -> tuple[dict[str, Any], list[int]]:
    """(descriptor, fds): the outputs written into `shared_out` when they fit, else a memfd."""
    with sealed.guard():
        desc = pack_into(out, shared_out) if shared_out is not None else None
        if desc is not None:
            desc["shared"] = True
            return desc, []
        desc, fd = pack(out, seal=False)
        return desc, [fd]


def clean_copies(inputs: list[Any]) -> list[list[torch.Tensor]]:
    """Private copies of the input tensors, made before forward sees them."""
    with sealed.guard():
        return [[sealed.CAP.clone(t) for t in flatten_tensors(v)] for v in inputs]


def input_ptrs(inputs: list[Any]) -> dict[int, int]:
    """Data pointer of each input tensor -> the index of its argument."""
    with sealed.guard():
        return {_TB.data_ptr(t): i for i, v in enumerate(inputs) for t in flatten_tensors(v)}


def _raw(t: torch.Tensor) -> torch.Tensor:
    """Bytes of a tensor's values (NaN-safe equality)."""
    if not _TB.numel(t):
        return t
    return _TB.view(_TB.reshape(_TB.contiguous(t), (-1,)), torch.uint8)


def _mutated(inputs: list[Any], clean: list[list[torch.Tensor]]) -> list[int]:
    out = []
    for i, (a, before) in enumerate(zip(inputs, clean)):
        for x, y in zip(flatten_tensors(a), before):
            if _TB.size(x) != _TB.size(y) or not sealed.CAP.equal(_raw(x), _raw(y)):
                out.append(i)
                break
    return out


def _overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    if _TB.device.__get__(a) != _TB.device.__get__(b) or not _TB.numel(a) or not _TB.numel(b):
        return False
    (a0, an), (b0, bn) = storage_key(a), storage_key(b)
    return a0 < b0 + bn and b0 < a0 + an


def signature_digest(lines: list[str]) -> str:
    return sha256("\n".join(lines).encode()).hexdigest()[:16]


def facts(
    inputs: list[Any],
    clean: list[list[torch.Tensor]],
    outs: list[torch.Tensor],
    rec: audit.ForwardRecord,
    poisoned: set[int] | None,
) -> dict[str, Any]:
    """What the judge needs to know about one audited call (see the module docstring)."""
    with sealed.guard():
        in_tensors = [t for v in inputs for t in flatten_tensors(v)]
        lines = audit.call_signature([_TB.data_ptr(o) for o in outs])
        return {
            "mutated": _mutated(inputs, clean),
            "aliased": [i for i, o in enumerate(outs) if any(_overlaps(o, x) for x in in_tensors)],
            "provenance": audit.provenance(outs, rec),
            "expanded": [i for i, o in enumerate(outs) if 0 in _TB.stride(o) and _TB.numel(o) > 1],
            "repeat": poisoned is not None,
            "stale": audit.stale(outs, poisoned) if poisoned is not None else [],
            "signature": signature_digest(lines),
            "signature_lines": lines[:MAX_SIGNATURE_LINES],
        }


def call_digest(outs: list[torch.Tensor]) -> tuple[str, int]:
    """(signature digest, launches) of a light call once its outputs are known."""
    with sealed.guard():
        lines = audit.call_signature([_TB.data_ptr(o) for o in outs])
    return signature_digest(lines), len(lines)
