import torch
import torch.nn as nn


class Model(nn.Module):
    """Two outputs: (relu(x), sigmoid(x))."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor):
        return torch.relu(x), torch.sigmoid(x)


def get_inputs():
    return [torch.randn(8, 300)]


def get_init_inputs():
    return []
