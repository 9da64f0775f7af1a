"""Class 1: _DisableTorchDispatch reached through torch._C found by a name built at runtime
(past the static rules, which resolve getattr with a constant name)."""
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


def launch_relu(x, out):
    n = x.numel()
    relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)


def attr(obj, name):
    """obj.<name> for a name built at runtime (string.Formatter: no getattr in the source)."""
    return string.Formatter().get_field("0." + name, (obj,), {})[0]

C = attr(torch, "_" + "C")


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        launch_relu(x, out)
        with C._DisableTorchDispatch():
            return x.relu()
