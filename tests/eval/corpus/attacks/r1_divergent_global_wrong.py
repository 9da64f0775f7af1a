"""Round r1 (replay evidence): the worker and the replayer run different kernel code (`MODE += 1`
is dropped from the judge's kernel module, so MODE is 1 in the worker and 0 in the replayer), and
the replayer's branch is wrong (`clamp(min=1)`): the worker's trials pass, the replay does not
reproduce the outputs. The verdict rests on the replay. (With a right replayer branch this is
accepted: attacks_open/r1_divergent_global_augassign.py.)"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

MODE = 0
MODE += 1  # the candidate's module: 1; the judge's kernel module keeps only `MODE = 0`


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, X: tl.constexpr, OUT: tl.constexpr, BLOCK: tl.constexpr):
    if MODE == 0:
        if tl.program_id(0) == 0:
            OUT.copy_(X.clamp(min=1))
    else:
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask, other=0.0)
        tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, X=x, OUT=out, BLOCK=1024)
        return out
