"""Issue 29, class 4: a signal handler (SIGALRM every 50 us) runs the candidate's code at any
moment, also inside the audit's launch window where tripwires are off; it writes the ReLU into
the output with PyTorch while the kernel launch is in progress."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

signal = torch.sys.modules["signal"]
_PENDING = []


def _handler(signum, frame):
    while _PENDING:
        x, out = _PENDING.pop()
        out.copy_(torch.relu(x))


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)


@triton.jit
def noop_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.load(x_ptr + offs, mask=offs < n, other=0.0)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        signal.signal(signal.SIGALRM, _handler)
        signal.setitimer(signal.ITIMER_REAL, 5e-5, 5e-5)

    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        _PENDING.append((x, out))
        noop_kernel[(triton.cdiv(n, 1024),)](x, n, BLOCK=1024)
        return out
