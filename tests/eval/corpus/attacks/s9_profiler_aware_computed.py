"""Issue-14 class 9: the profiler probe found by a computed name (past the static rules):
the kernel runs only while profiled, PyTorch otherwise (the caching check's first call and
timed calls are not profiled)."""
import string
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


def attr(obj, name):
    """obj.<name> for a name built at runtime (string.Formatter: no getattr in the source)."""
    return string.Formatter().get_field("0." + name, (obj,), {})[0]


def PROBE(mod):
    return attr(mod, "_profiler_" + "enabled")


class ModelNew(nn.Module):
    def forward(self, x):
        if PROBE(torch.autograd)():
            out = torch.empty_like(x)
            n = x.numel()
            relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
            return out
        return torch.relu(x)
