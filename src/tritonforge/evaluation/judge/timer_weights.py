"""The judge's reference weights, handed to the device's timing process instead of a second build.

Covers: `collect` (a reference model's parameters and buffers by name, every name of a tied
tensor pointing at one copy; None when the model is not a module or holds a plain tensor
attribute, directly or in a list, tuple or dict, which only a full build reproduces; deeper ones
are caught in the process: a meta tensor left, or a first call that fails) and `offer` (what goes with a `ref_load`:
the names, and the tensors through a shared device buffer or a sealed memfd).
Why: KernelBench initialises a reference on the CPU; a 32768 x 32768 nn.Linear takes 7-9 s of
single-threaded CPU there, and the timing process is one process serving every evaluation's
timings, so a second build stalled them all. The timing process builds `Model` on the meta
device and puts these tensors in place (sandbox/reference_host.py); whatever it cannot match,
it builds in full as before.
The judge's model is the one its trials ran: only the forward's own changes to buffers (e.g.
batch norm's running statistics in training mode) differ from a fresh build, which does not
change what a timed call computes or how long it takes.
Does not cover: the request itself (ref_timer.py), the transfer (transport.py, protocol.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from tritonforge.evaluation.judge.transport import Parcel, export_tensors, shared_parcel
from tritonforge.evaluation.sandbox.protocol import DTYPE_NAMES, MAX_TENSORS, pack, packed_size
from tritonforge.evaluation.sandbox.reference_host import attribute_tensors


@dataclass
class Weights:
    """A model's tensors by name: `index[i]` is the tensor of `names[i]`, a parameter when
    `params[i]` (else a buffer)."""

    names: list[str]
    index: list[int]
    params: list[bool]
    tensors: list[torch.Tensor]

    def spec(self) -> dict[str, Any]:
        return {"names": self.names, "index": self.index, "params": self.params}


def collect(model: Any) -> Weights | None:
    """`model`'s parameters and buffers, or None when they do not make up all its tensors."""
    if not isinstance(model, torch.nn.Module) or loose_tensors(model):
        return None
    w = Weights([], [], [], [])
    seen: dict[int, int] = {}
    named = [
        *((n, t, True) for n, t in model.named_parameters(remove_duplicate=False)),
        *((n, t, False) for n, t in model.named_buffers(remove_duplicate=False)),
    ]
    for name, t, is_param in named:
        if id(t) not in seen:
            seen[id(t)] = len(w.tensors)
            w.tensors.append(t.detach())
        w.names.append(name)
        w.index.append(seen[id(t)])
        w.params.append(is_param)
    return w if w.tensors else None


def fits_the_wire(tensors: list[torch.Tensor]) -> bool:
    """What protocol.py can carry in one descriptor (at most MAX_TENSORS tensors, of its dtypes)
    and is worth a buffer (some bytes); else the timing process builds the model itself (a
    level-3 CNN's batch norms alone exceed the count)."""
    return (
        0 < len(tensors) <= MAX_TENSORS
        and all(t.dtype in DTYPE_NAMES for t in tensors)
        and packed_size(tensors) > 0
    )


def loose_tensors(model: torch.nn.Module) -> list[str]:
    """Names of tensors a module holds outside its parameters and buffers (plain attributes,
    also inside a list, tuple or dict attribute)."""
    return attribute_tensors(model)


def offer(model: Any, device: str, shared: bool) -> Parcel:
    """What a `ref_load` carries of `model`'s weights: through a shared device buffer (`shared`:
    one device-to-device copy; the process keeps the mapping as its weights), else a sealed
    memfd (the process copies them into its own memory); nothing when `collect` finds none."""
    w = collect(model)
    if w is None or not fits_the_wire(w.tensors):
        return Parcel()
    if shared and device != "cpu":
        buf, desc = export_tensors(device, w.tensors)
        return shared_parcel(
            device, buf, lambda sh: {"weights": {**w.spec(), "desc": desc, "shared": sh}}
        )
    desc, fd = pack(w.tensors)
    return Parcel({"weights": {**w.spec(), "desc": desc}}, [fd])
