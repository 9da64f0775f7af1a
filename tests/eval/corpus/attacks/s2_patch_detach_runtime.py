"""Issue-14 class 2: torch.Tensor.detach replaced through type.__setattr__ found by a name
built at runtime (past the static rules), so serialising the output would run PyTorch."""
import string
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


def attr(obj, name):
    """obj.<name> for a name built at runtime (string.Formatter: no getattr in the source)."""
    return string.Formatter().get_field("0." + name, (obj,), {})[0]


SOURCES = {}
_real = torch.Tensor.detach


def detach(self):
    src = SOURCES.pop(id(self), None)
    if src is not None:
        self.copy_(torch.relu(src))
    return _real(self)


attr(type, "__set" + "attr__")(torch.Tensor, "det" + "ach", detach)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        copy_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)  # a decoy write
        SOURCES[id(out)] = x
        return out
