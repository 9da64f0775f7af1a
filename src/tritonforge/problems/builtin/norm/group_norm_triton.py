import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def group_norm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, C, HW, CPG, eps, BLOCK: tl.constexpr):
    # x [B, C, HW] contiguous; program (n, g) owns the contiguous chunk of CPG * HW elements of
    # group g in sample n: mean, then variance of (x - mean), then normalise with per-channel w, b.
    n = tl.program_id(0)
    g = tl.program_id(1)
    G_SIZE = CPG * HW
    base = (n.to(tl.int64) * C + g * CPG) * HW
    x_grp = x_ptr + base
    out_grp = out_ptr + base
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for c in range(0, G_SIZE, BLOCK):
        offs = c + tl.arange(0, BLOCK)
        acc += tl.load(x_grp + offs, mask=offs < G_SIZE, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / G_SIZE
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for c in range(0, G_SIZE, BLOCK):
        offs = c + tl.arange(0, BLOCK)
        mask = offs < G_SIZE
        x = tl.load(x_grp + offs, mask=mask, other=0.0).to(tl.float32)
        d = tl.where(mask, x - mean, 0.0)
        acc += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / G_SIZE + eps)
    for c in range(0, G_SIZE, BLOCK):
        offs = c + tl.arange(0, BLOCK)
        mask = offs < G_SIZE
        ch = g * CPG + offs // HW
        x = tl.load(x_grp + offs, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + ch, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + ch, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_grp + offs, (x - mean) * rstd * w + b, mask=mask)


class ModelNew(nn.Module):
    """GroupNorm in one Triton kernel (one program per (sample, group))."""

    def __init__(self, num_groups: int, num_channels: int):
        super().__init__()
        self.gn = nn.GroupNorm(num_groups=num_groups, num_channels=num_channels)  # same parameters

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        B, C = x.shape[0], x.shape[1]
        HW = math.prod(x.shape[2:])
        G = self.gn.num_groups
        CPG = C // G
        out = torch.empty_like(x)
        BLOCK = min(triton.next_power_of_2(CPG * HW), 4096)
        grid = (B, G)
        group_norm_kernel[grid](
            x, self.gn.weight, self.gn.bias, out, C, HW, CPG, self.gn.eps, BLOCK=BLOCK, num_warps=8
        )
        return out
