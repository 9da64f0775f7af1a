"""Legit: the kernel writes into a padded workspace; the output is a view (slice) of it,
returned after a no-op `.to(x.dtype)`."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_padded_kernel(x_ptr, ws_ptr, rows, cols, ws_cols, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    mask = c < cols
    x = tl.load(x_ptr + r * cols + c, mask=mask, other=0.0)
    tl.store(ws_ptr + r * ws_cols + c, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        rows, cols = x.shape
        ws_cols = triton.next_power_of_2(cols)
        ws = torch.zeros(rows, ws_cols, device=x.device, dtype=x.dtype)
        relu_padded_kernel[(rows,)](x, ws, rows, cols, ws_cols, BLOCK=ws_cols)
        return ws[:, :cols].to(x.dtype)
