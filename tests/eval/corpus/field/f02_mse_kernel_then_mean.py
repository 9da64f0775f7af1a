"""Field style: the squared differences in a Triton kernel, then one `.mean()` over the kernel's
output (a final O(output) reduction in PyTorch)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sq_diff_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    d = tl.load(a_ptr + offs, mask=mask, other=0.0) - tl.load(b_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, d * d, mask=mask)


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        a, b = predictions.contiguous(), targets.contiguous()
        sq = torch.empty_like(a)
        n = a.numel()
        sq_diff_kernel[(triton.cdiv(n, 1024),)](a, b, sq, n, BLOCK=1024)
        return sq.mean()
