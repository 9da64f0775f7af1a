import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rms_norm_kernel(x_ptr, w_ptr, out_ptr, N, eps, BLOCK: tl.constexpr):
    # One program per row of x [rows, N]: pass 1 mean of squares, pass 2 scale and multiply by w.
    row = tl.program_id(0)
    x_row = x_ptr + row.to(tl.int64) * N
    out_row = out_ptr + row.to(tl.int64) * N
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for c in range(0, N, BLOCK):
        offs = c + tl.arange(0, BLOCK)
        x = tl.load(x_row + offs, mask=offs < N, other=0.0).to(tl.float32)
        acc += x * x
    rms = tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    for c in range(0, N, BLOCK):
        offs = c + tl.arange(0, BLOCK)
        mask = offs < N
        x = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_row + offs, x / rms * w, mask=mask)


class ModelNew(nn.Module):
    """RMSNorm in one Triton kernel (one program per row)."""

    def __init__(self, features: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.randn(features))  # same draw as Model under the same seed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        N = x.shape[-1]
        rows = x.numel() // N
        out = torch.empty_like(x)
        w = self.weight.contiguous()
        BLOCK = min(triton.next_power_of_2(N), 4096)
        rms_norm_kernel[(rows,)](x, w, out, N, self.eps, BLOCK=BLOCK, num_warps=8)
        return out
