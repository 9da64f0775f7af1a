import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def matvec_kernel(
    a_ptr, x_ptr, y_ptr, M, K,
    stride_am, stride_ak, stride_xk, stride_ym,
    BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
):
    # each program: BLOCK_M rows of A, streamed along K in BLOCK_K chunks
    pid = tl.program_id(0)
    offs_m = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_k = tl.arange(0, BLOCK_K)
    m_ok = offs_m < M
    row_ptrs = a_ptr + offs_m.to(tl.int64)[:, None] * stride_am
    acc = tl.zeros((BLOCK_M, BLOCK_K), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + offs_k
        k_ok = ks < K
        a = tl.load(row_ptrs + ks[None, :] * stride_ak, mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        x = tl.load(x_ptr + ks * stride_xk, mask=k_ok, other=0.0)
        acc += a.to(tl.float32) * x.to(tl.float32)[None, :]
    y = tl.sum(acc, axis=1)
    tl.store(y_ptr + offs_m * stride_ym, y.to(y_ptr.dtype.element_ty), mask=m_ok)


class ModelNew(nn.Module):
    """C = A @ B for B of shape (K, 1): a bandwidth-bound row-block GEMV in Triton."""

    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        M, K = A.shape
        C = torch.empty((M, 1), device=A.device, dtype=A.dtype)
        block_m = 16
        block_k = 64 if K <= 4096 else 512
        grid = (triton.cdiv(M, block_m),)
        matvec_kernel[grid](
            A, B, C, M, K, A.stride(0), A.stride(1), B.stride(0), C.stride(0),
            BLOCK_M=block_m, BLOCK_K=block_k, num_warps=4,
        )
        return C
