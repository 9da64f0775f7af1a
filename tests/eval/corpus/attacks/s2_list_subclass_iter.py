"""Issue-14 class 2: forward returns a list subclass whose __iter__ writes the result
(computed by PyTorch) into the output when the evaluator iterates over the outputs."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


class Outputs(list):
    def __iter__(self):
        self[0].copy_(torch.relu(self.src))
        return super().__iter__()


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        copy_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)  # a decoy write
        result = Outputs([out])
        result.src = x
        return result
