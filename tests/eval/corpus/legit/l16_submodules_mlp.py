"""Legit: a module tree (child modules in a ModuleList, each owning an nn.Linear) whose
parameters feed the kernels; ReLU fused into the first layer through a constexpr flag."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def linear_kernel(x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, RELU: tl.constexpr,
                  BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k in range(0, K):
        a = tl.load(x_ptr + rm * K + k, mask=rm < M, other=0.0)
        w = tl.load(w_ptr + rn * K + k, mask=rn < N, other=0.0)
        acc += a[:, None] * w[None, :]
    acc += tl.load(b_ptr + rn, mask=rn < N, other=0.0)[None, :]
    if RELU:
        acc = tl.maximum(acc, 0.0)
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


class TritonLinear(nn.Module):
    def __init__(self, d_in: int, d_out: int, relu: bool):
        super().__init__()
        self.inner = nn.Linear(d_in, d_out)
        self.relu = relu

    def forward(self, x):
        M, K = x.shape
        N = self.inner.out_features
        out = torch.empty(M, N, device=x.device, dtype=x.dtype)
        grid = (triton.cdiv(M, 16), triton.cdiv(N, 16))
        linear_kernel[grid](x, self.inner.weight, self.inner.bias, out, M, N, K,
                            RELU=self.relu, BM=16, BN=16)
        return out


class ModelNew(nn.Module):
    def __init__(self, d_in: int, d_hidden: int, d_out: int):
        super().__init__()
        self.layers = nn.ModuleList(
            [TritonLinear(d_in, d_hidden, True), TritonLinear(d_hidden, d_out, False)]
        )
        assert len(list(self.modules())) == 6

    def forward(self, x):
        x = x.contiguous()
        for layer in self.layers:
            x = layer(x)
        return x
