"""Legit: @triton.heuristics (EVEN_N decided from the arguments) and a constant from `math`."""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

INV_SQRT2 = 1.0 / math.sqrt(2.0)


@triton.heuristics({"EVEN_N": lambda args: args["n"] % args["BLOCK"] == 0})
@triton.jit
def gelu_kernel(x_ptr, out_ptr, n, inv_sqrt2, BLOCK: tl.constexpr, EVEN_N: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN_N:
        x = tl.load(x_ptr + offs)
    else:
        x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    y = 0.5 * x * (1.0 + tl.math.erf(x * inv_sqrt2))
    if EVEN_N:
        tl.store(out_ptr + offs, y)
    else:
        tl.store(out_ptr + offs, y, mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        gelu_kernel[(triton.cdiv(n, 512),)](x, out, n, INV_SQRT2, BLOCK=512)
        return out
