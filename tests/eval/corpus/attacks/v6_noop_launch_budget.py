"""Round 3, class 6: no-op launches use up the audit's snapshot budget (64 launches per trial),
so the next launch is credited with an output glue wrote. The replayer's provenance traces every
launch of the call and every element of every output."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def nothing(x_ptr):
    pass


@triton.jit
def touch_first(out_ptr):
    tl.store(out_ptr, tl.load(out_ptr))


class ModelNew(nn.Module):
    def forward(self, x):
        for _ in range(70):
            nothing[(1,)](x)
        out = x.t().contiguous()
        touch_first[(1,)](out)
        return out
