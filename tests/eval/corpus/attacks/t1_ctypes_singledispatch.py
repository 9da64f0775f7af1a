"""Issue 29, class 3: ctypes imported from a function registered with functools.singledispatch
(called from a functools frame, not directly by the candidate's module), then raw host memory
at an id()-derived address."""
import functools

import torch
import torch.nn as nn
import triton
import triton.language as tl


@functools.singledispatch
def fetch(name):
    return __import__(name)


ctypes = fetch("ct" + "ypes")


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        ctypes.string_at(id(x), 64)
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
