"""Issue-14 class 7 (hybrid, minimum share 0.5): PyTorch computes the ReLU; a Triton kernel
writes a buffer larger than the input (real but useless work) to inflate the share."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def fill_kernel(buf_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(buf_ptr + offs, offs.to(tl.float32), mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        n = 4 * x.numel()
        buf = torch.empty(n, device=x.device)
        fill_kernel[(triton.cdiv(n, 1024),)](buf, n, BLOCK=1024)
        return torch.relu(x)
