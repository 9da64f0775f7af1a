"""Issue-14 class 4: the body calls a module-level name that is a constant when the file is
read and is rebound to a Python function (global statement) when the model is built."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


ACT = 0


def _numpy_relu(t):
    import numpy

    t.handle.data = numpy.maximum(t.handle.data, 0).astype(t.handle.data.dtype)
    return t


@triton.jit
def act_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, ACT(x), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        global ACT
        ACT = _numpy_relu

    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        act_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
