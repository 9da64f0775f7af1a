"""The module of a candidate's kernels alone (judge/replay_kernels.py), which the trusted replayer
imports: what it keeps, and every kernel body it refuses because under the CPU interpreter the
body would run as Python in the replayer.

Covers: kept kernels without their autotune/heuristics decorators, literal jit options kept,
the triton/math/triton_helpers imports and the constants kernels read (and nothing else of the
source: the model, helpers, other imports); refusals of names outside the kernel's reach
(builtins such as `__import__`, `getattr`, `open`; module-level state; plain functions),
attributes starting with `_` or the interpreter's internals, attribute chains that leave
triton.language (`triton.runtime.build`, `tl.core` modules), lambdas, nested functions,
comprehensions, `global`, imports and non-literal defaults; constant expressions that call
anything but Triton/math constants. Does not cover: running the module (test_replay.py).
"""

from __future__ import annotations

import pytest

from tritonforge.evaluation.judge.replay_kernels import KernelRefused, kernel_module

HEADER = """
import math
import os
import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice
"""

GOOD = (
    HEADER
    + """
SCALE = 2.0
BLOCK_C: tl.constexpr = tl.constexpr(128)
INV = 1.0 / math.sqrt(2.0)
STATE = {"calls": 0}


@triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=2)], key=["n"])
@triton.heuristics({"EVEN": lambda a: a["n"] % 64 == 0})
@triton.jit(do_not_specialize=["n"])
def scaled(x_ptr, out_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = helper(x) * SCALE + INV
    for _ in tl.static_range(2):
        y = tl.maximum(y, 0.0)
    tl.store(out_ptr + offs, y.to(tl.float32), mask=mask)


@triton.jit
def helper(x):
    return tl.where(x > 0, x, 0.0)


def host_helper(n):
    return os.cpu_count() + n


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return x
"""
)


def test_kernels_constants_and_imports_are_kept_and_nothing_else() -> None:
    mod = kernel_module(GOOD)
    src, names = mod.source, mod.names
    assert names == ["helper", "scaled"]
    assert "@triton.jit(do_not_specialize=['n'])" in src
    assert "autotune" not in src and "heuristics" not in src and "lambda" not in src
    assert "SCALE = 2.0" in src and "INV = 1.0 / math.sqrt(2.0)" in src
    assert "STATE" not in src and "host_helper" not in src and "ModelNew" not in src
    assert "import os" not in src and "import torch" not in src
    compile(src, "<kernels>", "exec")


def _kernel(body: str, extra: str = "") -> str:
    lines = "\n".join("    " + line for line in body.strip().splitlines())
    return f"{HEADER}\n{extra}\n\n@triton.jit\ndef k(x_ptr, n, BLOCK: tl.constexpr):\n{lines}\n"


@pytest.mark.parametrize(
    "body, extra, why",
    [
        ("__import__('os').system('true')", "", ".system of a value"),
        ("__import__('os')", "", "'__import__'"),
        ("f = getattr(tl, 'load')", "", "'getattr'"),
        ("open('/tmp/x', 'w')", "", "'open'"),
        ("x = STATE", "STATE = {'a': 1}", "'STATE'"),
        ("x = helper(n)", "def helper(n):\n    return n", "'helper'"),
        ("x = torch.ones(1)", "", ".ones of a value"),
        ("x = torch", "", "'torch'"),
        ("x = os.getpid()", "", ".getpid of a value"),
        ("x = os", "", "'os'"),
        ("x_ptr.numpy()", "", ".numpy of a value"),
        ("BLOCK.memo = 1", "", "assigns to an attribute"),
        ("tl.static_print(f'{x_ptr!r}')", "", "JoinedStr"),
        ("x = tl.load(x_ptr).handle", "", ".handle"),
        ("x = tl.__dict__", "", ".__dict__"),
        ("x = tl.load.__globals__", "", ".__globals__"),
        ("x = triton.runtime.build", "", "triton.runtime"),
        ("x = triton.compile", "", "triton.compile"),
        ("x = tl.core.builtins", "", "builtins"),
        ("x = tl.core.inspect", "", "inspect"),
        ("x = lambda: 0", "", "Lambda"),
        ("x = [i for i in range(3)]", "", "ListComp"),
        ("global n", "", "Global"),
        ("import os", "", "Import"),
        ("def inner():\n    return 1", "", "FunctionDef"),
        ("with tl.static_range(2):\n    pass", "", "With"),
        ("x = libdevice.__loader__", "", "__loader__"),
    ],
)
def test_kernel_bodies_that_reach_outside_triton_are_refused(
    body: str, extra: str, why: str
) -> None:
    with pytest.raises(KernelRefused) as err:
        kernel_module(_kernel(body, extra))
    assert why in str(err.value)


@pytest.mark.parametrize("default", ["os.getpid()", "[]", "{}"])
def test_defaults_that_are_not_scalar_literals_are_refused(default: str) -> None:
    """A mutable default (a list) would be Python state the replayer cannot restore."""
    src = HEADER + f"\n@triton.jit\ndef k(x_ptr, n={default}):\n    pass\n"
    with pytest.raises(KernelRefused, match="default"):
        kernel_module(src)


@pytest.mark.parametrize(
    "extra",
    [
        "MODE = 0\nMODE += 1",
        "MODE = 0\nif True:\n    MODE = 1",
        "MODE = 0\ndef f():\n    global MODE\n    MODE = 2",
        "MODE = 0\nfor MODE in range(2):\n    pass",
    ],
)
def test_globals_bound_more_than_once_are_state(extra: str) -> None:
    """The replayer's module holds the top-level constant; a rebinding anywhere in the module
    (the worker runs with the rebound value) makes the name state, which a kernel may not read."""
    with pytest.raises(KernelRefused, match="'MODE'"):
        kernel_module(_kernel("x = MODE", extra))


def test_a_kernel_bound_twice_is_refused() -> None:
    src = (
        _kernel("pass")
        + "\nif True:\n    @triton.jit\n    def k(x_ptr, n, BLOCK: tl.constexpr):\n        pass\n"
    )
    with pytest.raises(KernelRefused, match="more than once"):
        kernel_module(src)


@pytest.mark.parametrize(
    "const",
    [
        "C = triton.runtime.build.compile_module_from_src('x', 'y')",
        "C = tl.constexpr(os.getpid())",
        "C = math.__dict__",
        "C = STATE",
    ],
)
def test_constants_that_compute_anything_else_are_left_out(const: str) -> None:
    """Such a name is then unbound in the kernel module: the kernel that reads it is refused."""
    src = _kernel("x = C", f"STATE = 1\n{const}")
    with pytest.raises(KernelRefused, match="'C'"):
        kernel_module(src)


def test_triton_language_and_math_constants_are_usable() -> None:
    body = """
offs = tl.arange(0, BLOCK)
x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
y = libdevice.exp(x) * math.pi + tl.math.rsqrt(x)
tl.store(x_ptr + offs, y.to(tl.float16), mask=offs < n)
"""
    mod = kernel_module(_kernel(body))
    src, names = mod.source, mod.names
    assert names == ["k"] and "from triton.language.extra import libdevice" in src


def test_guarded_imports_and_triton_host_helpers_in_constants() -> None:
    """libdevice moved between Triton versions: `try: from A import libdevice except
    ImportError: from B import libdevice` is kept whole; constants may use triton.cdiv and
    triton.next_power_of_2 of constants (nothing else of triton's host side)."""
    src = (
        "import triton\nimport triton.language as tl\n"
        "try:\n    from triton.language.extra import libdevice\n"
        "except ImportError:\n    from triton.language.extra.cuda import libdevice\n"
        "BLOCK = triton.next_power_of_2(100)\n"
        "@triton.jit\ndef k(x_ptr):\n    x = tl.load(x_ptr + tl.arange(0, BLOCK))\n"
        "    tl.store(x_ptr + tl.arange(0, BLOCK), libdevice.exp(x))\n"
    )
    mod = kernel_module(src)
    out, names = mod.source, mod.names
    assert names == ["k"] and "except ImportError:" in out and "next_power_of_2(100)" in out
    compile(out, "<kernels>", "exec")
    bad = src.replace("except ImportError:", "except ImportError:\n    import os")
    with pytest.raises(KernelRefused):  # the block holds a forbidden import: not kept
        kernel_module(bad)
