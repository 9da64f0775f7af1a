"""Field style: row sums in a Triton kernel, then a division by the row length in PyTorch (a
final O(output) scale)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_sum_kernel(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * N + cols, mask=cols < N, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        rows, n = x.shape
        sums = torch.empty(rows, device=x.device, dtype=x.dtype)
        row_sum_kernel[(rows,)](x, sums, n, BLOCK=256)
        return sums / n
