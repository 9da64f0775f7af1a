"""Size presets and scaling of KernelBench-format sources by rewriting module-level constants.

Covers: `rewrite_constants` (set named module-level integer/float constants, keeping the rest of
the file byte-identical), `size_constants` (which constants are sizes and which are structural)
and the default budgets. Does not cover: scaling problems to a factor or an element budget
(problems.scaling, whose search and validation run in child processes, problems.scale_worker) or
executing sources (see evaluation.reference and problems.scale_worker).

Default CPU budget (`DEFAULT_ELEMENT_BUDGET` = 2**18 elements, `DEFAULT_FLOPS_PER_ELEMENT` = 2**10):
a scaled problem has at most 2**18 input elements (1 MiB of fp32), at most as many parameter
and output elements, and at most 2**28 matmul/conv FLOPs per forward (counted on the meta
device). At that size a reference forward takes a few milliseconds to ~0.1 s on one CPU core,
and a Triton-interpreter candidate (numpy per program instance) stays within seconds.
"""

from __future__ import annotations

import ast
import math
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tritonforge.logging_setup import get_logger

__all__ = [
    "DEFAULT_ELEMENT_BUDGET",
    "DEFAULT_FLOPS_PER_ELEMENT",
    "SizeSpec",
    "SizingError",
    "module_constants",
    "rewrite_constants",
    "size_constants",
]

log = get_logger(__name__)

DEFAULT_ELEMENT_BUDGET = 2**18
DEFAULT_FLOPS_PER_ELEMENT = 2**10
SCALER_VERSION = 1  # bump when the search changes, to invalidate cached results


class SizingError(ValueError):
    """A source whose constants cannot be rewritten as asked."""


def module_constants(src: str) -> dict[str, Any]:
    """Module-level `NAME = <literal or simple arithmetic>` assignments, evaluated in order."""
    tree = ast.parse(src)
    env: dict[str, Any] = {}
    for node in tree.body:
        for name, value_node in _bindings(node):
            try:
                env[name] = _eval_const(value_node, env)
            except SizingError:
                continue
    return env


def _bindings(node: ast.AST) -> list[tuple[str, ast.expr]]:
    """(name, value node) of `A = v`, chained `A = B = v`, or unpacking `A, B = v1, v2`."""
    if not isinstance(node, ast.Assign):
        return []
    if all(isinstance(t, ast.Name) for t in node.targets):
        return [(t.id, node.value) for t in node.targets]  # type: ignore[attr-defined]
    target = node.targets[0]
    if (
        len(node.targets) == 1
        and isinstance(target, (ast.Tuple, ast.List))
        and isinstance(node.value, (ast.Tuple, ast.List))
        and len(target.elts) == len(node.value.elts)
        and all(isinstance(t, ast.Name) for t in target.elts)
    ):
        return [(t.id, v) for t, v in zip(target.elts, node.value.elts, strict=True)]  # type: ignore[attr-defined]
    return []


_BINOPS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Div: lambda a, b: a / b,
    ast.Pow: lambda a, b: a**b,
    ast.Mod: lambda a, b: a % b,
}


def _eval_const(node: ast.AST, env: dict[str, Any]) -> Any:
    """Evaluate literals, names of earlier constants, tuples/lists and + - * / // ** %."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, bool, str)):
        return node.value
    if isinstance(node, ast.Name) and node.id in env:
        return env[node.id]
    if isinstance(node, (ast.Tuple, ast.List)):
        vals = [_eval_const(e, env) for e in node.elts]
        return tuple(vals) if isinstance(node, ast.Tuple) else vals
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval_const(node.operand, env)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return _BINOPS[type(node.op)](_eval_const(node.left, env), _eval_const(node.right, env))
    raise SizingError(f"not a constant expression: {ast.dump(node)[:80]}")


def rewrite_constants(src: str, overrides: dict[str, Any]) -> str:
    """Return `src` with each module-level `NAME = ...` in `overrides` set to the given literal.

    Raises SizingError naming any override key that has no module-level assignment.
    """
    if not overrides:
        return src
    tree = ast.parse(src)
    lines = src.splitlines(keepends=True)
    found: set[str] = set()
    edits: list[tuple[int, int, int, int, str]] = []
    for node in tree.body:
        binds = _bindings(node)
        hit = [(n, v) for n, v in binds if n in overrides and n not in found]
        if not hit:
            continue
        found.update(n for n, _ in hit)
        if len(binds) == 1 or binds[0][1] is not binds[1][1]:  # one value node per name
            for n, v in hit:
                edits.append(
                    (
                        v.lineno,
                        v.col_offset,
                        v.end_lineno or v.lineno,
                        v.end_col_offset or 0,
                        repr(overrides[n]),
                    )
                )
            continue
        v = node.value  # type: ignore[attr-defined]
        hit_names = {n for n, _ in hit}
        texts = [
            repr(overrides[n]) if n in hit_names else ast.get_source_segment(src, v)
            for n, _ in binds
        ]
        if len(set(texts)) == 1:  # chained `h = w = 256` keeping one value: edit the value only
            edits.append(
                (v.lineno, v.col_offset, v.end_lineno or v.lineno, v.end_col_offset or 0, texts[0])
            )
        else:  # chained, now with different values: `h = 128; w = 64` on the same line
            text = "; ".join(f"{n} = {t}" for (n, _), t in zip(binds, texts, strict=True))
            edits.append(
                (
                    node.lineno,
                    node.col_offset,
                    node.end_lineno or node.lineno,
                    node.end_col_offset or 0,
                    text,
                )
            )
    missing = set(overrides) - found
    if missing:
        raise SizingError(f"no module-level assignment for {sorted(missing)}")
    for l0, c0, l1, c1, text in sorted(edits, reverse=True):
        # ast offsets count UTF-8 bytes, not characters
        head = lines[l0 - 1].encode()[:c0].decode()
        tail = lines[l1 - 1].encode()[c1:].decode()
        lines[l0 - 1 : l1] = [head + text + tail]
    return "".join(lines)


# --------------------------------------------------------------------------------------------
# Which constants are sizes
# --------------------------------------------------------------------------------------------

# Names that never scale: layer geometry, axes, divisibility anchors and numeric parameters.
_STRUCTURAL = re.compile(
    r"kernel|stride|pad|dilation|group|head|axis|eps|momentum|dropout|prob|pool|return|"
    r"scale|factor|slope|value|min|max|clamp|div|mult|constant|weight|bias|margin|shift|"
    r"offset|alpha|beta|gamma|temperature|threshold|lambd|_dim$|^p$"
)
_BATCH = re.compile(r"batch")
_ANCHOR = re.compile(r"group|head")  # channel-like sizes divisible by these stay divisible
_CHANNEL_LIKE = re.compile(r"channel|feature|hidden|embed|input_size|output_size")
_AXIS_DIM_MAX = 8  # `dim = 1` is an axis, `dim = 8192` is a size


class SizeSpec(BaseModel):
    """One scalable module-level constant: an int, or a literal tuple of ints (`input_shape`)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    value: int | tuple[int, ...]
    multiple: int = Field(1, description="New values stay multiples of this (groups, heads).")
    floor: int = Field(1, description="Never shrink below this.")
    odd: bool = Field(False, description="Original was odd (irregular shape): keep it odd.")


def _is_size_name(name: str, value: int | tuple[int, ...]) -> bool:
    low = name.lower()
    if low == "dim":
        return isinstance(value, int) and value > _AXIS_DIM_MAX
    if _STRUCTURAL.search(low):
        return False
    if isinstance(value, tuple):
        return low.endswith(("shape", "size"))
    return True


def _literal_assignments(src: str) -> dict[str, Any]:
    """Module-level constants whose value uses no names (so rewriting them is safe)."""
    tree = ast.parse(src)
    out: dict[str, Any] = {}
    for node in tree.body:
        for name, value_node in _bindings(node):
            if name in out or any(isinstance(n, ast.Name) for n in ast.walk(value_node)):
                continue
            try:
                out[name] = _eval_const(value_node, {})
            except (SizingError, ZeroDivisionError, OverflowError):
                continue
    return out


def size_constants(src: str) -> dict[str, SizeSpec]:
    """The module-level size constants of a KernelBench source, with their constraints.

    A size is a literal int >= 2 (or a literal tuple of ints named `*_shape`/`*_size`) whose name
    is not structural (kernel_size, stride, padding, dilation, groups, heads, axis indices, eps,
    probabilities, scales, ...). Floats and bools are never sizes.
    """
    consts = _literal_assignments(src)
    anchors = [
        v for k, v in consts.items() if _ANCHOR.search(k.lower()) and type(v) is int and v > 1
    ]
    specs: dict[str, SizeSpec] = {}
    for name, value in consts.items():
        if isinstance(value, list):
            value = tuple(value)
        is_int = type(value) is int and value >= 2
        is_tuple = isinstance(value, tuple) and value and all(type(v) is int for v in value)
        if not (is_int or is_tuple) or not _is_size_name(name, value):
            continue
        if is_tuple and max(value) < 2:
            continue
        ref = value if is_int else max(value)
        multiple = 1
        for a in anchors if _CHANNEL_LIKE.search(name.lower()) else []:
            if ref % a == 0:
                multiple = multiple * a // math.gcd(multiple, a)
        floor = min(ref, 2 if _BATCH.search(name.lower()) else 4)
        specs[name] = SizeSpec(
            name=name, value=value, multiple=multiple, floor=floor, odd=is_int and value % 2 == 1
        )
    return specs
