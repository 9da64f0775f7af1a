"""Issue 29, classes 2 and 3: the sub-interpreter module imported by name through a stdlib
wrapper (importlib.import_module, reached as an attribute of torch, registered with
functools.singledispatch: the import runs from a functools frame, not the candidate's)."""
import functools

import torch
import torch.nn as nn
import triton
import triton.language as tl

load = functools.singledispatch(torch.importlib.import_module)
interpreters = load("_xxsub" + "interpreters")
interpreters.run_string(interpreters.create(), "import ctypes")


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
