"""Legit: keyword arguments only, a grid lambda, integer sizes from x.size(), num_warps."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_shift_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, x * 2.0 + 1.0, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        xc = x.contiguous()
        n = xc.size(0) * xc.size(1)
        out = torch.empty_like(xc)
        scale_shift_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](
            x_ptr=xc, out_ptr=out, n=n, BLOCK=64, num_warps=2
        )
        return out
