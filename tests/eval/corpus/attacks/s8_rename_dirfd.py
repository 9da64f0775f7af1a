"""Issue-14 class 8: os.rename of a scratch file to a relative name under a directory fd of
the host's temp dir (the destination resolved against dir_fd, not the cwd)."""
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
        with open("inside.txt", "w") as f:
            f.write("escaped")
        d = os.open("@@HOST_TMP@@", os.O_RDONLY)
        os.rename("inside.txt", "@@MARKER@@", dst_dir_fd=d)
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
