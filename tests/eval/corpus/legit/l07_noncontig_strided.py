"""Legit: a transposed (non-contiguous) input read through its strides, no copy."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def affine_kernel(x_ptr, out_ptr, R, C, sxr, sxc, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    mask = c < C
    x = tl.load(x_ptr + r * sxr + c * sxc, mask=mask, other=0.0)
    tl.store(out_ptr + r * C + c, 2.0 * x + 1.0, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        R, C = x.shape
        out = torch.empty((R, C), device=x.device, dtype=x.dtype)
        affine_kernel[(R,)](x, out, R, C, x.stride(0), x.stride(1), BLOCK=triton.next_power_of_2(C))
        return out
