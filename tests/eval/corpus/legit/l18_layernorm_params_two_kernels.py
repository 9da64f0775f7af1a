"""Legit: LayerNorm with the nn.LayerNorm parameters (weight, bias, eps); statistics in one
kernel, normalisation in a second."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def stats_kernel(x_ptr, mean_ptr, rstd_ptr, F, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < F
    x = tl.load(x_ptr + row * F + offs, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / F
    d = tl.where(mask, x - mean, 0.0)
    var = tl.sum(d * d, axis=0) / F
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, 1.0 / tl.sqrt(var + eps))


@triton.jit
def norm_kernel(x_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, out_ptr, F, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < F
    x = tl.load(x_ptr + row * F + offs, mask=mask, other=0.0)
    y = (x - tl.load(mean_ptr + row)) * tl.load(rstd_ptr + row)
    y = y * tl.load(w_ptr + offs, mask=mask) + tl.load(b_ptr + offs, mask=mask)
    tl.store(out_ptr + row * F + offs, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x):
        F = self.ln.normalized_shape[-1]
        x2 = x.contiguous().view(-1, F)
        rows = x2.shape[0]
        mean = torch.empty(rows, device=x.device, dtype=torch.float32)
        rstd = torch.empty(rows, device=x.device, dtype=torch.float32)
        out = torch.empty_like(x2)
        B = triton.next_power_of_2(F)
        stats_kernel[(rows,)](x2, mean, rstd, F, self.ln.eps, BLOCK=B)
        norm_kernel[(rows,)](x2, self.ln.weight, self.ln.bias, mean, rstd, out, F, BLOCK=B)
        return out.view(x.shape)
