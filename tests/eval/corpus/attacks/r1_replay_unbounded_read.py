"""Round r1 (replay, CPU interpreter): the interpreter's raw loads and stores are bounded to the
launch's tensors by audit_memory.py, whose check runs only while the audit hook is armed
(`_memory`: `if hook.armed is not None`). The replayer's hook is never armed, so a replayed
kernel reads (and could write) any address of the trusted replayer. The same kernel in the
worker is `illegal_memory_access` (see s3_interpreter_pointer_peek); here only the replayer takes
the branch (`IN_REPLAY` is 1 in the judge's kernel module only) and reads 64 bytes before its
input's storage. Object addresses are one f-string away (`f"{tl.program_id!r}"`: JoinedStr and
FormattedValue are allowed nodes), so the replayer's own Python objects are in reach."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

IN_REPLAY = 1
IN_REPLAY -= 1  # 0 in the candidate's module; the judge's kernel module keeps `IN_REPLAY = 1`


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.maximum(x, 0.0)
    if IN_REPLAY == 1:
        # 64 bytes before the input's storage: outside every tensor of the launch (the worker's
        # interpreter refuses this; the replayer's does not check)
        header = tl.load((x_ptr - 16) + tl.arange(0, 16))
        y = y + tl.sum(tl.where(header == header, 0.0, 0.0), 0)
    tl.store(out_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
