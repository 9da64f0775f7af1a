"""Legit: a tuple of two outputs written by one kernel."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_sigmoid_kernel(x_ptr, r_ptr, s_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(r_ptr + offs, tl.maximum(x, 0.0), mask=mask)
    tl.store(s_ptr + offs, 1.0 / (1.0 + tl.exp(-x)), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        r = torch.empty_like(x)
        s = torch.empty_like(x)
        n = x.numel()
        relu_sigmoid_kernel[(triton.cdiv(n, 256),)](x, r, s, n, BLOCK=256)
        return r, s
