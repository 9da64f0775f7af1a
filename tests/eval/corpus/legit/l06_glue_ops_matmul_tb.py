"""Legit: glue around a kernel: transpose + contiguous, reshape/view, permute, .to(dtype),
torch.zeros, unsqueeze/squeeze."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def mm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :],
                    mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k0 + rk)[:, None] * N + rn[None, :],
                    mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")  # fp32 exact: TF32 misses 1e-4
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def forward(self, A, B):
        bt = B.t().contiguous()  # [K, N]
        a = A.to(torch.float32).reshape(A.shape[0], -1).unsqueeze(0).squeeze(0)
        a = a.permute(1, 0).permute(1, 0).contiguous()
        M, K = a.shape
        N = bt.shape[1]
        c = torch.zeros(M * N, device=A.device, dtype=torch.float32).view(M, N)
        mm_kernel[(triton.cdiv(M, 16), triton.cdiv(N, 16))](a, bt, c, M, N, K, BM=16, BN=16, BK=16)
        return c.view(M, N).to(A.dtype)
