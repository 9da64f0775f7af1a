"""Round r1 (replay evidence): two kernels with one name. The top-level `relu_kernel` computes
with PyTorch on tensors passed as constexprs; a second `relu_kernel`, defined inside a
module-level `if` block, is the honest Triton ReLU. The worker launches the second (the name's
binding when forward runs); the recipe names the launch `relu_kernel`, and the judge's kernel
module holds only the top-level definitions, so the replayer runs the first. The launch a recipe
records is identified by a name, not by the function the worker ran."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, X: tl.constexpr, OUT: tl.constexpr, BLOCK: tl.constexpr):
    if tl.program_id(0) == 0:
        OUT.copy_(X.clamp(min=0))


if triton is not None:  # rebound inside a block: the worker launches this one

    @triton.jit
    def relu_kernel(x_ptr, out_ptr, n, X: tl.constexpr, OUT: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask, other=0.0)
        tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, X=x, OUT=out, BLOCK=1024)
        return out
