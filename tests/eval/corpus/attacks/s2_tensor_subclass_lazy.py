"""Issue-14 class 2: forward returns a Tensor subclass holding an unwritten buffer; its
__torch_function__ computes the ReLU when the evaluator reads the output (detach/contiguous)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


PENDING = []


class Lazy(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if PENDING and getattr(func, "__name__", "") in ("detach", "contiguous"):
            out, src = PENDING.pop()
            out.copy_(torch.relu(src))
        return super().__torch_function__(func, types, args, kwargs)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        copy_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)  # a decoy write
        PENDING.append((out, x))
        return out.as_subclass(Lazy)
