"""Round 3, class 6: one word written by a kernel credits its whole storage. The transposed
input is copied into the output by glue, one element is cleared, and a kernel writes that
element back: the storage changed during a launch, so a storage-level provenance credits the
whole output to the kernel although glue moved every other element."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def first_element(x_ptr, out_ptr):
    tl.store(out_ptr, tl.load(x_ptr))


class ModelNew(nn.Module):
    def forward(self, x):
        out = x.t().contiguous()
        out[0, 0] = 0.0
        first_element[(1,)](x, out)
        return out
