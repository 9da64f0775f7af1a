"""Recording one forward's device work as a recipe (recipe_format.py), in the candidate's worker.

Covers: `Recorder`, active during one audited correctness call when the judge asks for a recipe:
the launch recorder (audit_launch.py) hands it every Triton launch of the call before the kernel
runs (`on_launch`, then `launched` once the grid is known), the lineage's dispatch mode
(lineage.py) every aten op that wrote a storage (`on_op`), and the worker the call's outputs
(`finish`). Each tensor becomes a view of the call's inputs, of a storage an earlier step made
(an op's result), or of a storage that existed before the call: a *constant*, whose bytes are
copied when the call first uses it (parameters, cached layouts, workspaces). The recipe and the
constants' bytes go to the judge.

This runs in the candidate's process, so the recipe is the candidate's word: the judge parses
it strictly and a trusted replayer re-runs it with the candidate's kernels alone on fresh hidden
inputs (judge/replay.py); nothing here is believed. A forward whose work cannot be written down
(an argument of a type no recipe can hold, too many steps) gives an `error` instead, which the
judge reports as a candidate it cannot replay.
Does not cover: the format and its parse (recipe_format.py), replaying (replay_model.py).
"""

from __future__ import annotations

from typing import Any

import torch

from tritonforge.evaluation.sandbox import sealed
from tritonforge.evaluation.sandbox.protocol import DTYPE_NAMES, pack
from tritonforge.evaluation.sandbox.recipe_format import MAX_STEPS, MAX_STORAGES

_TB = torch._C.TensorBase
_Tensor = torch.Tensor
_type = type
MAX_CONSTANT_BYTES = 32 << 30
_ALIGN = 64
_FORMATS = {
    torch.contiguous_format: "contiguous_format",
    torch.channels_last: "channels_last",
    torch.channels_last_3d: "channels_last_3d",
    torch.preserve_format: "preserve_format",
}
_LAUNCH_SKIP = {"grid", "warmup"}
ACTIVE: list[Recorder] = []  # the recorder of the call in progress (at most one)


class Unrecordable(Exception):
    """The forward did something a recipe cannot hold (the message says what)."""


class Recorder:
    def __init__(self, inputs: list[torch.Tensor], device: str):
        self.device = device
        self.inputs: list[tuple[int, int, int]] = []  # (storage ptr, data ptr, extent bytes)
        with sealed.guard():
            for t in inputs:
                self.inputs.append((_storage(t)[0], _TB.data_ptr(t), _extent(t)))
        self.sids: dict[int, int] = {}  # storage ptr -> storage id
        self.sizes: list[int] = []  # storage id -> nbytes
        self.constants: dict[int, tuple[torch.Tensor, int]] = {}  # sid -> (bytes copy, host)
        self.steps: list[dict[str, Any]] = []
        self.pending: tuple[dict[str, Any], Any] | None = None  # a launch waiting for its grid
        self.error = ""

    # -- values ----------------------------------------------------------------------------------
    def view(self, t: torch.Tensor, new_storages: set[int] | None = None) -> dict[str, Any]:
        """The recipe view of `t`; with `new_storages`, a storage ptr in it is an op's result."""
        dtype = DTYPE_NAMES.get(_TB.dtype.__get__(t))
        if dtype is None:
            raise Unrecordable(f"a tensor of dtype {_TB.dtype.__get__(t)}")
        if _TB.layout.__get__(t) is not torch.strided:
            raise Unrecordable(f"a tensor of layout {_TB.layout.__get__(t)}")
        ptr, nbytes = _storage(t)
        data = _TB.data_ptr(t)
        shape = list(_TB.size(t))
        strides = list(_TB.stride(t))
        if any(s < 0 for s in strides):
            raise Unrecordable("a tensor with negative strides")
        if new_storages is None or ptr not in new_storages:
            for i, (sp, d0, extent) in enumerate(self.inputs):
                if sp == ptr and d0 <= data and data + _extent(t) <= d0 + max(extent, 1):
                    return {"t": ["in", i, data - d0, dtype, shape, strides]}
        sid = self.sids.get(ptr)
        if new_storages is not None and ptr in new_storages:
            sid = self._new_storage(ptr, nbytes)
            return {"t": ["st", sid, data - ptr, dtype, shape, strides], "new": nbytes}
        if sid is None:
            sid = self._constant(t, ptr, nbytes)
        return {"t": ["st", sid, data - ptr, dtype, shape, strides]}

    def _new_storage(self, ptr: int, nbytes: int) -> int:
        if len(self.sizes) >= MAX_STORAGES:
            raise Unrecordable(f"more than {MAX_STORAGES} storages")
        sid = len(self.sizes)
        self.sids[ptr] = sid
        self.sizes.append(nbytes)
        return sid

    def _constant(self, t: torch.Tensor, ptr: int, nbytes: int) -> int:
        """A storage that existed before the call: its bytes as of now."""
        held = sum(c.numel() for c, _ in self.constants.values())
        if held + nbytes > MAX_CONSTANT_BYTES:
            raise Unrecordable(f"constants beyond {MAX_CONSTANT_BYTES >> 30} GiB")
        sid = self._new_storage(ptr, nbytes)
        host = int(_TB.device.__get__(t).type == "cpu" and self.device != "cpu")
        self.constants[sid] = (sealed.CAP.clone(sealed.bytes_of(t)), host)
        return sid

    def value(self, x: Any, new_storages: set[int] | None = None, depth: int = 0) -> Any:
        t = _type(x)
        if isinstance(x, _Tensor):
            return self.view(x, new_storages)
        if t is bool:
            return {"b": x}
        if t is int:
            return {"i": x}
        if t is float:
            return {"f": x if x == x and abs(x) != float("inf") else str(x)}
        if x is None:
            return {"n": 0}
        if t is str:
            return {"s": x}
        if t is torch.dtype:
            if x not in DTYPE_NAMES:
                raise Unrecordable(f"dtype {x}")
            return {"dt": DTYPE_NAMES[x]}
        if t is torch.device:
            return {"dev": int(x.type == "cpu" and self.device != "cpu")}
        if t is torch.memory_format:
            return {"mf": _FORMATS[x]}
        if t is torch.layout and x is torch.strided:
            return {"ly": "strided"}
        if (t is list or t is tuple) and depth < 5:
            return {"l" if t is list else "tu": [self.value(v, new_storages, depth + 1) for v in x]}
        return self._triton_value(x, depth)

    def _triton_value(self, x: Any, depth: int) -> Any:
        t = _type(x)
        mod = getattr(t, "__module__", "") or ""
        if t.__name__ == "constexpr" and mod.startswith("triton"):
            return self.value(x.value, None, depth + 1)
        if t.__name__ == "dtype" and mod.startswith("triton"):
            return {"tld": str(x)}
        if t.__name__ == "TensorDescriptor" and mod.startswith("triton"):
            base = self.view(x.base)
            base["t"][4], base["t"][5] = list(x.shape), list(x.strides)
            return {"td": [base, list(x.block_shape)]}
        raise Unrecordable(f"an argument of type {t.__qualname__}")

    # -- steps -----------------------------------------------------------------------------------
    def on_launch(self, fn: Any, args: tuple, kwargs: dict) -> None:
        """A launch of `fn` before the kernel runs (constants are copied as they are now)."""
        if self.error:
            return
        try:
            name = getattr(getattr(fn, "fn", None), "__name__", None)
            if type(name) is not str:
                raise Unrecordable(f"a launch of {type(fn).__qualname__}")
            with sealed.guard():
                step = {
                    "launch": name,
                    "grid": [],
                    "args": [self.value(a) for a in args],
                    "kwargs": {
                        k: self.value(v) for k, v in kwargs.items() if k not in _LAUNCH_SKIP
                    },
                }
            self.pending = (step, kwargs.get("grid"))
        except Exception as exc:  # Unrecordable, or a tensor with no plain storage
            self.error = f"kernel launch: {exc}"[:500]

    def launched(self, ok: bool) -> None:
        """The pending launch ran: its grid is known now."""
        pending, self.pending = self.pending, None
        if pending is None or self.error or not ok:
            return
        step, grid = pending
        grid = getattr(grid, "last", grid)  # audit_launch._Grid: what the callable returned
        if _type(grid) not in (tuple, list) or not all(_type(g) is int for g in grid):
            self.error = f"a launch grid of type {_type(grid).__qualname__}"
            return
        step["grid"] = list(grid)
        self._add(step)

    def on_op(self, name: str, args: tuple, kwargs: dict, result: Any) -> None:
        """An aten op that wrote a storage, called as `name(*args, **kwargs)` -> `result`."""
        if self.error:
            return
        try:
            with sealed.guard():
                seen = {_storage(t)[0] for v in (*args, *kwargs.values()) for t in _tensors(v)}
                made = {_storage(t)[0] for t in _tensors(result)} - seen
                step = {
                    "op": name,
                    "args": [self.value(a) for a in args],
                    "kwargs": {k: self.value(v) for k, v in kwargs.items()},
                    "out": self.value(result, made),
                }
            self._add(step)
        except Exception as exc:
            self.error = f"{name}: {exc}"[:500]

    def _add(self, step: dict[str, Any]) -> None:
        if len(self.steps) >= MAX_STEPS:
            self.error = f"more than {MAX_STEPS} steps"
        else:
            self.steps.append(step)

    # -- the result ------------------------------------------------------------------------------
    def finish(self, out: Any) -> tuple[dict[str, Any], list[int]]:
        """({"recipe": ..., "blob": descriptor} or {"error": why}, fds) for the reply."""
        if not self.error:
            try:
                with sealed.guard():
                    outputs = self.value(out)
            except Exception as exc:
                self.error = f"outputs: {exc}"[:500]
        if self.error:
            return {"error": self.error[:500]}, []
        table, offset = [], 0
        for sid, (copy, host) in self.constants.items():
            table.append([sid, copy.numel(), offset, host])
            offset += (copy.numel() + _ALIGN - 1) // _ALIGN * _ALIGN
        with sealed.guard():
            blob = sealed.CAP.empty(max(offset, 1), dtype=torch.uint8, device="cpu")
            for (_, nbytes, at, _), (copy, _) in zip(table, self.constants.values()):
                if nbytes:
                    _TB.copy_(_TB.__getitem__(blob, slice(at, at + nbytes)), copy)
            desc, fd = pack([blob])
        recipe = {
            "inputs": len(self.inputs),
            "storages": table,
            "blob": offset,
            "steps": self.steps,
            "outputs": outputs,
        }
        return {"recipe": recipe, "blob": desc}, [fd]


def _storage(t: torch.Tensor) -> tuple[int, int]:
    s = sealed.CAP.storage(t)
    return sealed.CAP.storage_ptr(s), sealed.CAP.storage_nbytes(s)


def _extent(t: torch.Tensor) -> int:
    """Bytes from the tensor's first element to one past its last."""
    if not _TB.numel(t):
        return 0
    last = sum((n - 1) * s for n, s in zip(_TB.size(t), _TB.stride(t)))
    return (last + 1) * _TB.element_size(t)


def _tensors(value: Any, depth: int = 0) -> list[torch.Tensor]:
    if isinstance(value, _Tensor):
        return [value]
    if _type(value) in (list, tuple) and depth < 5:
        return [t for v in value for t in _tensors(v, depth + 1)]
    return []


def begin(inputs: list[torch.Tensor], device: str) -> Recorder:
    rec = Recorder(inputs, device)
    ACTIVE[:] = [rec]
    return rec


def end() -> None:
    ACTIVE[:] = []
