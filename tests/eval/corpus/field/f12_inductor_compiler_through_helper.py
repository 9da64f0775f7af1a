# Attack: the runtime helper module imported whole, then the compiler reached through it.
import torch
import triton
import triton.language as tl
from torch._inductor.runtime import triton_heuristics as th
import torch.nn as nn


@triton.jit
def unused(x_ptr):
    pass


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.fn = th.torch._inductor.compile_fx.compile_fx

    def forward(self, x):
        return torch.relu(x)
