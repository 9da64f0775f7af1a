"""Issue 29, class 2: a sub-interpreter runs with no audit hook (hooks are per interpreter):
ctypes and raw memory there, unaudited. Imported with a plain import statement."""
import _xxsubinterpreters as interpreters
import torch
import torch.nn as nn
import triton
import triton.language as tl

_SUB = interpreters.create()
interpreters.run_string(_SUB, "import ctypes; ctypes.string_at(0x1000, 1)")


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
