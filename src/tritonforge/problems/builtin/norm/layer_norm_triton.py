import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layer_norm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, N, eps, BLOCK: tl.constexpr):
    # One program per row of x [rows, N]: mean, then variance of (x - mean) (two passes, exact
    # for shifted inputs), then y = (x - mean) * rstd * w + b.
    row = tl.program_id(0)
    x_row = x_ptr + row.to(tl.int64) * N
    out_row = out_ptr + row.to(tl.int64) * N
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for c in range(0, N, BLOCK):
        offs = c + tl.arange(0, BLOCK)
        acc += tl.load(x_row + offs, mask=offs < N, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / N
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for c in range(0, N, BLOCK):
        offs = c + tl.arange(0, BLOCK)
        mask = offs < N
        x = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
        d = tl.where(mask, x - mean, 0.0)
        acc += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    for c in range(0, N, BLOCK):
        offs = c + tl.arange(0, BLOCK)
        mask = offs < N
        x = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_row + offs, (x - mean) * rstd * w + b, mask=mask)


class ModelNew(nn.Module):
    """LayerNorm in one Triton kernel (one program per normalised row)."""

    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)  # same parameters as Model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        N = math.prod(self.ln.normalized_shape)
        rows = x.numel() // N
        out = torch.empty_like(x)
        w = self.ln.weight.contiguous()
        b = self.ln.bias.contiguous()
        BLOCK = min(triton.next_power_of_2(N), 4096)
        layer_norm_kernel[(rows,)](x, w, b, out, N, self.ln.eps, BLOCK=BLOCK, num_warps=8)
        return out
