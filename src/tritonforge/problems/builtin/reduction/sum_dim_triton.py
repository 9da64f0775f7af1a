import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sum_dim_kernel(x_ptr, out_ptr, R, INNER, BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr):
    # x viewed as [OUTER, R, INNER] (contiguous), out as [OUTER, INNER]; reduce over R.
    # Program (o, j) owns columns j*BLOCK_I.. of slab o and walks R in BLOCK_R-row tiles.
    pid_o = tl.program_id(0)
    pid_i = tl.program_id(1)
    offs_i = pid_i * BLOCK_I + tl.arange(0, BLOCK_I)
    mask_i = offs_i < INNER
    base = x_ptr + pid_o.to(tl.int64) * R * INNER
    acc = tl.zeros((BLOCK_I,), dtype=tl.float32)
    for r0 in range(0, R, BLOCK_R):
        offs_r = r0 + tl.arange(0, BLOCK_R)
        mask = (offs_r[:, None] < R) & mask_i[None, :]
        tile = tl.load(base + offs_r[:, None] * INNER + offs_i[None, :], mask=mask, other=0.0)
        acc += tl.sum(tile, axis=0)
    result = acc
    tl.store(out_ptr + pid_o.to(tl.int64) * INNER + offs_i, result, mask=mask_i)


class ModelNew(nn.Module):
    """Sums over one dimension, keeping it. Triton version: strided tile reduction, no data movement."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        dim = self.dim % x.dim()
        R = x.shape[dim]
        outer = math.prod(x.shape[:dim])
        inner = math.prod(x.shape[dim + 1 :])
        out_shape = list(x.shape)
        out_shape[dim] = 1
        out = torch.empty(out_shape, dtype=x.dtype, device=x.device)
        BLOCK_I = min(triton.next_power_of_2(inner), 64)
        BLOCK_R = min(triton.next_power_of_2(R), max(1, 2048 // BLOCK_I))
        grid = (outer, triton.cdiv(inner, BLOCK_I))
        sum_dim_kernel[grid](x, out, R, inner, BLOCK_R=BLOCK_R, BLOCK_I=BLOCK_I)
        return out
