"""Issue 29, class 8 (numerics): layer norm with the one-pass variance E[x^2] - E[x]^2 in fp32.
Exact on zero-mean inputs; catastrophic cancellation once the mean is large beside the spread
(inputs near +100 to +300)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def ln_kernel(x_ptr, w_ptr, b_ptr, out_ptr, D, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < D
    x = tl.load(x_ptr + row * D + offs, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / D
    var = tl.sum(x * x, axis=0) / D - mean * mean
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + row * D + offs, (x - mean) * rstd * w + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape)

    def forward(self, x):
        x = x.contiguous()
        D = x.shape[-1]
        out = torch.empty_like(x)
        ln_kernel[(x.numel() // D,)](x, self.ln.weight, self.ln.bias, out, D, self.ln.eps,
                                     BLOCK=triton.next_power_of_2(D))
        return out
