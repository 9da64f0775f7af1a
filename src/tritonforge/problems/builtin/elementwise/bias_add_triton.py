import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bias_add_kernel(
    x_ptr, bias_ptr, out_ptr, n_rows, n_cols, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr
):
    # x, out: [n_rows, n_cols] contiguous; bias: [n_cols]. One program per BLOCK_M x BLOCK_N tile.
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    mask = (rows[:, None] < n_rows) & col_mask[None, :]
    offsets = rows[:, None].to(tl.int64) * n_cols + cols[None, :]
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    b = tl.load(bias_ptr + cols, mask=col_mask, other=0.0)
    tl.store(out_ptr + offsets, x + b[None, :], mask=mask)


class ModelNew(nn.Module):
    """x + bias (bias broadcast over rows) in one Triton kernel over 2-D tiles."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        n_cols = bias.numel()
        x2 = x.contiguous().reshape(-1, n_cols)  # [n_rows, n_cols]; leading dims flattened
        bias = bias.contiguous()
        n_rows = x2.shape[0]
        out = torch.empty_like(x2)
        BLOCK_M = 4
        BLOCK_N = 1024
        grid = (triton.cdiv(n_rows, BLOCK_M), triton.cdiv(n_cols, BLOCK_N))
        bias_add_kernel[grid](x2, bias, out, n_rows, n_cols, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N)
        return out.reshape(x.shape)
