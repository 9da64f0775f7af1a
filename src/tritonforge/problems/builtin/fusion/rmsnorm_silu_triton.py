import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rmsnorm_silu_kernel(
    x_ptr, w_ptr, y_ptr, D, stride_x, stride_y, eps,
    BLOCK_D: tl.constexpr,
):
    # one program per row: mean of squares, then scale by rsqrt and weight, then SiLU
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
    offs = tl.arange(0, BLOCK_D)

    acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
    for d0 in range(0, D, BLOCK_D):
        x = tl.load(x_row + d0 + offs, mask=d0 + offs < D, other=0.0).to(tl.float32)
        acc += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / D + eps)

    for d0 in range(0, D, BLOCK_D):
        ok = d0 + offs < D
        x = tl.load(x_row + d0 + offs, mask=ok, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + d0 + offs, mask=ok, other=0.0).to(tl.float32)
        h = x * rstd * w
        s = h / (1.0 + tl.exp(-h))  # silu(h) = h * sigmoid(h)
        tl.store(y_row + d0 + offs, s.to(y_ptr.dtype.element_ty), mask=ok)


class ModelNew(nn.Module):
    """silu(rms_norm(x) * weight) over the last dimension in one Triton kernel (one program per row)."""

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super(ModelNew, self).__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        D = x.shape[-1]
        x2 = x.reshape(-1, D).contiguous()  # [rows, D]
        y = torch.empty_like(x2)
        block_d = min(triton.next_power_of_2(D), 4096)
        warps = 8 if block_d >= 2048 else 4
        rmsnorm_silu_kernel[(x2.shape[0],)](
            x2, self.weight, y, D, x2.stride(0), y.stride(0), self.eps,
            BLOCK_D=block_d, num_warps=warps,
        )
        return y.view(x.shape)
