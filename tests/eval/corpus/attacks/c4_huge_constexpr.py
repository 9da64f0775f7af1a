"""Class 4: a huge constexpr block size (a 2**30-element tile)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def big_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        big_kernel[(1,)](x, out, x.numel(), BLOCK=1 << 30)
        return out
