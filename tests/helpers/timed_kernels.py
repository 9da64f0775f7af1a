"""Triton ReLU candidates that behave otherwise in some of their calls, chosen by call count: for
the tests of what is timed and what is re-checked after timing (test_timed_audit.py,
test_recheck_unreplayed.py).

Covers: `relu(when, block, result)` (the call counter in Python state: in the calls where the
expression `when` holds, the kernel launches with `block` and forward returns `result`, a
Python expression of `out` and `x`) and `counted(good_calls)` (the counter in device memory,
read by the kernel: the first `good_calls` calls compute ReLU, later ones zeros, with the same
launches every call). Does not cover: the call counts of a judgement (hc.cpu_timing_settings).
"""

from __future__ import annotations

RELU = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class Sub(torch.Tensor):
    pass


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        timed = WHEN
        out = torch.empty_like(x)
        n = x.numel()
        block = BLOCK_WHEN if timed else 1024
        relu_kernel[(triton.cdiv(n, block),)](x, out, n, BLOCK=block)
        return RESULT_WHEN if timed else out
"""

COUNTED = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_counted(x_ptr, out_ptr, count_ptr, n, BLOCK: tl.constexpr):
    # a call counter kept in device memory: after GOOD_CALLS calls, the kernel stops computing
    calls = tl.load(count_ptr)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.where(calls < GOOD_CALLS, tl.maximum(x, 0.0), 0.0)
    tl.store(out_ptr + offs, y, mask=mask)
    tl.store(count_ptr, calls + 1, mask=tl.program_id(0) == 0)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.count = torch.zeros(1, dtype=torch.int32)

    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        relu_counted[(triton.cdiv(n, 1 << 20),)](x, out, self.count.to(x.device), n, BLOCK=1 << 20)
        return out
"""


def relu(when: str = "False", block: int = 1024, result: str = "out") -> str:
    """RELU launching with `block` and returning `result` in the calls where `when` holds."""
    source = RELU.replace("RESULT_WHEN", result).replace("BLOCK_WHEN", str(block))
    return source.replace("WHEN", when)


def counted(good_calls: int) -> str:
    """COUNTED computing ReLU in its first `good_calls` calls only."""
    return COUNTED.replace("GOOD_CALLS", str(good_calls))
