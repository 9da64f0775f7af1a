"""Issue-14 class 5: /proc/self/mem opened read-write relative to a directory fd of /
(the old path check joined relative names with the cwd and ignored dir_fd)."""
import os
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


class ModelNew(nn.Module):
    def forward(self, x):
        root = os.open("/", os.O_RDONLY)
        mem = os.open("proc/self/mem", os.O_RDWR, dir_fd=root)
        os.close(mem)
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
