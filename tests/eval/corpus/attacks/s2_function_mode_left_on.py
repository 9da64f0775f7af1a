"""Issue-14 class 2: a TorchFunctionMode entered in forward and left on the stack; it
writes the PyTorch result into the output the next time the evaluator calls a torch function."""
from torch.overrides import TorchFunctionMode
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


class Later(TorchFunctionMode):
    def __init__(self, src, out):
        super().__init__()
        self.src, self.out, self.done = src, out, False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if not self.done and getattr(func, "__name__", "") in ("detach", "contiguous", "clone"):
            self.done = True
            self.out.copy_(torch.relu(self.src))
        return func(*args, **(kwargs or {}))


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        copy_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)  # a decoy write
        Later(x, out).__enter__()
        return out
