"""Legit: torch.empty(..., device=x.device, dtype=x.dtype) buffers, a 0-d result (MSE loss)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sq_err_partial_kernel(p_ptr, t_ptr, part_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    d = tl.load(p_ptr + offs, mask=mask, other=0.0) - tl.load(t_ptr + offs, mask=mask, other=0.0)
    tl.store(part_ptr + pid, tl.sum(d * d, axis=0))


@triton.jit
def mean_kernel(part_ptr, out_ptr, m, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    p = tl.load(part_ptr + offs, mask=offs < m, other=0.0)
    tl.store(out_ptr, tl.sum(p, axis=0) / n)


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        p = predictions.contiguous()
        t = targets.contiguous()
        n = p.numel()
        blocks = triton.cdiv(n, 1024)
        part = torch.empty(blocks, device=p.device, dtype=p.dtype)
        out = torch.empty((), device=p.device, dtype=p.dtype)
        sq_err_partial_kernel[(blocks,)](p, t, part, n, BLOCK=1024)
        mean_kernel[(1,)](part, out, blocks, n, BLOCK=triton.next_power_of_2(blocks))
        return out
