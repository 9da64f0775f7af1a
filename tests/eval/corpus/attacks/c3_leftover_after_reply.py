"""Class 3 (GPU): device work left running after the worker's reply, so that it overlaps the
reference's round in the device's timing process (another CUDA context, time-sliced with this
one), where it inflates the reference's time. The kernel is honest; a finalizer on the input
tensor (released after the timed calls, outside the timer) queues a long device sleep. Each
timed call's own trial is not affected: the loop syncs the device before the next trial."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

LEFTOVER_CYCLES = 400_000_000  # about 0.2 s of device time on an H200


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class _Later:
    """Runs when the tensor it hangs on is released: after the worker's last sync."""

    def __init__(self, cuda: bool):
        self.cuda = cuda

    def __del__(self):
        if self.cuda:
            torch.cuda._sleep(LEFTOVER_CYCLES)


class ModelNew(nn.Module):
    def forward(self, x):
        if not hasattr(x, "later"):
            x.later = _Later(x.is_cuda)
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
