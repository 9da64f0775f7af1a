"""Reference for the status corpus: ReLU on a [64, 100] fp32 tensor."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


rows = 64
cols = 100


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
