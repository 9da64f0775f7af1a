"""Legit: the kernel is launched in a Python loop, one launch per chunk of rows (row views)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_rows_kernel(x_ptr, out_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < cols
        x = tl.load(x_ptr + row * cols + offs, mask=mask, other=0.0)
        tl.store(out_ptr + row * cols + offs, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    CHUNK = 3

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        rows, cols = x.shape
        for r0 in range(0, rows, self.CHUNK):
            xs = x[r0 : r0 + self.CHUNK]
            os_ = out[r0 : r0 + self.CHUNK]
            relu_rows_kernel[(xs.shape[0],)](xs, os_, cols, BLOCK=512)
        return out
