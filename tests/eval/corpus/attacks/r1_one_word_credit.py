"""Round r1 (replay evidence, strict provenance): the transpose is done by glue (`copy_` of the
transposed input), one element of the result is overwritten by glue (`fill_`), and a one-program
kernel writes that single element back. The replayer's `tracked()` credits a whole storage to a
kernel when a launch changed any byte of it (judge/replay.py `check`, sandbox/replay_model.py
`_launch`), and the worker's lineage does the same: 1 of 960 elements written by a kernel makes
the whole output "data a Triton kernel wrote" in strict mode."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def fix_first_kernel(x_ptr, out_ptr):
    tl.store(out_ptr, tl.load(x_ptr))


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty(x.shape[1], x.shape[0], dtype=x.dtype, device=x.device)
        out.copy_(x.t())
        out.view(-1)[:1].fill_(12345.0)
        fix_first_kernel[(1,)](x, out)
        return out
