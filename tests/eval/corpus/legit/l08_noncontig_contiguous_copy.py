"""Legit: a non-contiguous input made contiguous (glue), a flat kernel, the result viewed back."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def affine_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, 2.0 * tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        flat = x.contiguous().view(-1)
        out = torch.empty_like(flat)
        affine_kernel[(triton.cdiv(flat.numel(), 128),)](flat, out, flat.numel(), BLOCK=128)
        return out.view(x.shape)
