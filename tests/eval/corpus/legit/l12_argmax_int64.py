"""Legit: an int64 output (argmax over dim 1 of a 3-d tensor)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def argmax_dim1_kernel(x_ptr, out_ptr, D1, D2, BLOCK: tl.constexpr):
    b = tl.program_id(0)
    j = tl.program_id(1)
    i = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + b * D1 * D2 + i * D2 + j, mask=i < D1, other=float("-inf"))
    tl.store(out_ptr + b * D2 + j, tl.argmax(x, axis=0).to(tl.int64))


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        assert self.dim == 1
        x = x.contiguous()
        B, D1, D2 = x.shape
        out = torch.empty((B, D2), device=x.device, dtype=torch.int64)
        argmax_dim1_kernel[(B, D2)](x, out, D1, D2, BLOCK=triton.next_power_of_2(D1))
        return out
