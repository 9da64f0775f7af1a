"""Class 1: ModelNew is the reference class under another name."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def unused(x_ptr):
    pass


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


ModelNew = Model
