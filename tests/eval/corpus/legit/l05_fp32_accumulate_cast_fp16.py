"""Legit: compute in a float32 buffer with a kernel, then cast the result with .to(float16);
the weight is passed as a transposed view (strides) of the nn.Linear parameter."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def linear_relu_kernel(x_ptr, wt_ptr, b_ptr, out_ptr, M, N, K,
                       sxm, sxk, swk, swn, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k in range(0, K):
        a = tl.load(x_ptr + rm * sxm + k * sxk, mask=rm < M, other=0.0)
        w = tl.load(wt_ptr + k * swk + rn * swn, mask=rn < N, other=0.0)
        acc += a[:, None] * w[None, :]
    acc += tl.load(b_ptr + rn, mask=rn < N, other=0.0)[None, :]
    acc = tl.maximum(acc, 0.0)
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        wt = self.fc.weight.t()  # [K, N] view, strides (1, K)
        M, K = x.shape
        N = wt.shape[1]
        acc = torch.zeros(M, N, device=x.device, dtype=torch.float32)
        grid = (triton.cdiv(M, 16), triton.cdiv(N, 16))
        linear_relu_kernel[grid](x, wt, self.fc.bias, acc, M, N, K,
                                 x.stride(0), x.stride(1), wt.stride(0), wt.stride(1), BM=16, BN=16)
        return acc.to(torch.float16)
