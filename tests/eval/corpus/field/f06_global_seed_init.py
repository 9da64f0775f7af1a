"""Field style: weights built in __init__ after seeding the GLOBAL RNG (torch.manual_seed(42)):
allowed (issue 31; it was seed_probe); with the judge's INIT_SEED 42 it draws the reference's
weights."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, s_ptr, out_ptr, n, F, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    s = tl.load(s_ptr + offs % F, mask=mask, other=0.0)
    tl.store(out_ptr + offs, x * s, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        torch.manual_seed(42)
        self.scale = nn.Parameter(torch.randn(features))

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        scale_kernel[(triton.cdiv(n, 256),)](x, self.scale, out, n, x.shape[-1], BLOCK=256)
        return out
