"""Legit: the kernel takes the input shape as a tuple argument (sum over dim 1, keepdim)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sum_dim1_kernel(x_ptr, out_ptr, shape, BLOCK: tl.constexpr):
    b = tl.program_id(0)
    j = tl.program_id(1)
    D1 = shape[1]
    D2 = shape[2]
    i = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + b * D1 * D2 + i * D2 + j, mask=i < D1, other=0.0)
    tl.store(out_ptr + b * D2 + j, tl.sum(x, axis=0))


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        x = x.contiguous()
        B, D1, D2 = x.shape
        out = torch.empty((B, 1, D2), device=x.device, dtype=x.dtype)
        sum_dim1_kernel[(B, D2)](x, out, tuple(x.shape), BLOCK=triton.next_power_of_2(D1))
        return out
