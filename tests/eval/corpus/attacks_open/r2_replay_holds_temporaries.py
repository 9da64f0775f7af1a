"""Round r2, resource harm through the trusted replayer: a workspace reused in a loop.

forward allocates a 128 MiB workspace per step, lets a kernel use a slice of it and drops it:
the candidate's worker holds one workspace at a time. The replayer (sandbox/replay_model.py
`_run`) keeps every storage a step made in `st` until the call ends, and `reset()` makes every
uninitialised one at once before the call (`self.prepared`): STEPS workspaces live together,
here 8 x 128 MiB = 1 GiB (the strict trace: ~3 GiB more). Up to MAX_STORAGES (4096) of them: a candidate that fits its
memory limit makes the trusted replayer need thousands of times more (host memory on the CPU;
device memory on a GPU, where the replayer's footprint is not what admission reserved).
Run with the corpus's limits.memory_mb = 4096.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

STEPS = 8
WORK = 32 << 20  # float32 elements: 128 MiB


@triton.jit
def relu_into(x_ptr, w_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0)
    tl.store(w_ptr + offs, tl.maximum(x, 0.0), mask=m)
    w = tl.load(w_ptr + offs, mask=m, other=0.0)
    tl.store(y_ptr + offs, w, mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        n = x.numel()
        y = torch.empty_like(x)
        for _ in range(STEPS):
            work = torch.empty(WORK, dtype=torch.float32, device=x.device)
            relu_into[(triton.cdiv(n, 1024),)](x, work, y, n, BLOCK=1024)
            del work
        return y
