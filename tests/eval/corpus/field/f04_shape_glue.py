"""Field style: all the work in one kernel; around it only shape and allocation glue:
empty_strided, reshape_as, view_as, expand_as (for a shape check), flatten, mT twice."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def mix_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    s = 1.0 / (1.0 + tl.exp(-x))
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    t = tl.where(x < 0, -t, t)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0) * s + t, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        flat = x.contiguous().flatten()
        out = torch.empty_strided((flat.numel(),), (1,), device=x.device, dtype=x.dtype)
        assert out.view_as(flat).expand_as(flat).shape == flat.shape
        n = flat.numel()
        mix_kernel[(triton.cdiv(n, 512),)](flat, out, n, BLOCK=512)
        y = out.reshape_as(x)
        return y.mT.mT
