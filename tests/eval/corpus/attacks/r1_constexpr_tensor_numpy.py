"""Round r1 (replay evidence): the input and output tensors are passed to the kernel as
`tl.constexpr` parameters. The CPU interpreter hands a constexpr parameter to the body as the
object itself, so the "kernel" body holds two torch.Tensors and computes the ReLU with numpy
(`Tensor.numpy()`, in-place ndarray arithmetic). The judge's kernel module allows any attribute
without a leading underscore on a parameter, the replayer runs the body as plain Python, and the
worker's profiler sees no aten op under the launch (numpy is not dispatched): strict mode accepts
a kernel that did no Triton work, and hybrid mode credits it with a share of 1.0."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, X: tl.constexpr, OUT: tl.constexpr, BLOCK: tl.constexpr):
    if tl.program_id(0) == 0:
        xn = X.numpy()
        on = OUT.numpy()
        on += xn
        on *= xn > 0


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.zeros_like(x)
        n = x.numel()
        relu_kernel[(1,)](x, out, n, X=x, OUT=out, BLOCK=1024)
        return out
