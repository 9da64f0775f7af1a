"""Issue-14 class 3: under the CPU interpreter a kernel turns its pointer argument into an
integer and reads any object of the process (here the model object; the audit's state alike)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)


@triton.jit
def peek_kernel(x_ptr, out_ptr, target):
    base = x_ptr.to(tl.int64)
    p = (x_ptr + (target - base) // 4)
    v = tl.load(p)
    tl.store(out_ptr, v)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        probe = torch.empty(1, device=x.device)
        peek_kernel[(1,)](x, probe, id(self))
        relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
