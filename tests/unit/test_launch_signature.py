"""Launch signatures (audit_launch.raw_entry): a kernel parameter named like a launch option
(`stream`) is signed like any argument; a callable grid signs the grid it returned for the
launch (audit_launch._Grid), and runs with the launch window closed (`STATE.in_launch` 0 while
it runs, restored after, also when it raises). End to end: tests/eval/test_launch_window.py."""

from __future__ import annotations

import pytest
import torch

from tritonforge.evaluation.sandbox import audit_launch
from tritonforge.evaluation.sandbox.audit_state import STATE


class _Kernel:
    """Stands for a JITFunction (raw_entry reads `fn.fn.__name__`)."""

    def __init__(self) -> None:
        def relu_kernel(x_ptr, out_ptr, stream, BLOCK):
            return None

        self.fn = relu_kernel


def test_a_kernel_parameter_named_stream_is_signed() -> None:
    x, out = torch.randn(64), torch.empty(64)
    k = _Kernel()
    full = audit_launch.raw_entry(k, (x, out), {"grid": (1,), "stream": 64, "BLOCK": 1024})
    one = audit_launch.raw_entry(k, (x, out), {"grid": (1,), "stream": 1, "BLOCK": 1024})
    assert full[2] != one[2], f"same scalars for stream=64 and stream=1: {full[2]!r}"


def test_a_callable_grid_signs_what_it_returned_and_runs_outside_the_launch(monkeypatch) -> None:
    monkeypatch.setattr(STATE, "in_launch", 1)
    seen = []

    def grid(meta):
        seen.append(STATE.in_launch)
        return (meta["n"] // 4,)

    wrapped = audit_launch._Grid(grid)
    assert wrapped({"n": 64}) == (16,) and seen == [0] and STATE.in_launch == 1
    x = torch.randn(64)
    full = audit_launch.raw_entry(_Kernel(), (x,), {"grid": wrapped})
    wrapped({"n": 4})
    one = audit_launch.raw_entry(_Kernel(), (x,), {"grid": wrapped})
    assert full[1] == "(16,)" and one[1] == "(1,)"

    def broken(meta):
        raise ValueError("grid")

    with pytest.raises(ValueError):
        audit_launch._Grid(broken)({})
    assert STATE.in_launch == 1
