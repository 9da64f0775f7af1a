"""Hybrid: SiLU as torch.sigmoid (PyTorch) followed by a Triton multiply kernel."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def mul_kernel(x_ptr, s_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    s = tl.load(s_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, x * s, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        s = torch.sigmoid(x)
        out = torch.empty_like(x)
        n = x.numel()
        mul_kernel[(triton.cdiv(n, 1024),)](x, s, out, n, BLOCK=1024)
        return out
