import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def cumsum_kernel(x_ptr, out_ptr, L, INNER, BLOCK: tl.constexpr):
    # x viewed as [OUTER, L, INNER] (contiguous); one program per (outer, inner) line of L
    # elements at stride INNER. Scan BLOCK elements at a time; the carry is the last lane of the
    # scanned chunk (masked lanes hold the identity, so it is the running total).
    line = tl.program_id(0)
    o = line // INNER
    i = line % INNER
    base = o.to(tl.int64) * L * INNER + i
    carry = 0.0
    for c in range(0, L, BLOCK):
        pos = c + tl.arange(0, BLOCK)
        mask = pos < L
        x = tl.load(x_ptr + base + pos.to(tl.int64) * INNER, mask=mask, other=0.0).to(tl.float32)
        y = tl.cumsum(x, axis=0) + carry
        tl.store(out_ptr + base + pos.to(tl.int64) * INNER, y, mask=mask)
        carry = tl.sum(tl.where(tl.arange(0, BLOCK) == BLOCK - 1, y, 0.0), axis=0)


class ModelNew(nn.Module):
    """Inclusive prefix sum. Triton version: one program per scanned line, blockwise scan with a carry."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        dim = self.dim % x.dim()
        L = x.shape[dim]
        outer = math.prod(x.shape[:dim])
        inner = math.prod(x.shape[dim + 1 :])
        out = torch.empty_like(x)
        BLOCK = min(triton.next_power_of_2(L), 1024)
        cumsum_kernel[(outer * inner,)](x, out, L, inner, BLOCK=BLOCK, num_warps=4)
        return out
