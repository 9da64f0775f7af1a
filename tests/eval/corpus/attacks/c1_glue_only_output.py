"""Class 1: the output is produced by allowed glue (a copy of the transposed input); a kernel is
launched on it but writes nothing (n = 0)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def touch_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(out_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty(x.shape[1], x.shape[0], dtype=x.dtype, device=x.device)
        out.copy_(x.t())
        touch_kernel[(1,)](out, 0, BLOCK=128)
        return out
