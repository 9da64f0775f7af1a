"""Legit: constexpr arguments select the activation at compile time (module-level constants)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

ACT_RELU = 0
ACT_LEAKY = 1


@triton.jit
def act_kernel(x_ptr, out_ptr, n, slope, ACT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    if ACT == 0:
        y = tl.maximum(x, 0.0)
    else:
        y = tl.where(x >= 0, x, x * slope)
    tl.store(out_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float = 0.01):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        act_kernel[(triton.cdiv(n, 256),)](x, out, n, self.negative_slope, ACT=ACT_LEAKY, BLOCK=256)
        return out
