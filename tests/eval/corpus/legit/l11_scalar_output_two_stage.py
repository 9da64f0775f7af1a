"""Legit: a 0-d output from a two-stage reduction (per-block partials, then one program)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def partial_sq_kernel(x_ptr, part_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(part_ptr + pid, tl.sum(x * x, axis=0))


@triton.jit
def final_sum_kernel(part_ptr, out_ptr, m, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    p = tl.load(part_ptr + offs, mask=offs < m, other=0.0)
    tl.store(out_ptr, tl.sum(p, axis=0))


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        n = x.numel()
        blocks = triton.cdiv(n, 256)
        part = torch.empty(blocks, device=x.device, dtype=torch.float32)
        out = torch.empty((), device=x.device, dtype=x.dtype)
        partial_sq_kernel[(blocks,)](x, part, n, BLOCK=256)
        final_sum_kernel[(1,)](part, out, blocks, BLOCK=triton.next_power_of_2(blocks))
        return out
