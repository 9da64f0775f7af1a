"""Issue 29, class 8 (numerics): softmax without subtracting the row maximum. Exact on inputs of
a few units; exp overflows once the inputs sit near +100 (fp32), so the result is NaN there."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, out_ptr, D, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < D
    x = tl.load(x_ptr + row * D + offs, mask=mask, other=float("-inf")).to(tl.float32)
    e = tl.exp(x)
    tl.store(out_ptr + row * D + offs, e / tl.sum(e, axis=0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        D = x.shape[-1]
        out = torch.empty_like(x)
        softmax_kernel[(x.numel() // D,)](x, out, D, BLOCK=triton.next_power_of_2(D))
        return out
