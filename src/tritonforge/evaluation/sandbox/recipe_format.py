"""The launch recipe: the device work of one `forward` as data, parsed once into frozen records.

A recipe is what the candidate's worker says its forward did: which storages it read that existed
before the call (its *constants*: parameters, cached layouts, workspaces, with their bytes as of
first use), the sequence of steps (Triton launches of its own `@triton.jit` kernels, aten ops
seen by the dispatcher) on views of the call's inputs and of those storages, and which views it
returned. The worker's recipe is untrusted: the judge parses it here (`parse_recipe`, strict:
anything malformed or impossible is `RecipeError`, which the judge turns into a reward hack),
checks which steps the mode allows (judge/replay.py) and hands the re-encoded records to a
trusted replayer (sandbox/replay_model.py), which runs only these steps with the candidate's
kernels alone on fresh hidden inputs. A forged recipe then either computes the right answer with
the candidate's own kernels (the credit is deserved) or fails.

Wire form (JSON): `{"inputs": N, "storages": [[sid, nbytes, blob_offset, host], ...] (constants),
"blob": bytes of all constants, "steps": [...], "outputs": VALUE}`; a step is `{"launch": NAME,
"grid": [g0, g1?, g2?], "args": [VALUE...], "kwargs": {NAME: VALUE}}` or `{"op":
"aten::NAME.OVERLOAD", "args": [...], "kwargs": {...}, "out": VALUE}`. VALUE is one of
`{"t": [KIND, INDEX, OFFSET, DTYPE, SHAPE, STRIDES]}` (a view: KIND "in" = the call's input INDEX,
OFFSET bytes from its first element; KIND "st" = storage INDEX, OFFSET bytes from its start), the
same with `"new": NBYTES` (an op's result in a storage it made: defines storage INDEX, an id not
used before), `{"i": int}`, `{"f": float | "nan" | "inf" | "-inf"}`, `{"b": bool}`, `{"n": 0}`
(None), `{"s": str}`, `{"dt": torch dtype name}`, `{"tld": Triton dtype name}`, `{"dev": 0}` (the
device; 1: host memory beside a GPU), `{"mf": memory format}`, `{"ly": "strided"}`, `{"l": [VALUE...]}` (list), `{"tu":
[...]}` (tuple), `{"td": [VALUE tensor, [block shape]]}` (a Triton host TensorDescriptor).
Does not cover: recording (recipe.py), replaying (replay_model.py), what a mode allows
(judge/replay.py).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Union

from tritonforge.evaluation.sandbox.protocol import DTYPES

MAX_STEPS = 20_000
MAX_STORAGES = 4096
MAX_VALUE_NODES = 2_000_000  # every VALUE node of a recipe, summed
MAX_DIMS = 8
MAX_DEPTH = 6
MAX_NAME = 200
MAX_TEXT = 4096  # a string argument
MEMORY_FORMATS = ("contiguous_format", "channels_last", "channels_last_3d", "preserve_format")
_OP_NAME = re.compile(r"^aten::[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)?$")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TL_DTYPE = re.compile(r"^[a-z0-9]+$")
ITEMSIZE = {name: dt.itemsize for name, dt in DTYPES.items()}


class RecipeError(ValueError):
    """A recipe that does not parse, or states something impossible."""


@dataclass(frozen=True)
class View:
    """A tensor view: of the call's input `index` ("in") or of storage `index` ("st")."""

    kind: str
    index: int
    offset: int  # bytes: from the input's first element, or from the storage's start
    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    new: int | None = None  # an op result in a storage it made: that storage's bytes

    def extent(self) -> int:
        """Bytes from the view's first element to one past its last (0 when empty)."""
        if any(s == 0 for s in self.shape):
            return 0
        last = sum((n - 1) * st for n, st in zip(self.shape, self.strides))
        return (last + 1) * ITEMSIZE[self.dtype]


@dataclass(frozen=True)
class Scalar:
    """A plain value: kind one of i f b n s dt tld dev mf ly; value its Python form."""

    kind: str
    value: Any


@dataclass(frozen=True)
class Seq:
    kind: str  # "l" or "tu"
    items: tuple[Value, ...]


@dataclass(frozen=True)
class Descriptor:
    """A Triton host TensorDescriptor over `base` with `block` as its block shape."""

    base: View
    block: tuple[int, ...]


Value = Union[View, Scalar, Seq, Descriptor]


@dataclass(frozen=True)
class Launch:
    kernel: str
    grid: tuple[int, ...]
    args: tuple[Value, ...]
    kwargs: tuple[tuple[str, Value], ...]


@dataclass(frozen=True)
class Op:
    name: str
    args: tuple[Value, ...]
    kwargs: tuple[tuple[str, Value], ...]
    out: Value


Step = Union[Launch, Op]


@dataclass(frozen=True)
class Recipe:
    inputs: int
    # (sid, nbytes, offset in the blob, 1 if it lives in host memory on a GPU worker else 0)
    constants: tuple[tuple[int, int, int, int], ...]
    blob_bytes: int
    steps: tuple[Step, ...]
    outputs: Value

    def launches(self) -> list[Launch]:
        return [s for s in self.steps if isinstance(s, Launch)]

    def ops(self) -> list[Op]:
        return [s for s in self.steps if isinstance(s, Op)]


# ---------------------------------------------------------------------------------------------
# Parsing (judge and replayer)
# ---------------------------------------------------------------------------------------------


def _int(x: Any, what: str, lo: int = 0, hi: int = 2**62) -> int:
    if type(x) is not int or not lo <= x <= hi:
        raise RecipeError(f"{what}: expected an integer in [{lo}, {hi}], got {x!r:.60}")
    return x


def _ints(x: Any, what: str, lo: int, hi: int, most: int = MAX_DIMS) -> tuple[int, ...]:
    if type(x) is not list or len(x) > most:
        raise RecipeError(f"{what}: expected a list of at most {most} integers")
    return tuple(_int(v, what, lo, hi) for v in x)


class _Parser:
    """One recipe's parse: storage sizes defined so far, a budget of value nodes."""

    def __init__(self, inputs: int, sizes: dict[int, int]):
        self.inputs = inputs
        self.sizes = sizes  # sid -> nbytes, constants and op results defined so far
        self.nodes = 0

    def view(self, body: Any, new: Any) -> View:
        if type(body) is not list or len(body) != 6:
            raise RecipeError("a tensor view needs [kind, index, offset, dtype, shape, strides]")
        kind, index, offset, dtype, shape, strides = body
        if kind not in ("in", "st") or dtype not in DTYPES:
            raise RecipeError(f"tensor view of kind {kind!r:.20} / dtype {dtype!r:.20}")
        v = View(
            kind,
            _int(index, "view index", 0, MAX_STORAGES if kind == "st" else 10_000),
            _int(offset, "view offset", 0, 2**50),
            dtype,
            _ints(shape, "view shape", 0, 2**40),
            _ints(strides, "view strides", 0, 2**40),
        )
        if len(v.shape) != len(v.strides):
            raise RecipeError("a view's shape and strides differ in length")
        if v.offset % ITEMSIZE[dtype]:
            raise RecipeError("a view's offset is not a multiple of its element size")
        if kind == "in":
            if new is not None or index >= self.inputs:
                raise RecipeError(f"input view {index} of {self.inputs} inputs")
            return v
        if new is not None:  # an op's result: defines the next storage
            nbytes = _int(new, "new storage bytes", 0, 2**50)
            if index in self.sizes:
                raise RecipeError(f"storage {index} defined twice")
            self.sizes[index] = nbytes
            v = View(v.kind, v.index, v.offset, v.dtype, v.shape, v.strides, nbytes)
        if index not in self.sizes:
            raise RecipeError(f"storage {index} used before it is defined")
        if v.offset + v.extent() > self.sizes[index]:
            raise RecipeError(f"a view reaches past the end of storage {index}")
        return v

    def value(self, x: Any, depth: int = 0, results: bool = False) -> Value:
        self.nodes += 1
        if self.nodes > MAX_VALUE_NODES or depth > MAX_DEPTH:
            raise RecipeError("recipe values nested too deep or too many")
        if type(x) is not dict or len(x) not in (1, 2):
            raise RecipeError(f"a value must be a one-key object, got {str(x)[:60]}")
        if "t" in x:
            if len(x) == 2 and (not results or "new" not in x):
                raise RecipeError("only an op's result may define a storage")
            return self.view(x["t"], x.get("new"))
        if len(x) != 1:
            raise RecipeError(f"a value must be a one-key object, got {str(x)[:60]}")
        ((kind, body),) = x.items()
        if kind in ("l", "tu"):
            if type(body) is not list or len(body) > 4096:
                raise RecipeError("a list value must be a list of at most 4096 values")
            return Seq(kind, tuple(self.value(v, depth + 1, results) for v in body))
        if kind == "td":
            if type(body) is not list or len(body) != 2 or type(body[0]) is not dict:
                raise RecipeError("a tensor descriptor needs [tensor, block shape]")
            base = self.value(body[0], depth + 1)
            if not isinstance(base, View):
                raise RecipeError("a tensor descriptor's base must be a tensor view")
            return Descriptor(base, _ints(body[1], "descriptor block", 1, 2**20))
        return Scalar(kind, _scalar(kind, body))

    def named(self, x: Any, what: str) -> tuple[tuple[str, Value], ...]:
        if type(x) is not dict or len(x) > 256:
            raise RecipeError(f"{what} must be an object of at most 256 names")
        out = []
        for k, v in x.items():
            if type(k) is not str or not _IDENT.match(k) or len(k) > MAX_NAME:
                raise RecipeError(f"{what}: bad name {k!r:.40}")
            out.append((k, self.value(v)))
        return tuple(out)

    def args(self, x: Any) -> tuple[Value, ...]:
        if type(x) is not list or len(x) > 512:
            raise RecipeError("args must be a list of at most 512 values")
        return tuple(self.value(v) for v in x)

    def step(self, x: Any) -> Step:
        if type(x) is not dict:
            raise RecipeError("a step must be an object")
        if set(x) == {"launch", "grid", "args", "kwargs"}:
            name = x["launch"]
            if type(name) is not str or not name.isidentifier() or len(name) > MAX_NAME:
                raise RecipeError(f"bad kernel name {name!r:.40}")
            grid = _ints(x["grid"], "grid", 0, 2**31 - 1, most=3)
            if not grid:
                raise RecipeError("a launch needs a grid")
            return Launch(name, grid, self.args(x["args"]), self.named(x["kwargs"], "kwargs"))
        if set(x) == {"op", "args", "kwargs", "out"}:
            name = x["op"]
            if type(name) is not str or not _OP_NAME.match(name) or len(name) > MAX_NAME:
                raise RecipeError(f"bad op name {name!r:.60}")
            args, kwargs = self.args(x["args"]), self.named(x["kwargs"], "kwargs")
            return Op(name, args, kwargs, self.value(x["out"], results=True))
        raise RecipeError(f"unknown step with keys {sorted(x)[:6]}")


def _scalar(kind: str, body: Any) -> Any:
    if kind == "i" and type(body) is int and -(2**63) <= body < 2**64:
        return body
    if kind == "f":
        if type(body) is float and math.isfinite(body):
            return body
        if type(body) is int and abs(body) < 2**63:
            return float(body)
        if body in ("nan", "inf", "-inf"):
            return float(body)
    if kind == "b" and type(body) is bool:
        return body
    if kind == "n" and body == 0 and type(body) is int:
        return None
    if kind == "s" and type(body) is str and len(body) <= MAX_TEXT:
        return body
    if kind == "dt" and body in DTYPES:
        return body
    if kind == "tld" and type(body) is str and _TL_DTYPE.match(body) and len(body) <= 16:
        return body
    if kind == "dev" and body in (0, 1) and type(body) is int:
        return body
    if kind == "mf" and body in MEMORY_FORMATS:
        return body
    if kind == "ly" and body == "strided":
        return body
    raise RecipeError(f"bad value {kind!r:.8}: {body!r:.60}")


def parse_recipe(obj: Any, blob_bytes: int | None = None) -> Recipe:
    """The recipe `obj` (decoded JSON) as frozen records, or RecipeError. `blob_bytes`: the size
    of the constants' bytes actually received (None: take the recipe's word, the replayer's
    case, whose recipe the judge has parsed)."""
    if type(obj) is not dict or set(obj) != {"inputs", "storages", "blob", "steps", "outputs"}:
        keys = sorted(obj)[:8] if type(obj) is dict else type(obj).__name__
        raise RecipeError(f"a recipe has keys inputs, storages, blob, steps, outputs: {keys}")
    inputs = _int(obj["inputs"], "inputs", 0, 10_000)
    blob = _int(obj["blob"], "blob", 0, 2**50)
    if blob_bytes is not None and blob > blob_bytes:
        raise RecipeError(f"the constants' bytes ({blob_bytes}) are fewer than stated ({blob})")
    table = obj["storages"]
    if type(table) is not list or len(table) > MAX_STORAGES:
        raise RecipeError(f"storages must be a list of at most {MAX_STORAGES}")
    sizes: dict[int, int] = {}
    constants = []
    for entry in table:
        if type(entry) is not list or len(entry) != 4:
            raise RecipeError(f"bad constant storage entry {str(entry)[:60]}")
        sid, nbytes, offset, host = _ints(entry, "storage entry", 0, 2**50, most=4)
        _int(sid, "storage id", 0, MAX_STORAGES)
        if sid in sizes or offset + nbytes > blob or host > 1:
            raise RecipeError(f"bad constant storage entry {str(entry)[:60]}")
        sizes[sid] = nbytes
        constants.append((sid, nbytes, offset, host))
    steps = obj["steps"]
    if type(steps) is not list or len(steps) > MAX_STEPS:
        raise RecipeError(f"steps must be a list of at most {MAX_STEPS}")
    p = _Parser(inputs, sizes)
    parsed = tuple(p.step(s) for s in steps)
    outputs = p.value(obj["outputs"])
    if not any(isinstance(v, View) for v in flatten(outputs)):
        raise RecipeError("a recipe must return at least one tensor")
    return Recipe(inputs, tuple(constants), blob, parsed, outputs)


def flatten(v: Value) -> list[Value]:
    """Every leaf of a value tree (views, scalars, descriptors), in order."""
    if isinstance(v, Seq):
        return [x for item in v.items for x in flatten(item)]
    return [v]


# ---------------------------------------------------------------------------------------------
# Encoding (worker and judge)
# ---------------------------------------------------------------------------------------------


def encode_value(v: Value) -> dict[str, Any]:
    if isinstance(v, View):
        body = [v.kind, v.index, v.offset, v.dtype, list(v.shape), list(v.strides)]
        return {"t": body, "new": v.new} if v.new is not None else {"t": body}
    if isinstance(v, Seq):
        return {v.kind: [encode_value(x) for x in v.items]}
    if isinstance(v, Descriptor):
        return {"td": [encode_value(v.base), list(v.block)]}
    if v.kind == "f" and not math.isfinite(v.value):
        return {"f": str(v.value)}
    if v.kind == "n":
        return {"n": 0}
    return {v.kind: v.value}


def encode_recipe(r: Recipe) -> dict[str, Any]:
    """The JSON form of a parsed recipe (what the judge sends the replayer)."""
    steps: list[dict[str, Any]] = []
    for s in r.steps:
        args = [encode_value(a) for a in s.args]
        kwargs = {k: encode_value(v) for k, v in s.kwargs}
        if isinstance(s, Launch):
            steps.append({"launch": s.kernel, "grid": list(s.grid), "args": args, "kwargs": kwargs})
        else:
            steps.append({"op": s.name, "args": args, "kwargs": kwargs, "out": encode_value(s.out)})
    return {
        "inputs": r.inputs,
        "storages": [list(c) for c in r.constants],
        "blob": r.blob_bytes,
        "steps": steps,
        "outputs": encode_value(r.outputs),
    }
