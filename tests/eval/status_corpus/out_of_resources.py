"""Status out_of_resources (GPU only): a 256x256x256 fp32 tl.dot tile, pipelined over 4 stages,
needs far more shared memory than the 228 KB of an H100/H200 SM. The CPU interpreter has no
shared memory, so there the kernel just runs (and is wrong): the corpus skips it on CPU.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def big_tile_kernel(x_ptr, out_ptr, rows, cols, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    for k0 in tl.range(0, cols, BLOCK, num_stages=4):
        k = k0 + tl.arange(0, BLOCK)
        a = tl.load(
            x_ptr + r[:, None] * cols + k[None, :],
            mask=(r[:, None] < rows) & (k[None, :] < cols),
            other=0.0,
        )
        b = tl.load(
            x_ptr + r[None, :] * cols + k[:, None],
            mask=(r[None, :] < rows) & (k[:, None] < cols),
            other=0.0,
        )
        acc = tl.dot(a, b, acc)
    c = tl.arange(0, BLOCK)
    x = tl.load(
        x_ptr + r[:, None] * cols + c[None, :],
        mask=(r[:, None] < rows) & (c[None, :] < cols),
        other=0.0,
    )
    y = tl.maximum(x, 0.0) + 0.0 * acc
    tl.store(
        out_ptr + r[:, None] * cols + c[None, :], y, mask=(r[:, None] < rows) & (c[None, :] < cols)
    )


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        rows, cols = x.shape
        big_tile_kernel[(1,)](x, out, rows, cols, BLOCK=256)
        return out
