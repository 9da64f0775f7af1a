"""The trusted replayer's model: a recipe run with the candidate's kernels alone.

Covers: `load_kernels` (the judge's kernel module, judge/replay_kernels.py, imported from a file
in the replayer's scratch directory with restricted builtins: its imports may name only Triton,
`math` and Inductor's `triton_helpers`), and `ReplayModel`, an nn.Module whose `forward(*inputs)`
runs the recipe's steps on views of the given inputs and of its own storages: the constants
(copies of the bytes the candidate's worker sent, every one restored from a pristine copy by
`reset()` before every call, so no state survives from one call to the next),
and the storages the steps make. A storage an uninitialised allocation makes (`torch.empty`
and kin: its bytes are undefined) is made by `reset()` instead, outside any timed region, and
filled with POISON, once the first call has shown its size and device: otherwise the caching
allocator hands a timed call the block of an earlier one with that call's results in it, and a
kernel that recognises its inputs there could skip its work in every timed call (timed calls
all get the same inputs) while every check, on fresh inputs, sees it work. A launch runs the kernel module's function of that name with
the recipe's grid, arguments and options; an op runs `torch.ops.aten` with the recipe's
arguments. No other candidate code exists here: the process is a worker forked into the sandbox
(the same isolation as a candidate's), whose audit is not armed. Every view is bounds-checked
against its storage before it is made. Strict mode's per-element provenance runs the same
steps traced (replay_provenance.py).
Does not cover: which steps a mode allows (judge/replay.py), the wire format (recipe_format.py).
"""

from __future__ import annotations

import builtins
import importlib.util
import os
import types
from typing import Any

import torch

from tritonforge.evaluation.sandbox.glue import LAYOUT, UNINITIALISED, base_name
from tritonforge.evaluation.sandbox.protocol import DTYPES
from tritonforge.evaluation.sandbox.recipe_format import (
    Descriptor,
    Launch,
    Op,
    Recipe,
    Scalar,
    Seq,
    Value,
    View,
)

SAFE_BUILTINS = frozenset(
    {"range", "min", "max", "len", "int", "float", "bool", "abs", "isinstance", "print", "tuple"}
    | {"list", "zip", "enumerate", "round", "pow", "divmod", "all", "any", "sum", "reversed"}
    | {"slice", "True", "False", "None", "ValueError", "AssertionError", "RuntimeError"}
    | {"ImportError", "ModuleNotFoundError", "AttributeError"}  # guarded imports' handlers
)
IMPORTABLE = ("triton", "math", "torch._inductor.runtime")  # roots a kernel module may import
# ops that carry their input's data on to their output: kernel data stays kernel data
COPIES = frozenset(LAYOUT)
POISON = 0xFF  # the bytes of a fresh uninitialised storage (NaN in every float dtype)


class ReplayError(Exception):
    """The recipe cannot be run here (the message says why)."""


def _restricted_import(name: str, globals: Any = None, locals: Any = None,
                       fromlist: Any = (), level: int = 0) -> Any:  # fmt: skip
    if level or not any(name == r or name.startswith(r + ".") for r in IMPORTABLE):
        raise ImportError(f"the replayed kernel module may not import {name!r}")
    if name.startswith("torch.") and (
        name != "torch._inductor.runtime.triton_helpers"
        and set(fromlist or ()) - {"triton_helpers"}
    ):
        raise ImportError(f"the replayed kernel module may not import {name!r}")
    return builtins.__import__(name, globals, locals, fromlist, level)


def load_kernels(path: str, source: str) -> types.ModuleType:
    """The kernel module `source`, written to `path` (Triton reads a kernel's source from its
    file) and imported with only SAFE_BUILTINS and a restricted `__import__`."""
    with open(path, "w") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location("tf_replay_kernels", path)
    if spec is None or spec.loader is None:
        raise ReplayError("the kernel module could not be loaded")
    mod = importlib.util.module_from_spec(spec)
    safe = {k: getattr(builtins, k) for k in SAFE_BUILTINS if hasattr(builtins, k)}
    safe["__import__"] = _restricted_import
    safe["__build_class__"] = builtins.__build_class__  # (no class in the module; Triton's own)
    mod.__dict__["__builtins__"] = safe
    spec.loader.exec_module(mod)
    return mod


class ReplayModel(torch.nn.Module):
    def __init__(self, recipe: Recipe, kernels: types.ModuleType, blob: torch.Tensor, device: str):
        super().__init__()
        self.recipe, self.device_name = recipe, device
        self.kernels = {}
        for step in recipe.launches():
            fn = kernels.__dict__.get(step.kernel)
            if type(fn).__name__ not in ("JITFunction", "InterpretedFunction"):
                raise ReplayError(f"no @triton.jit kernel named {step.kernel!r} in the source")
            self.kernels[step.kernel] = fn
        self.ops = {s.name: _op(s.name) for s in recipe.ops()}
        self.pristine: dict[int, torch.Tensor] = {}
        self.live: dict[int, torch.Tensor] = {}
        # uninitialised allocations: storage id -> (bytes, device) seen on the first call, and
        # the poisoned storage `reset()` made for the next call
        self.fresh: dict[int, tuple[int, torch.device]] = {}
        self.prepared: dict[int, torch.Tensor] = {}
        for sid, nbytes, offset, host in recipe.constants:
            where = "cpu" if host else device
            self.pristine[sid] = blob[offset : offset + nbytes].to(where, copy=True)
            self.live[sid] = self.pristine[sid].clone()

    def reset(self) -> None:
        """Every constant back to the bytes the recipe gave (not timed). All of them: an op may
        write a tensor its schema does not say it writes (batch norm's running statistics)."""
        for sid, live in self.live.items():
            live.copy_(self.pristine[sid])
        self.prepared = {}  # (the last call's blocks go back to the allocator first)
        for sid, (nbytes, device) in self.fresh.items():
            self.prepared[sid] = torch.full((nbytes,), POISON, dtype=torch.uint8, device=device)

    def forward(self, *inputs: Any) -> Any:
        return self._run(list(inputs))

    # -- running ---------------------------------------------------------------------------------
    def inputs_of(self, inputs: list[Any]) -> list[torch.Tensor]:
        ins = [t for v in inputs for t in _tensors(v)]
        if len(ins) != self.recipe.inputs:
            raise ReplayError(f"{len(ins)} input tensors, the recipe has {self.recipe.inputs}")
        return ins

    def _run(self, inputs: list[Any]) -> Any:
        ins = self.inputs_of(inputs)
        st: dict[int, torch.Tensor] = dict(self.live)
        for step in self.recipe.steps:
            args = [self._value(v, st, ins) for v in step.args]
            kwargs = {k: self._value(v, st, ins) for k, v in step.kwargs}
            if isinstance(step, Launch):
                self.kernels[step.kernel][tuple(step.grid)](*args, **kwargs)
            elif not self._take_prepared(step, st):
                made = self._bind(step.out, self.ops[step.name](*args, **kwargs), st)
                if _uninitialised(step):
                    self.fresh.update({s: (st[s].numel(), st[s].device) for s in made})
        return self._value(self.recipe.outputs, st, ins)

    def _take_prepared(self, step: Op, st: dict) -> bool:
        """An uninitialised allocation whose poisoned storage `reset()` made: bound, not run."""
        out = step.out
        if not _uninitialised(step) or not isinstance(out, View) or out.index not in self.prepared:
            return False
        st[out.index] = self.prepared.pop(out.index)
        return True

    def _bind(self, out: Value, result: Any, st: dict) -> list[int]:
        """Storages of an op's result in the recipe's terms; returns the storage ids it made."""
        if isinstance(out, Seq):
            if type(result) not in (list, tuple) or len(result) != len(out.items):
                raise ReplayError("an op's result does not match the recipe's")
            return [s for o, r in zip(out.items, result) for s in self._bind(o, r, st)]
        if not isinstance(out, View) or out.new is None:
            return []
        if not isinstance(result, torch.Tensor):
            raise ReplayError("an op returned no tensor where the recipe has one")
        item = result.element_size()
        same = (
            result.untyped_storage().nbytes() == out.new
            and result.storage_offset() * item == out.offset
            and tuple(result.stride()) == out.strides
            and tuple(result.shape) == out.shape
        )
        if same:
            st[out.index] = torch.empty(0, dtype=torch.uint8, device=result.device).set_(
                result.untyped_storage()
            )
        else:  # another layout than the worker's: the worker's layout, in a storage of ours
            st[out.index] = torch.zeros(out.new, dtype=torch.uint8, device=result.device)
            self._view(out, st, []).copy_(result)
        return [out.index]

    # -- values ----------------------------------------------------------------------------------
    def _value(self, v: Value, st: dict, ins: list) -> Any:
        if isinstance(v, View):
            return self._view(v, st, ins)
        if isinstance(v, Seq):
            items = [self._value(x, st, ins) for x in v.items]
            return items if v.kind == "l" else tuple(items)
        if isinstance(v, Descriptor):
            from triton.tools.tensor_descriptor import TensorDescriptor

            base = self._view(v.base, st, ins)
            return TensorDescriptor(base, list(base.shape), list(base.stride()), list(v.block))
        return self._scalar(v)

    def _scalar(self, v: Scalar) -> Any:
        if v.kind == "dt":
            return DTYPES[v.value]
        if v.kind == "tld":
            import triton.language as tl

            return tl.dtype(v.value)
        if v.kind == "dev":
            return torch.device("cpu" if v.value else self.device_name)
        if v.kind == "mf":
            return getattr(torch, v.value)
        if v.kind == "ly":
            return torch.strided
        return v.value

    def _view(self, v: View, st: dict, ins: list) -> torch.Tensor:
        if v.kind == "in":
            if v.index >= len(ins):
                raise ReplayError(f"input {v.index} of {len(ins)}")
            base = ins[v.index]
            storage = base.untyped_storage()
            start = base.storage_offset() * base.element_size() + v.offset
            room = _extent(base) - v.offset  # the input's own bytes, not its whole storage
        else:
            base = st.get(v.index)
            if base is None:
                raise ReplayError(f"storage {v.index} does not exist at this step")
            storage = base.untyped_storage()
            start = base.storage_offset() + v.offset
            room = base.numel() - v.offset
        item = DTYPES[v.dtype].itemsize
        if v.extent() > room or start % item:
            raise ReplayError(f"a view of {v.kind} {v.index} reaches outside its storage")
        return torch.empty(0, dtype=DTYPES[v.dtype], device=base.device).set_(
            storage, start // item, v.shape, v.strides
        )


def _op(name: str) -> Any:
    """torch.ops.aten.NAME.OVERLOAD for 'aten::NAME.OVERLOAD' ('default' when none)."""
    base, _, overload = name.split("::", 1)[1].partition(".")
    try:
        return getattr(getattr(torch.ops.aten, base), overload or "default")
    except (AttributeError, RuntimeError):
        raise ReplayError(f"no aten op {name}") from None


def _uninitialised(step: Op) -> bool:
    return base_name(step.name) in UNINITIALISED


def write_positions(op: Any) -> set[int]:
    args = op._schema.arguments
    return {i for i, a in enumerate(args) if a.alias_info is not None and a.alias_info.is_write}


def write_names(op: Any) -> set[str]:
    return {
        a.name for a in op._schema.arguments if a.alias_info is not None and a.alias_info.is_write
    }


def _extent(t: torch.Tensor) -> int:
    """Bytes from the tensor's first element to one past its last."""
    if t.numel() == 0:
        return 0
    return (sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1) * t.element_size()


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if type(value) in (list, tuple):
        return [t for v in value for t in _tensors(v)]
    return []


def scratch_path(name: str) -> str:
    return os.path.join(os.getcwd(), name)
