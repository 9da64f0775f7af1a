"""Round r1 (replay timing, CPU interpreter): a call counter kept on a module-level
`tl.constexpr` object (Python state, which the replayer's reset() does not restore). From the
fifth call of a process on, the kernel writes zeros instead of the ReLU: the worker makes four
calls (three trials and the caching check's repeat), the replayer two checks, a warmup, then the
timed calls. The replayer compares every timed call's outputs with the first's
(timing_loop.Consistency): timed_output_mismatch."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

CALLS = tl.constexpr(0)  # a Python object whose attributes outlive a call under the interpreter


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    if tl.program_id(0) == 0:
        CALLS.value += 1
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    if CALLS.value > 4:  # from the replay's timed calls on: write zeros instead of the work
        tl.store(out_ptr + offs, x * 0.0, mask=mask)
    else:
        tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
