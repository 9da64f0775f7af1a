"""Class 4: a kernel with a huge unrolled loop (compile time on GPU, interpretation time on CPU)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def slow_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, REPEAT: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    acc = tl.maximum(x, 0.0)
    for _ in tl.static_range(REPEAT):
        acc = acc * 1.0
    tl.store(out_ptr + offs, acc, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        slow_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024, REPEAT=10_000_000)
        return out
