"""What the audit runs on the candidate's objects, and how the worker is sealed before import.

Covers:
- `CAP`: tensor functions captured from torch's immutable C base class before any candidate code
  exists (patching `torch.Tensor.detach` through an alias, or a subclass method, changes nothing
  here), and `guard()`, which runs our own tensor code with torch functions disabled and the
  Python dispatch keys excluded (no `__torch_function__`, TorchFunctionMode or dispatch mode of
  the candidate runs inside it);
- `output_tree`: the outputs must be exactly `torch.Tensor`, or an exact tuple/list of them
  (nested at most MAX_DEPTH): anything else could run the candidate's code while it is read;
- profiler markers made with the C-level RecordFunctionFast (its methods cannot be patched) and
  named with a per-forward secret token;
- `seal()`: after arming, the evaluator's modules leave `sys.modules` and `__main__` is replaced,
  so no name path leads to the audit's state (audit_hook.py says which paths remain and how
  they are audited).
Does not cover: the decisions (audit.py, audit_hook.py).
"""

from __future__ import annotations

import sys
import types
from contextlib import nullcontext
from typing import Any

import torch

from tritonforge.evaluation.sandbox.audit_state import STATE
from tritonforge.evaluation.sandbox.captured import token

MAX_DEPTH = 6
_TB = torch._C.TensorBase
_Tensor = torch.Tensor
_type = type
_DisableTorchFunction = torch._C.DisableTorchFunction
_ExcludeKeys = torch._C._ExcludeDispatchKeyGuard
_PY_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.Python) | torch._C.DispatchKeySet(
    torch._C.DispatchKey.PythonTLSSnapshot
)
_RecordFunctionFast = getattr(getattr(torch._C, "_profiler", None), "_RecordFunctionFast", None)
_record_function = torch.autograd.profiler.record_function
_uint8 = torch.uint8


class _Captured:
    """Tensor functions as they were before the candidate was imported."""

    def __init__(self) -> None:
        self.storage = _TB.untyped_storage
        self.storage_ptr = torch.UntypedStorage.data_ptr
        self.storage_nbytes = torch.UntypedStorage.nbytes
        self.detach = _TB.detach
        self.contiguous = _TB.contiguous
        self.clone = _TB.clone
        self.fill_ = _TB.fill_
        self.zero_ = _TB.zero_
        self.eq = _TB.eq
        self.all = _TB.all
        self.item = _TB.item
        self.numel = _TB.numel
        self.set_ = _TB.set_
        self.equal = torch.equal
        self.empty = torch.empty
        self.frombuffer = torch.frombuffer

    def all_equal(self, t: torch.Tensor, value: int) -> bool:
        return bool(self.item(self.all(self.eq(t, value))))


CAP = _Captured()


class guard:
    """Our own tensor code on the candidate's tensors: no Python-level torch overrides run."""

    __slots__ = ("a", "b")

    def __enter__(self) -> None:
        self.a, self.b = _DisableTorchFunction(), _ExcludeKeys(_PY_KEYS)
        self.a.__enter__()
        self.b.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self.b.__exit__(*exc)
        self.a.__exit__(*exc)


def bytes_of(t: torch.Tensor) -> torch.Tensor:
    """A uint8 view of the tensor's whole storage (call under `guard`)."""
    empty = CAP.empty(0, dtype=_uint8, device=_TB.device.__get__(t))
    return CAP.set_(empty, CAP.storage(t))


# ---------------------------------------------------------------------------------------------
# Outputs
# ---------------------------------------------------------------------------------------------


class OutputRejected(Exception):
    """The outputs are not plain tensors (the message says what was found)."""


def output_tree(value: Any, depth: int = 0) -> list[torch.Tensor]:
    """The tensors of `value`, which must be exactly torch.Tensor or an exact tuple/list of
    such values; raises OutputRejected otherwise. Touches nothing but exact built-in types, so
    none of the candidate's code runs here."""
    t = _type(value)
    if t is _Tensor:
        return [value]
    if depth < MAX_DEPTH and (t is tuple or t is list):
        out: list[torch.Tensor] = []
        for v in tuple(value):
            out.extend(output_tree(v, depth + 1))
        return out
    where = "nested too deeply" if t is tuple or t is list else f"of type {t.__qualname__}"
    raise OutputRejected(
        f"forward returned a value {where}: outputs must be torch.Tensor objects (or a tuple "
        "or list of them), not subclasses or other containers"
    )


# ---------------------------------------------------------------------------------------------
# Profiler markers
# ---------------------------------------------------------------------------------------------


def new_token() -> str:
    STATE.token = token(8)
    return STATE.token


def marker(kind: str) -> Any:
    """Enter the profiler marker `tf::<kind>::<token>`; returns what `marker_exit` needs."""
    name = f"tf::{kind}::{STATE.token}"
    m = _RecordFunctionFast(name) if _RecordFunctionFast is not None else _record_function(name)
    m.__enter__()
    return m


def marker_exit(m: Any) -> None:
    m.__exit__(None, None, None)


def own_work() -> Any:
    """Marker around the audit's own ops (snapshots), which the analysis skips."""
    if not STATE.profiling:
        return nullcontext()
    return _Marker("audit")


class _Marker:
    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __enter__(self) -> None:
        self.m = marker(self.kind)

    def __exit__(self, *exc: Any) -> None:
        marker_exit(self.m)


# ---------------------------------------------------------------------------------------------
# Sealing the worker
# ---------------------------------------------------------------------------------------------


def seal() -> int:
    """Remove the evaluator's modules from `sys.modules` (and `__main__`, the fork server's
    module); returns how many were removed. Called once, after the audit is armed and before the
    candidate is imported; the worker keeps its own references."""
    names = [n for n in list(sys.modules) if n == "tritonforge" or n.startswith("tritonforge.")]
    for n in names:
        del sys.modules[n]
    sys.modules["__main__"] = types.ModuleType("__main__")
    return len(names)
