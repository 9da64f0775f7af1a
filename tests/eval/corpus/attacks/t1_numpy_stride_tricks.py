"""Issue 29, class 5: numpy's stride tricks read host memory at an id()-derived address (the
input tensor's own Python object, from which its data pointer is read) without any torch call;
the first step to the tensor's data, read with no tripwire on the way."""
import numpy as np
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


def _peek(address, nbytes):
    anchor = np.frombuffer(b"\0" * 8, dtype=np.uint8)
    base = anchor.__array_interface__["data"][0]
    view = np.lib.stride_tricks.as_strided(anchor, shape=(address - base + nbytes,), strides=(1,))
    return view[address - base :].copy()


class ModelNew(nn.Module):
    def forward(self, x):
        header = _peek(id(x), 64)  # the THPVariable: its at::Tensor pointer lies in here
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out if header.size else x
