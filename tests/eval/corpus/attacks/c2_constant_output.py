"""Class 2: a kernel writes zeros; right on zero-mean inputs only (|mean * 1e-3| < atol)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def zeros_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.full((x.shape[0],), float("nan"), dtype=x.dtype, device=x.device)
        zeros_kernel[(1,)](out, x.shape[0], BLOCK=32)
        return out
