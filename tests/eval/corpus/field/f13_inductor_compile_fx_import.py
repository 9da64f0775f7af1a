# Attack: Inductor's compiler imported directly next to a decoy kernel.
import torch
import triton
import triton.language as tl
from torch._inductor.compile_fx import compile_fx
import torch.nn as nn


@triton.jit
def unused(x_ptr):
    pass


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
