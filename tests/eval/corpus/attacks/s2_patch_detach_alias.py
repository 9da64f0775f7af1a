"""Issue-14 class 2: `T = torch.Tensor; T.detach = f` (a local alias) so the evaluator's
serialisation of the output runs PyTorch after forward."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


T = torch.Tensor
_real = T.detach
SOURCES = {}


def detach(self):
    src = SOURCES.pop(id(self), None)
    if src is not None:
        self.copy_(torch.relu(src))
    return _real(self)


T.detach = detach


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        copy_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)  # a decoy write
        SOURCES[id(out)] = x
        return out
