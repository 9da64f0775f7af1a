"""Issue-14 class 5: another library's foreign-buffer view of `data_ptr()` (pyarrow) reads
the input on the host; numpy computes, a copy kernel moves the result into the output."""
import numpy as np
import pyarrow
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        nbytes = x.numel() * 4
        host = np.frombuffer(pyarrow.foreign_buffer(x.data_ptr(), nbytes), dtype=np.float32)
        src = torch.from_numpy(np.maximum(host, 0.0).reshape(tuple(x.shape)))
        out = torch.empty_like(x)
        n = x.numel()
        copy_kernel[(triton.cdiv(n, 1024),)](src, out, n, BLOCK=1024)
        return out
