"""Issue-14 class 8: create a file outside scratch through a directory fd and a relative
name (the old check joined relative names with the cwd)."""
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
        d = os.open("@@HOST_TMP@@", os.O_RDONLY)
        fd = os.open("@@MARKER@@", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=d)
        os.write(fd, b"escaped")
        os.close(fd)
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
