"""Issue-14 class 3: `getattr(sys, 'modules')` reaches the audit module without an
import event and switches the audit off (empty candidate path), then computes in PyTorch."""
import sys
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
        mods = getattr(sys, "modules")
        state = mods["tritonforge.evaluation.sandbox.audit_state"].STATE
        state.candidate_path = ""
        with torch.autograd.profiler.record_function(f"tf::audit::{state.token}"):
            y = torch.relu(x)
        out = torch.empty_like(x)
        n = x.numel()
        copy_kernel[(triton.cdiv(n, 1024),)](y, out, n, BLOCK=1024)
        return out
