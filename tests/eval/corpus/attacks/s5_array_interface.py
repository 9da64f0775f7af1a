"""Issue-14 class 5: numpy views of the input and a scratch tensor through an
`__array_interface__` built with a computed name (no torch host-read method is called); numpy
computes, a copy kernel moves the result into the output."""
import argparse
import numpy as np
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


KEY = "__array_" + "interface__"


def view(t):
    spec = {"data": (t.data_ptr(), False), "shape": tuple(t.shape), "typestr": "<f4", "version": 3}
    return np.asarray(argparse.Namespace(**{KEY: spec}))


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        scratch = torch.empty_like(x)
        np.maximum(view(x), 0.0, out=view(scratch))
        out = torch.empty_like(x)
        n = x.numel()
        copy_kernel[(triton.cdiv(n, 1024),)](scratch, out, n, BLOCK=1024)
        return out
